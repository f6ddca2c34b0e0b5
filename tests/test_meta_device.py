"""Every registered metanet, its heads, ``render``, every task's loss and an optimizer step run on ``meta`` tensors.

A ``meta`` tensor has a shape and no values, so a step on it fails wherever a step on an accelerator would
wait for it: ``.item()``, ``.tolist()``, ``bool(tensor)``, ``int(tensor)``, and every op whose output size
depends on values (``nonzero``, boolean masks, ``unique``, ``bincount``, ``repeat_interleave`` without
``output_size``). :class:`MetaOnly` also fails on any tensor of another device that reaches an op of the step:
one created inside forward without the batch's device, or numbers copied from the host.

The batches are built on the CPU as the data side builds them (the graph, its ``WeightBlocks`` where the
builder has them, and its ``GraphFacts``), then moved to ``meta`` as Lightning moves a batch to its device.
The models are built under ``torch.device("meta")``, so that building them reads nothing back either.
"""
from __future__ import annotations

import pytest
import torch
from lightning.fabric.utilities.apply_func import move_data_to_device
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from neuralgraph.data.cnn_zoo import ZooBatch, zoo_blocks, zoo_graph
from neuralgraph.data.inr_dataset import InrBatch, InrDataset
from neuralgraph.data.transformer_zoo import ZooViT
from neuralgraph.graph import GraphSpec, ModuleConverter, WeightBlocks, batch_graphs, graph_facts, mlp_to_graph
from neuralgraph.inr import DWS_MNIST, render
from neuralgraph.nn import BASELINES, METANETS, build_metanet
from neuralgraph.training import tasks

META = torch.device("meta")
ARCHITECTURES = sorted(METANETS) + sorted(BASELINES)
TASKS = ("InrEditing", "InrClassification", "WeightStatisticRegression", "GeneralizationPrediction",
         "EquivariantWeightPrediction")
# the ops that copy a tensor between devices: a copy from the host is a wait for the device, even of one number
COPIES = {torch.ops.aten._to_copy.default, torch.ops.aten.copy_.default}


