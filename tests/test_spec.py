"""GraphSpec: read from graphs and data modules, serialised, and turned into every metanet's arguments."""
import math

import pytest
import torch
from torch import nn

from neuralgraph.graph import GraphSpec, mlp_to_graph, module_to_graph
from neuralgraph.nn import METANETS, build_metanet
from neuralgraph.nn.ng_gnn import layout_degree_histogram
from neuralgraph.training.datamodule import MnistInrDataModule

HEADS = {"ng_t": {"num_heads": 2}, "nft": {"num_heads": 2}}


def mlp_batch(layout, batch=3, seed=0, dtype=torch.float32):
    generator = torch.Generator().manual_seed(seed)
    weights = [torch.randn(batch, b, a, generator=generator, dtype=dtype) for a, b in zip(layout, layout[1:])]
    biases = [torch.randn(batch, b, generator=generator, dtype=dtype) for b in layout[1:]]
    return mlp_to_graph(weights, biases)


def test_spec_of_a_batch_and_its_round_trip():
    graph = mlp_batch((2, 5, 4, 1))
    spec = GraphSpec.of(graph, convention={"w0": 30.0})
    assert spec.layouts == ((2, 5, 4, 1),) and spec.depths == (3,)
    assert (spec.node_features, spec.edge_features, spec.skip_edges) == (1, 1, False)
    assert spec.activations is None and not spec.varying_activations
    # three graphs of one layout: one graph's histogram of degrees (both edge directions), reduced
    one = layout_degree_histogram((2, 5, 4, 1))
    assert list(spec.degree_histogram) == (one // math.gcd(*one.tolist())).tolist()
    assert GraphSpec.from_dict(spec.to_dict()) == spec
    with pytest.raises(ValueError, match=r"GraphSpec: unknown fields \['deg'\], missing fields \['degree_histogram'\]"):
        GraphSpec.from_dict({**{k: v for k, v in spec.to_dict().items() if k != "degree_histogram"}, "deg": [1]})


@pytest.mark.parametrize("name", sorted(METANETS))
def test_every_metanet_builds_from_the_spec_alone(name):
    graph = mlp_batch((3, 6, 6, 2))
    spec = GraphSpec.of(graph)
    torch.manual_seed(0)
    node, edge = build_metanet(name, spec=spec, hidden_dim=8, num_layers=2, **HEADS.get(name, {}))(graph)
    assert node.shape == (graph.num_nodes, 8) and edge.shape == (graph.num_edges, 8)


def test_spec_arguments_fill_the_data_facts_and_refuse_a_contradiction():
    spec = GraphSpec.of(mlp_batch((3, 6, 6, 2)))
    dws = build_metanet("dws", spec=spec, hidden_dim=8, num_layers=2)
    assert dws.num_weight_layers == 3
    with pytest.raises(ValueError, match=r"^dws: num_weight_layers=4 in the config, but the data's GraphSpec gives 3$"):
        build_metanet("dws", spec=spec, hidden_dim=8, num_weight_layers=4)
    # NG-GNN normalised by the data's histogram computes what the layout's histogram, given by hand, gives
    graph = mlp_batch((3, 6, 6, 2), batch=1, dtype=torch.float64)
    torch.manual_seed(0)
    from_spec = build_metanet("ng_gnn", spec=GraphSpec.of(graph), hidden_dim=8, num_layers=2).double()
    torch.manual_seed(0)
    from_layout = build_metanet("ng_gnn", hidden_dim=8, num_layers=2,
                                degree_histogram=layout_degree_histogram((3, 6, 6, 2)).tolist()).double()
    for a, b in zip(from_spec(graph), from_layout(graph)):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)
    with pytest.raises(ValueError, match=r"^ng_gnn: degree_histogram .* is not given: the data's GraphSpec gives it"):
        build_metanet("ng_gnn", hidden_dim=8, num_layers=2)


