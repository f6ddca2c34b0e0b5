"""Fixed-seed float64 outputs of every registered architecture on every task, pinned.

Refactors of the encoder, the layers (dense and sparse path), the heads or the batch must leave
what a model computes unchanged. ``tests/data/pinned_outputs.safetensors`` holds, for each
(architecture, task): the loss, the task's outputs, and per parameter the gradient's norm and
its projection on a fixed random direction; for each architecture also the node and edge
features of a mixed-layout batch (the sparse path). Combinations an architecture refuses are
pinned by their one-line error (``pinned_refusals.json``).

Regenerate only when a change of the computation is intended:
``python tests/test_pinned_outputs.py`` (and say why in the commit). A newly registered
architecture without pins is skipped by the test until ``python tests/test_pinned_outputs.py NAME``
adds its pins (and only its) to the files.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from neuralgraph.data.cnn_zoo import ZooBatch, zoo_graph
from neuralgraph.data.inr_dataset import InrBatch
from neuralgraph.graph import GraphSpec, batch_graphs, mlp_to_graph
from neuralgraph.nn import METANETS, build_metanet
from neuralgraph.training import tasks

DATA = Path(__file__).parent / "data"
PINS, REFUSALS = DATA / "pinned_outputs.safetensors", DATA / "pinned_refusals.json"
TASKS = {
    "InrEditing": {"k": 2},
    "InrClassification": {},
    "WeightStatisticRegression": {},
    "GeneralizationPrediction": {},
    "EquivariantWeightPrediction": {},
}
METANET_CONFIG = {"hidden_dim": 16, "num_layers": 2}
# float64 rounding of a few hundred operations per output: far below any change of the math
TOLERANCE = 1e-10


def random_mlps(layout, batch_size, generator, scale=0.5):
    weights = [scale * torch.randn(batch_size, o, i, generator=generator, dtype=torch.float64)
               for i, o in zip(layout, layout[1:])]
    biases = [scale * torch.randn(batch_size, o, generator=generator, dtype=torch.float64) for o in layout[1:]]
    return weights, biases


def task_batch(task: str):
    """A fixed float64 batch for ``task``: three INRs of layout (2, 8, 8, 1), or three zoo CNNs."""
    generator = torch.Generator().manual_seed(1)
    if task == "GeneralizationPrediction":
        layout, kernels = (1, 4, 4, 4, 10), (9, 9, 9, 1)
        weights = [0.3 * torch.randn(3, o, i, k, generator=generator, dtype=torch.float64).squeeze(-1)
                   .view(3, o, i, *((3, 3) if k == 9 else ()))
                   for i, o, k in zip(layout, layout[1:], kernels)]
        biases = [0.1 * torch.randn(3, o, generator=generator, dtype=torch.float64) for o in layout[1:]]
        graph = zoo_graph(weights, biases, torch.tensor([0, 1, 2]))
        return ZooBatch(graph, torch.rand(3, generator=generator, dtype=torch.float64), torch.arange(3))
    weights, biases = random_mlps((2, 8, 8, 1), 3, generator)
    graph = mlp_to_graph([w / 30 if l else w for l, w in enumerate(weights)], biases)
    image = torch.rand(3, 28, 28, generator=generator, dtype=torch.float64)
    return InrBatch(graph, image, torch.tensor([3, 1, 4]), torch.arange(3))


def run_task(name: str, task: str) -> dict[str, torch.Tensor]:
    """Loss, outputs and gradient summaries of ``name`` on ``task``, built at seed 0 in float64."""
    batch = task_batch(task)
    spec = GraphSpec.of(batch.graph).to_dict()
    torch.manual_seed(0)
    module = getattr(tasks, task)(metanet=name, metanet_config=dict(METANET_CONFIG), spec=spec,
                                  normalize_inputs=False, **TASKS[task]).double().eval()
    loss, outputs = module.loss_and_outputs(batch)
    loss.backward()
    pins = {"loss": loss.detach().reshape(1)}
    pins.update({f"out.{key}": value.detach().double() for key, value in outputs.items()})
    direction = torch.Generator().manual_seed(2)
    for key, parameter in sorted(module.named_parameters()):
        grad = parameter.grad if parameter.grad is not None else torch.zeros_like(parameter)
        probe = torch.randn(parameter.shape, generator=direction, dtype=torch.float64)
        pins[f"grad.{key}"] = torch.stack([grad.norm(), (grad * probe).sum()])
    return pins


def run_mixed_layouts(name: str) -> dict[str, torch.Tensor]:
    """Node and edge features of a batch of two layouts (the sparse message-passing path)."""
    generator = torch.Generator().manual_seed(3)
    graphs = []
    for layout in ((2, 4, 3, 1), (2, 3, 5, 1)):
        weights, biases = random_mlps(layout, 1, generator)
        graphs.append(mlp_to_graph([w[0] for w in weights], [b[0] for b in biases]))
    batch = batch_graphs(graphs)
    torch.manual_seed(0)
    metanet = build_metanet(name, spec=GraphSpec.of(batch), **METANET_CONFIG).double().eval()
    with torch.no_grad():
        node, edge = metanet(batch)
    return {"node": node, "edge": edge}


def compute_all(names=None) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    pins, refusals = {}, {}
    for name in sorted(METANETS) if names is None else names:
        for task in TASKS:
            try:
                values = run_task(name, task)
            except ValueError as error:
                refusals[f"{name}/{task}"] = str(error)
                continue
            pins.update({f"{name}/{task}/{key}": value for key, value in values.items()})
        try:
            values = run_mixed_layouts(name)
        except ValueError as error:
            refusals[f"{name}/mixed"] = str(error)
            continue
        pins.update({f"{name}/mixed/{key}": value for key, value in values.items()})
    return pins, refusals


@pytest.fixture(scope="module")
def computed():
    return compute_all()


@pytest.mark.parametrize("name", sorted(METANETS))
def test_outputs_match_the_pins(name, computed):
    pins, refusals = computed
    expected = {key: value for key, value in load_file(PINS).items() if key.startswith(f"{name}/")}
    expected_refusals = {k: v for k, v in json.loads(REFUSALS.read_text()).items() if k.startswith(f"{name}/")}
    if not expected and not expected_refusals:
        pytest.skip(f"{name}: no pinned outputs yet: python tests/test_pinned_outputs.py {name}")
    found = {key: value for key, value in pins.items() if key.startswith(f"{name}/")}
    assert sorted(found) == sorted(expected), "outputs or parameters added or removed"
    for key in sorted(expected):
        torch.testing.assert_close(found[key], expected[key], rtol=TOLERANCE, atol=TOLERANCE, msg=key)
    assert {k: v for k, v in refusals.items() if k.startswith(f"{name}/")} == expected_refusals


if __name__ == "__main__":
    import sys

    names = sys.argv[1:] or None  # architectures to (re)pin; none: every one, from scratch
    pins, refusals = compute_all(names)
    if names:
        unknown = sorted(set(names) - set(METANETS))
        if unknown:
            raise SystemExit(f"not registered: {unknown}")
        kept = [key for key in load_file(PINS) if key.split("/")[0] not in names]
        pins = {**{key: value for key, value in load_file(PINS).items() if key in kept}, **pins}
        refusals = {**{k: v for k, v in json.loads(REFUSALS.read_text()).items() if k.split("/")[0] not in names},
                    **refusals}
    DATA.mkdir(exist_ok=True)
    save_file({key: value.contiguous() for key, value in pins.items()}, PINS)
    REFUSALS.write_text(json.dumps(refusals, indent=1, sort_keys=True) + "\n")
    print(f"{len(pins)} tensors, {len(refusals)} refusals -> {DATA}")