class MetaOnly(TorchDispatchMode):
    """Fails on an op that mixes another device's tensor into the step: any such tensor but a 0-dim scalar (which
    kernels read as a number), and any copy onto the step's device. Ops on the host alone (an optimizer's step
    counter) are the host's business."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        tensors = [value for value in tree_leaves((args, kwargs)) if isinstance(value, torch.Tensor)]
        onto_meta = any(t.device == META for t in tensors) or kwargs.get("device") == META
        for value in tensors:
            if value.device != META and onto_meta and (value.dim() > 0 or func in COPIES):
                raise AssertionError(f"{func} got a {value.device} tensor of shape {tuple(value.shape)} in a meta step")
        return func(*args, **kwargs)


def inr_batch(layout=(2, 8, 8, 1), size=3) -> InrBatch:
    """A batch of INRs as ``InrDataset.batch`` builds it: canonical graph, its weights, its facts."""
    generator = torch.Generator().manual_seed(0)
    weights = [torch.randn(size, o, i, generator=generator) / 4 for i, o in zip(layout, layout[1:])]
    biases = [torch.randn(size, o, generator=generator) / 4 for o in layout[1:]]
    graph, blocks = mlp_to_graph(weights, biases), WeightBlocks.of_mlps(weights, biases)
    return InrBatch(graph, torch.rand(size, 28, 28, generator=generator), torch.arange(size) % 10, torch.arange(size),
                    blocks, graph_facts(graph, blocks.layout))


def zoo_batch(size=3) -> ZooBatch:
    """A batch of Small-CNN-Zoo networks as ``CnnZooDataset.batch`` builds it."""
    generator = torch.Generator().manual_seed(1)
    layout = (1, 4, 4, 4, 10)
    weights = [torch.randn(size, o, i, *((3, 3) if l < 3 else ()), generator=generator) / 4
               for l, (i, o) in enumerate(zip(layout, layout[1:]))]
    biases = [torch.randn(size, o, generator=generator) / 4 for o in layout[1:]]
    graph, blocks = zoo_graph(weights, biases, torch.arange(size) % 2), WeightBlocks.of(zoo_blocks(weights), biases)
    return ZooBatch(graph, torch.rand(size, generator=generator), torch.arange(size), blocks,
                    graph_facts(graph, blocks.layout))


def mixed_batch() -> InrBatch:
    """INRs of two layouts in one batch (no blocks: the general path), with their facts."""
    generator = torch.Generator().manual_seed(2)
    graphs = []
    for layout in ((2, 4, 3, 1), (2, 3, 5, 1), (2, 4, 3, 1)):
        graphs.append(mlp_to_graph([torch.randn(o, i, generator=generator) for i, o in zip(layout, layout[1:])],
                                   [torch.randn(o, generator=generator) for o in layout[1:]]))
    graph = batch_graphs(graphs)
    return InrBatch(graph, None, torch.tensor([3, 1, 4]), torch.arange(3), None, graph_facts(graph))


def transformer_batch() -> ZooBatch:
    """Two depths of the transformer zoo's ViT (skip, normalisation and attention edges), as
    ``TransformerZooDataset.batch`` builds them: graphs of mixed layouts, with their facts."""
    torch.manual_seed(3)
    probe = torch.randn(2, 1, 28, 28)
    graphs = []
    for depth, heads, activation in ((1, 2, "gelu"), (2, 3, "silu")):
        module = ZooViT(dim=6, depth=depth, heads=heads, mlp_dim=8, activation=activation).eval()
        graphs.append(ModuleConverter(module, example_input=probe)(module))
    graph = batch_graphs(graphs)
    return ZooBatch(graph, torch.rand(2), torch.arange(2), None, graph_facts(graph))


def meta_step(task: str, metanet: str, batch, **options) -> None:
    """Build ``task`` on ``meta`` for ``batch``'s data, then one loss, backward and AdamW step under :class:`MetaOnly`."""
    spec = GraphSpec.of(batch.graph).to_dict()
    config = {"hidden_dim": 8, "num_layers": 2}
    if metanet == "statnn" and not spec["skip_edges"]:
        config["weight_layers"] = len(spec["layouts"][0]) - 1
    try:
        with torch.device(META):
            module = getattr(tasks, task)(metanet=metanet, metanet_config=config, spec=spec, normalize_inputs=False,
                                          **options)
    except ValueError as error:  # a baseline built for other data (every metanetwork reads every task's)
        if metanet in METANETS:
            raise
        pytest.skip(f"{metanet} refuses {task}'s data as configured here: {error}")
    assert {t.device for t in [*module.parameters(), *module.buffers()]} == {META}
    optimizer = module.configure_optimizers()["optimizer"]
    batch = move_data_to_device(batch, META)
    with MetaOnly():
        loss, outputs = module.loss_and_outputs(batch)
        loss.backward()
        optimizer.step()
    assert loss.device == META and loss.shape == () and all(value.device == META for value in outputs.values())
    grads = [p.grad for p in module.parameters() if p.grad is not None]  # some heads leave a last layer's nodes unread
    assert len(grads) > len(list(module.parameters())) // 2 and all(g.device == META for g in grads)


@pytest.mark.parametrize("task", TASKS)
@pytest.mark.parametrize("name", ARCHITECTURES)
def test_a_training_step_runs_on_meta(name, task):
    """Encoder, layers (the dense path where the architecture has one), head, loss, backward, optimizer step."""
    batch = zoo_batch() if task == "GeneralizationPrediction" else inr_batch()
    meta_step(task, name, batch, **({"k": 2} if task == "InrEditing" else {}))


