"""bfloat16 autocast (``--trainer.precision bf16-mixed``): every metanetwork runs under it on both paths,
the SIREN render and the weight decoder stay in float32, and a fit writes float32 checkpoints."""
import pytest
import torch

from neuralgraph.graph import GraphSpec, mlp_to_graph
from neuralgraph.inr import render
from neuralgraph.nn import METANETS, build_metanet
from neuralgraph.training.cli import run_lightning_cli
from neuralgraph.training.tasks import InrEditing

from test_training import fit_args

LAYOUT = (2, 5, 4, 1)


def random_graph(graphs: int = 3, scale: float = 0.3):
    return mlp_to_graph([scale * torch.randn(graphs, o, i) for i, o in zip(LAYOUT, LAYOUT[1:])],
                        [scale * torch.randn(graphs, o) for o in LAYOUT[1:]])


def bf16():
    return torch.autocast("cpu", dtype=torch.bfloat16)


@pytest.mark.parametrize("dense", [None, False], ids=["dense", "general"])
@pytest.mark.parametrize("name", sorted(METANETS))
def test_every_metanet_runs_under_bf16_autocast_close_to_float32(name, dense):
    torch.manual_seed(0)
    graph = random_graph()
    net = build_metanet(name, spec=GraphSpec.of(graph), hidden_dim=8, num_layers=2, max_layers=len(LAYOUT) - 1)
    net.encoder.dense = dense
    with torch.no_grad():
        full = net(graph)
        with bf16():
            mixed = net(graph)
    for a, b in zip(full, mixed):
        assert b.shape == a.shape and torch.isfinite(b).all()
        # bfloat16 keeps 8 bits of mantissa: a few 1e-3 relative after two layers, far from float32's 1e-7
        assert float((b.float() - a).abs().max() / a.abs().max()) < 5e-2
    with bf16():
        sum(out.float().square().sum() for out in net(graph)).backward()
    assert all(p.grad is None or (p.grad.dtype == torch.float32 and torch.isfinite(p.grad).all())
               for p in net.parameters())


def test_render_ignores_autocast_and_widens_bfloat16_weights():
    torch.manual_seed(0)
    weights = [torch.randn(4, o, i) for i, o in zip(LAYOUT, LAYOUT[1:])]
    biases = [torch.randn(4, o) for o in LAYOUT[1:]]
    full = render(weights, biases, 12)
    with bf16():
        assert torch.equal(render(weights, biases, 12), full)
    narrow = render([w.bfloat16() for w in weights], [b.bfloat16() for b in biases], 12)
    assert narrow.dtype == torch.float32
    assert torch.equal(narrow, render([w.bfloat16().float() for w in weights],
                                      [b.bfloat16().float() for b in biases], 12))
    assert render([w.double() for w in weights], [b.double() for b in biases], 12).dtype == torch.float64


def test_editing_decodes_in_float32_under_autocast():
    """Only the metanetwork runs in bfloat16: the decoder reads its features in float32, exactly."""
    torch.manual_seed(0)
    task = InrEditing(metanet="gmn", metanet_config={"hidden_dim": 8, "num_layers": 1}, k=2)
    graph = random_graph()
    with torch.no_grad():
        with bf16():
            node, edge = task.metanet(graph)
            weights, biases = task.edited_networks(graph)
        expected_weights, expected_biases = task.decoder(graph, node.float(), edge.float())
    for expected, got in zip(expected_weights + expected_biases, weights + biases):
        assert got.dtype == torch.float32 and torch.equal(got, expected)


@pytest.mark.slow
def test_a_bf16_mixed_fit_trains_and_writes_float32_checkpoints(tiny_inrs, tmp_path):
    cli = run_lightning_cli(fit_args(tiny_inrs, tmp_path / "run", epochs=2,
                                     extra=["--trainer.precision", "bf16-mixed", "--test_after_fit", "false"]))
    assert cli.trainer.precision == "bf16-mixed"
    metrics = cli.trainer.callback_metrics
    assert torch.isfinite(metrics["train/loss"]) and torch.isfinite(metrics["val/loss"])
    state = torch.load(cli.trainer.checkpoint_callback.best_model_path, weights_only=True)["state_dict"]
    assert all(value.dtype == torch.float32 for value in state.values() if value.is_floating_point())
