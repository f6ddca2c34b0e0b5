"""``torch.compile`` of the message-passing layers (the tasks' ``compile`` option): eager's outputs and
gradients, no graph break, checkpoints without the ``_orig_mod.`` prefix that load either way."""
import copy
import json

import pytest
import torch
from torch._dynamo.utils import counters

from neuralgraph.graph import GraphSpec, mlp_to_graph
from neuralgraph.nn import build_metanet
from neuralgraph.training.cli import run_lightning_cli
from neuralgraph.training.tasks import InrEditing

from test_training import TINY_MODEL, fit_args

MESSAGE_PASSING = ("gmn", "ng_gnn", "ng_t", "nft")


@pytest.mark.slow
@pytest.mark.parametrize("name,dense", [(name, None) for name in MESSAGE_PASSING] + [("gmn", False)],
                         ids=[f"{name}-dense" for name in MESSAGE_PASSING] + ["gmn-general"])
def test_compiled_layers_equal_eager_in_float64(name, dense):
    """Dense blocks (canonical batches, what training reads) and their per-edge maps (nn/paths.py) compile whole."""
    torch.manual_seed(0)
    layout = (2, 5, 4, 1)
    graph = mlp_to_graph([torch.randn(3, o, i, dtype=torch.float64) for i, o in zip(layout, layout[1:])],
                         [torch.randn(3, o, dtype=torch.float64) for o in layout[1:]])
    eager = build_metanet(name, spec=GraphSpec.of(graph), hidden_dim=8, num_layers=2, max_layers=len(layout) - 1).double()
    eager.encoder.dense = dense
    compiled = copy.deepcopy(eager)
    for layer in compiled.layers:
        layer.compile()
    torch._dynamo.reset()
    counters.clear()
    results = []
    for model in (eager, compiled):
        outputs = model(graph)
        sum(out.square().sum() for out in outputs).backward()
        results.append((outputs, [p.grad for p in model.parameters()]))
    assert not counters["graph_break"], dict(counters["graph_break"])
    (eager_out, eager_grad), (compiled_out, compiled_grad) = results
    for a, b in zip(eager_out + tuple(eager_grad), compiled_out + tuple(compiled_grad)):
        torch.testing.assert_close(b, a, rtol=0, atol=1e-10)
    assert compiled.state_dict().keys() == eager.state_dict().keys()


def test_compile_option_compiles_every_layer_in_place_with_eager_state_dict_keys():
    config = {"hidden_dim": 8, "num_layers": 2}
    layout = (2, 5, 4, 1)
    spec = GraphSpec.of(mlp_to_graph([torch.randn(o, i) for i, o in zip(layout, layout[1:])],
                                     [torch.randn(o) for o in layout[1:]])).to_dict()
    eager, compiled = (InrEditing(metanet="ng_gnn", metanet_config=config, spec=spec, compile=flag)
                       for flag in (False, True))
    assert all(layer._compiled_call_impl is not None for layer in compiled.metanet.layers)
    assert all(hasattr(layer.forward_dense, "_torchdynamo_orig_callable") for layer in compiled.metanet.layers)
    assert all(layer._compiled_call_impl is None for layer in eager.metanet.layers)
    compiled.load_state_dict(eager.state_dict())  # strict: the same keys, no `_orig_mod.`


@pytest.mark.slow
def test_a_compiled_fit_writes_checkpoints_that_load_without_compile(tiny_inrs, tmp_path):
    cli = run_lightning_cli(fit_args(tiny_inrs, tmp_path / "run", extra=["--model.compile", "true",
                                                                         "--test_after_fit", "false"]))
    assert cli.model.hparams.compile and cli.model.metanet.layers[0]._compiled_call_impl is not None
    checkpoint = cli.trainer.checkpoint_callback.best_model_path
    state = torch.load(checkpoint, weights_only=True)["state_dict"]
    assert not any("_orig_mod" in key for key in state)
    task = InrEditing.load_from_checkpoint(checkpoint, weights_only=True, compile=False)
    assert task.hparams.metanet_config == json.loads(TINY_MODEL) and not task.hparams.compile
    assert all(torch.equal(state[key], value) for key, value in task.state_dict().items())