@pytest.mark.parametrize("task", ["InrClassification", "EquivariantWeightPrediction"])
@pytest.mark.parametrize("name", sorted(METANETS))
def test_the_general_path_runs_on_meta(name, task):
    """A batch of mixed layouts: every layer's general path, the layer index, the attention groups."""
    meta_step(task, name, mixed_batch())


@pytest.mark.parametrize("name", ["gmn", "ng_gnn", "ng_t", "nft", "statnn"])
def test_transformer_graphs_run_on_meta(name):
    """Skip, normalisation and attention edges, networks of two depths: the transformer zoo's batches."""
    meta_step("GeneralizationPrediction", name, transformer_batch())


@pytest.mark.parametrize("members", ["coupled", "tied"])
def test_every_decoder_runs_on_meta(members):
    meta_step("InrEditing", "gmn", inr_batch(), k=3, decoder_members=members)


def test_render_runs_on_meta_in_every_dtype():
    """``render`` turns autocast off and computes in float32 on any device, meta included."""
    for dtype in (torch.float32, torch.bfloat16):
        weights = [torch.empty(4, o, i, device=META, dtype=dtype) for i, o in ((2, 8), (8, 8), (8, 1))]
        biases = [torch.empty(4, o, device=META, dtype=dtype) for o in (8, 8, 1)]
        with MetaOnly():
            images = render(weights, biases, 28, DWS_MNIST)
        assert images.device == META and images.shape == (4, 28, 28) and images.dtype == torch.float32


def test_input_checks_read_the_facts_not_the_device():
    """The encoder's range checks run on a meta batch, from the numbers its builder read on the CPU."""
    batch = move_data_to_device(inr_batch(), META)
    with torch.device(META):
        metanet = build_metanet("gmn", hidden_dim=8, num_layers=1, max_node_types=64)
    context = metanet.context(batch.graph, batch.blocks, batch.facts._replace(max_node_type=64))
    with pytest.raises(ValueError, match=r"^graph field node_type reaches 64 but max_node_types=64; raise max_node_types$"):
        metanet(batch.graph, context)
    context = metanet.context(batch.graph, batch.blocks, batch.facts._replace(skip_edges=True))
    with pytest.raises(ValueError, match="graph field edge_kind marks residual skip or shortcut edges"):
        metanet(batch.graph, context)


def test_the_batch_builder_reads_the_facts(tiny_inrs):
    """``InrDataset.batch`` carries the facts of its graph (the layout taken from its weights, as detected)."""
    batch = InrDataset(tiny_inrs, "train").batch(list(range(6)), permute=True)
    assert batch.facts == graph_facts(batch.graph) and batch.facts.widths == batch.blocks.layout
    assert batch.facts.num_graphs == 6 and batch.facts.depths == (len(batch.blocks.layout) - 1,)


def test_the_fitter_takes_the_torch_path_off_the_cpu(monkeypatch):
    """The compiled SIREN kernel is chosen on the CPU only: elsewhere ``"auto"`` neither builds nor times it, and
    the torch path's step runs on the device (here ``meta``: without reading anything back)."""
    from neuralgraph.inr import backend
    from neuralgraph.inr.render import grid_axes

    monkeypatch.setattr(backend, "siren_library", lambda: pytest.fail("the CPU kernel was built for a meta fit"))
    axes = grid_axes(28, 28, device=META)
    step = backend.step_function("auto", DWS_MNIST, 4, axes, META, torch.float32)
    size = sum((d_in + 1) * d_out for d_in, d_out in zip(DWS_MNIST.layout, DWS_MNIST.layout[1:]))
    with MetaOnly():
        mse, grad = step(torch.empty(4, size, device=META), torch.empty(4, 28, 28, device=META))
    assert mse.shape == (4,) and grad.shape == (4, size) and grad.device == META
    with pytest.raises(ValueError, match="on cpu; got torch.float32, layout .*, device meta"):
        backend.step_function("cpp", DWS_MNIST, 4, axes, META, torch.float32)
