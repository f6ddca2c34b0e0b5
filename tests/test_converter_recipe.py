"""The recipes of docs/architectures.md, "Adding a converter": a chain layer, per-neuron parameters, branches, elements.

The examples of recipes (a), (c) and (d) run as the docs print them."""
from pathlib import Path

import pytest
import torch
from torch import nn

from neuralgraph.graph import (
    GraphConversionError,
    common_layout,
    graph_shortcuts,
    graph_skips,
    graph_to_module,
    module_to_graph,
)

DOCS = Path(__file__).resolve().parents[1] / "docs" / "architectures.md"


def documented_example(heading: str) -> str:
    """The first ``python`` code block after ``heading`` in docs/architectures.md."""
    section = DOCS.read_text().split(f"\n{heading}\n", 1)[1]
    return section.split("```python\n", 1)[1].split("```", 1)[0]


def run_documented(*headings: str) -> dict:
    namespace = {"__name__": "documented_example"}
    for heading in headings:
        exec(compile(documented_example(heading), str(DOCS), "exec"), namespace)
    return namespace


def test_the_documented_chain_layer_converts_and_rebuilds_exactly():
    torch.manual_seed(0)
    example = run_documented("### (a) A layer of the chain")
    graph, model, rebuilt = example["graph"], example["model"], example["rebuilt"]
    assert common_layout(graph) == (2, 8, 1) and graph.architecture[0] == "TransposedLinear(2, 8)"
    assert all(torch.equal(a, b) for a, b in zip(rebuilt.state_dict().values(), model.state_dict().values()))
    edited = graph.clone()
    edited.edge_attr = 2 * edited.edge_attr
    doubled = graph_to_module(edited, model)
    assert torch.equal(doubled[0].weight, 2 * model[0].weight) and torch.equal(doubled[2].weight, 2 * model[2].weight)


class Affine(nn.Module):
    """``y = gamma * x + beta`` per feature."""

    def __init__(self, features: int):
        super().__init__()
        self.gamma = nn.Parameter(1 + 0.1 * torch.randn(features))
        self.beta = nn.Parameter(0.1 * torch.randn(features))

    def forward(self, x):
        return self.gamma * x + self.beta


def affine_model(layer=Affine):
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(2, 8), layer(8), nn.Tanh(), nn.Linear(8, 1))


def test_a_per_neuron_layer_without_a_converter_is_refused_by_name():
    with pytest.raises(GraphConversionError, match=r"parameter '1.gamma' \(Affine\) is read outside a converted layer"):
        module_to_graph(affine_model())
    with pytest.raises(GraphConversionError, match=r"layer '1' \(PReLU\) has parameters but no converter"):
        module_to_graph(nn.Sequential(nn.Linear(2, 4), nn.PReLU(4), nn.Linear(4, 1)))


def test_a_per_neuron_scale_folds_into_the_layer_before_it():
    model = affine_model()
    linear, affine = model[0], model[1]
    folded = nn.Sequential(nn.Linear(2, 8), nn.Tanh(), nn.Linear(8, 1))
    with torch.no_grad():
        folded[0].weight.copy_(affine.gamma[:, None] * linear.weight)
        folded[0].bias.copy_(affine.gamma * linear.bias + affine.beta)
        folded[2].load_state_dict(model[3].state_dict())
    x = torch.randn(5, 2)
    torch.testing.assert_close(folded(x), model(x))
    assert common_layout(module_to_graph(folded)) == (2, 8, 1)


def test_the_documented_element_is_a_diagonal_group_and_round_trips():
    torch.manual_seed(0)
    example = run_documented("### (d) An element: several node layers, edges of several kinds")
    graph, model, rebuilt = example["graph"], example["model"], example["rebuilt"]
    assert common_layout(graph) == (2, 8, 8, 1) and graph.num_edges == 16 + 8 + 8
    assert all(torch.equal(a, b) for a, b in zip(rebuilt.state_dict().values(), model.state_dict().values()))
    edited = graph.clone()
    edited.edge_attr = 2 * edited.edge_attr
    assert torch.equal(graph_to_module(edited, model)[1].gamma, 2 * model[1].gamma)


def test_the_documented_residual_adds_become_skip_and_shortcut_edges():
    torch.manual_seed(0)
    example = run_documented("### (a) A layer of the chain",
                             "### (c) A branching layer: residual adds and projection shortcuts")
    block = module_to_graph(nn.Sequential(nn.Linear(2, 4), nn.ReLU(), example["Block"](4), nn.Linear(4, 1)))
    assert common_layout(block) == (2, 4, 4, 4, 1) and graph_skips(block) == ((1, 3),)
    down = example["graph"]
    shortcuts = graph_shortcuts(down)
    assert common_layout(down) == (2, 4, 6, 6, 1) and list(shortcuts) == [(1, 3)]
    assert shortcuts[(1, 3)].shape == (6, 4, 1)


def test_a_concatenation_is_refused_naming_the_branch():
    class Concat(nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = nn.Linear(2, 3), nn.Linear(2, 3)

        def forward(self, x):
            return torch.cat([self.a(x), self.b(x)], dim=1)

    with pytest.raises(GraphConversionError, match="a branch or skip connection that does not end in a residual add"):
        module_to_graph(Concat())