def test_the_networks_activation_and_w0_come_from_the_spec():
    """INR data (a SIREN convention) gives ``network_activation="sine"`` and the convention's ``w0``; graphs that
    record one activation give it; probe features without them are refused, naming the missing field."""
    graph = mlp_batch((2, 5, 4, 1))
    inr = GraphSpec.of(graph, convention={"w0": 12.0})
    assert (inr.network_activation, inr.w0) == ("sine", 12.0)
    features = build_metanet("gmn", spec=inr, hidden_dim=8, num_layers=1, probe_features=3).encoder.weight_features
    assert (features.network_activation, features.w0) == ("sine", 12.0)
    tanh = GraphSpec.of(module_to_graph(nn.Sequential(nn.Linear(2, 4), nn.Tanh(), nn.Linear(4, 1))))
    assert (tanh.network_activation, tanh.w0) == ("tanh", None)
    assert type(build_metanet("scalegmn", spec=tanh, hidden_dim=8, num_layers=1)).scaling == "sign"
    relu = GraphSpec.of(module_to_graph(nn.Sequential(nn.Linear(2, 4), nn.ReLU(), nn.Linear(4, 1))))
    assert type(build_metanet("scalegmn", spec=relu, hidden_dim=8, num_layers=1)).scaling == "scale"
    with pytest.raises(ValueError, match=r"^gmn: network_activation='relu' in the config, but the data's GraphSpec "
                                         r"gives 'tanh'$"):
        build_metanet("gmn", spec=tanh, network_activation="relu")
    plain = GraphSpec.of(graph)
    assert (plain.network_activation, plain.w0) == (None, None)
    with pytest.raises(ValueError, match="network_activation .* is not given"):
        build_metanet("gmn", spec=plain, hidden_dim=8, num_layers=1, probe_features=3)
    with pytest.raises(ValueError, match="^network_activation='sine' needs w0"):
        build_metanet("gmn", spec=plain, hidden_dim=8, num_layers=1, gradient_features=3, network_activation="sine")


class Residual(nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = nn.Linear(4, 4)

    def forward(self, x):
        return x + torch.relu(self.inner(x))


def test_residual_graphs_switch_on_skip_edges_and_are_refused_by_weight_space_layers():
    model = nn.Sequential(nn.Linear(2, 4), Residual(), nn.Linear(4, 1))
    graph = module_to_graph(model)
    spec = GraphSpec.of(graph)
    assert spec.skip_edges
    assert build_metanet("gmn", spec=spec, hidden_dim=8, num_layers=1).encoder.edge_kind_embedding is not None
    for name in ("dws", "nfn_np", "nfn_hnp"):
        with pytest.raises(ValueError, match=rf"^{name}: reads chains of layers only .*skip or shortcut edges"):
            build_metanet(name, spec=spec, hidden_dim=8)


def test_the_inr_data_module_reads_its_spec_from_the_training_split(tiny_inrs):
    data = MnistInrDataModule(root=str(tiny_inrs), source="embedded")
    spec = data.spec
    assert spec.layouts == ((2, 32, 32, 1),) and spec.convention == data.datasets["train"].convention.to_dict()
    one = layout_degree_histogram((2, 32, 32, 1))
    assert list(spec.degree_histogram) == (one // math.gcd(*one.tolist())).tolist()
    assert MnistInrDataModule(root=str(tiny_inrs), source="embedded", limit_train=7).spec == spec


def test_editing_renders_with_the_convention_of_the_data(tiny_inrs):
    from neuralgraph.inr import SirenConvention
    from neuralgraph.training.tasks import InrEditing

    data = MnistInrDataModule(root=str(tiny_inrs), source="embedded")
    batch = data.batch("train", range(4))
    predictions = {}
    for offset in (0.5, 0.0):
        convention = {**data.datasets["train"].convention.to_dict(), "output_offset": offset}
        spec = GraphSpec.of(batch.graph, convention=convention).to_dict()
        torch.manual_seed(0)
        task = InrEditing(metanet="gmn", metanet_config={"hidden_dim": 8, "num_layers": 1}, spec=spec,
                          normalize_inputs=False).eval()
        assert task.siren_convention == SirenConvention.from_dict(convention)
        with torch.no_grad():
            predictions[offset] = task.loss_and_outputs(batch)[1]["prediction"]
    # the output offset is added to every pixel of every member, so to their average
    torch.testing.assert_close(predictions[0.5] - predictions[0.0], torch.full_like(predictions[0.0], 0.5),
                               rtol=0, atol=4 * torch.finfo(torch.float32).eps * (1 + predictions[0.5].abs().max()))
