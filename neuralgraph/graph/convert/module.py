"""Modules and state dicts <-> parameter graphs: :func:`module_to_graph` and its exact inverse :func:`graph_to_module`.

Each parametric layer of the traced chain (:mod:`~neuralgraph.graph.convert.trace`) becomes the edge
block of its converter; blocks of all layers are zero-padded to a common width ``F`` by
:func:`~neuralgraph.graph.build.blocks_to_graph`, as the graph metanetwork papers do for
convolution kernels. A projection shortcut's bias acts on the neurons of the layer it adds into,
so it is added to that layer's biases: the graph holds the function's bias per neuron, and the
rebuilt module puts all of it in the main path's layer (the shortcut's bias 0), equal to the
original up to the rounding of that sum. After conversion, :func:`module_to_graph` checks on the
probe input that the module rebuilt from the graph computes what the module computes.
"""
from __future__ import annotations

import copy
import itertools
from collections import OrderedDict
from typing import Mapping, Optional, Union

import torch
from torch import Tensor, nn

from neuralgraph.graph.build import blocks_to_graph
from neuralgraph.graph.convert.batchnorm import fold_batchnorm, has_batchnorm, unfold_into
from neuralgraph.graph.convert.general import general_graph, load_general
from neuralgraph.graph.convert.registry import LayerConverter, converter_for, layer_block, layer_weight
from neuralgraph.graph.convert.state_dict import StateDict, state_dict_layers
from neuralgraph.graph.convert.trace import Chain, trace_chain
from neuralgraph.graph.decode import check_finite, common_layout, graph_shortcuts, graph_skips, graph_to_blocks
from neuralgraph.graph.schema import Graph, GraphConversionError, activation_codes

#: The probe check's tolerance, in units of the dtype's eps, when a shortcut's bias moved.
SHORTCUT_BIAS_ULPS = 1024


def _module_layers(module: nn.Module, chain: Chain) -> list[tuple[str, Tensor, Optional[Tensor], LayerConverter]]:
    return [(name, *conv.parameters(module.get_submodule(name)), conv) for name, conv in chain.layers]


def _module_shortcuts(module: nn.Module, chain: Chain) -> list[tuple[str, Tensor, Optional[Tensor], LayerConverter, int, int]]:
    return [(name, *conv.parameters(module.get_submodule(name)), conv, a, b) for name, conv, a, b in chain.shortcuts]


def _to_graph(layers, chain: Optional[Chain] = None, shortcut_layers=()) -> Graph:
    """The graph of the chain ``layers``; with ``chain``, also its skips, shortcuts and activations.

    A shortcut's bias is added to the biases of the layer it adds into: the graph holds the
    function's bias per neuron, not how it is split between the two paths.
    """
    blocks, biases, in_neurons = [], [], None
    for name, weight, bias, converter in layers:
        block, b = layer_block(name, weight, bias, converter, in_neurons)
        blocks.append(block)
        biases.append(b)
        in_neurons = block.shape[0]
    if chain is None:
        return blocks_to_graph(blocks, biases)
    layout = [blocks[0].shape[1]] + [block.shape[0] for block in blocks]
    shortcuts = []
    for name, weight, bias, converter, a, b in shortcut_layers:
        block, shortcut_bias = layer_block(name, weight, bias, converter, layout[a])
        shortcuts.append((a, b, block))
        biases[b - 1] = biases[b - 1] + shortcut_bias
    codes = activation_codes(chain.activations).to(blocks[0].device)
    return blocks_to_graph(blocks, biases, chain.skips, codes, shortcuts)


def module_to_graph(source: Union[nn.Module, StateDict], example_input: Optional[Tensor] = None) -> Graph:
    """Parameter graph of a module (read through its ``torch.fx`` data flow) or of its state dict.

    Layers without a bias get bias 0 on their nodes. Every step of the module's chain (layers
    with their settings, activations, pooling, residual adds, ...) is kept as
    ``graph.architecture``; the activation of each layer as the ``activation`` node field and
    residual adds as skip or shortcut edges (``edge_kind``). A state dict gives none of these.
    ``example_input`` (a batch) is the probe input; by default it is built from the first
    layer (``[2, in_features]``, or the smallest square image that runs through the network).
    The module rebuilt from the graph must compute exactly the module's output on it; with a
    projection shortcut whose bias moved into the main path's layer, up to float rounding
    (:data:`SHORTCUT_BIAS_ULPS` units of the dtype's precision, relative to the largest output).

    Args:
        source: a module, or a state dict of ``Linear``/``Conv2d`` layers.
        example_input: the probe input for a module.

    Returns:
        Its ``ParameterGraph``.
    """
    if isinstance(source, nn.Module):
        if has_batchnorm(source):
            source = fold_batchnorm(source)
        chain = trace_chain(source, example_input)
        graph = _graph_of(source, chain)
        _check_rebuilt(graph, source, chain, example_input)
        return graph
    if isinstance(source, Mapping):
        return _to_graph(state_dict_layers(source))
    raise GraphConversionError(f"expected an nn.Module or a state dict, got {type(source).__name__}")


def _graph_of(module: nn.Module, chain: Chain) -> Graph:
    """The graph of ``module`` (BatchNorm folded) whose walk is ``chain``."""
    if chain.general:
        graph = general_graph(module, chain)[0]
    else:
        graph = _to_graph(_module_layers(module, chain), chain, _module_shortcuts(module, chain))
    graph.architecture = chain.architecture
    return graph


class ModuleConverter:
    """:func:`module_to_graph` for many modules of one architecture, such as the networks of a zoo.

    The template is traced, converted and its round trip checked once; each module given then
    only has its parameters read along the template's walk (a ZooViT: 8 ms against 124 ms, AMD EPYC).
    A module must compute as the template does: one of another type, other parameter shapes or
    other submodules or settings (another activation, stride, number of heads) is refused in one line.

    Args:
        template: a module of the architecture.
        example_input: the probe input, as in :func:`module_to_graph`.
    """

    def __init__(self, template: nn.Module, example_input: Optional[Tensor] = None):
        self.signature = self._signature(template)
        folded = fold_batchnorm(template) if has_batchnorm(template) else template
        self.chain = trace_chain(folded, example_input)
        _check_rebuilt(_graph_of(folded, self.chain), folded, self.chain, example_input)

    @staticmethod
    def _signature(module: nn.Module) -> tuple:
        """Type, every submodule with its settings (a converter's description: attention's heads), parameter shapes."""
        modules = tuple((name, type(sub).__name__, sub.extra_repr(),
                         converter.describe(sub) if (converter := converter_for(sub)) is not None else "")
                        for name, sub in module.named_modules())
        return type(module), modules, tuple((k, tuple(v.shape)) for k, v in module.state_dict().items())

    def __call__(self, module: nn.Module) -> Graph:
        signature = self._signature(module)
        if signature != self.signature:
            what = ("type" if signature[0] is not self.signature[0] else "modules" if signature[1] != self.signature[1]
                    else "parameter shapes")
            raise GraphConversionError(f"{type(module).__name__}: its {what} differ from the template's; convert it "
                                       "with module_to_graph or a ModuleConverter of its own architecture")
        if has_batchnorm(module):
            module = fold_batchnorm(module)
        return _graph_of(module, self.chain)


def _check_rebuilt(graph: Graph, module: nn.Module, chain: Chain, example_input: Optional[Tensor]) -> None:
    """``graph_to_module(graph, module)`` computes what ``module`` computes, on the probe input (eval mode)."""
    weight = _module_layers(module, chain)[0][1]
    if example_input is None:
        generator = torch.Generator().manual_seed(0)
        example_input = torch.randn(chain.probe_shape, generator=generator, dtype=chain.probe_dtype).to(weight.device)
    with torch.no_grad():
        expected = copy.deepcopy(module).eval()(example_input)
        rebuilt = _load_module(graph, copy.deepcopy(module), chain).eval()(example_input)
    moved = any(bias is not None and bool((bias != 0).any()) for _, _, bias, _, _, _ in _module_shortcuts(module, chain))
    tolerance = SHORTCUT_BIAS_ULPS * torch.finfo(expected.dtype).eps if moved else 0.0
    if not torch.allclose(rebuilt, expected, rtol=tolerance, atol=tolerance * float(expected.abs().max())):
        raise GraphConversionError(
            f"{type(module).__name__}: the module rebuilt from its graph computes another output on a probe input "
            f"(max abs difference {float((rebuilt - expected).abs().max()):.3g}); its forward uses its layers in "
            "a way the graph does not record"
        )


def graph_to_module(graph: Graph, template: Union[nn.Module, StateDict],
                    example_input: Optional[Tensor] = None) -> Union[nn.Module, StateDict]:
    """Exact inverse of :func:`module_to_graph`: a copy of ``template`` holding the graph's parameters.

    ``template`` fixes the layer types and shapes (a module, or a state dict, returned as a new
    state dict with the same keys). Features beyond a layer's own edge width must be zero. A
    graph that records an architecture (from :func:`module_to_graph`) is refused by a module
    template whose traced architecture differs, e.g. in a convolution's stride or padding.
    ``example_input`` as in :func:`module_to_graph`, for tracing the template.

    Args:
        graph: one parameter graph.
        template: a module or a state dict of the architecture.
        example_input: the probe input for a module template.

    Returns:
        The new module, or state dict.
    """
    if getattr(graph, "num_graphs", 1) != 1:
        raise GraphConversionError("graph_to_module takes a single graph; index the batch first")
    if isinstance(template, nn.Module):
        if has_batchnorm(template):
            folded = fold_batchnorm(template)
            loaded = _load_module(graph, folded, trace_chain(folded, example_input))
            return unfold_into(template, loaded)
        return _load_module(graph, copy.deepcopy(template), trace_chain(template, example_input))
    if isinstance(template, Mapping):
        return _load(graph, OrderedDict(template), lambda state, _: state_dict_layers(state), None)
    raise GraphConversionError(f"template must be an nn.Module or a state dict, got {type(template).__name__}")


def _load_module(graph: Graph, result: nn.Module, chain: Chain) -> nn.Module:
    """Write the graph's parameters into the module copy ``result``, by the chain or general layout."""
    if chain.general:
        result = load_general(graph, result, chain)
        _check_architecture(graph, chain)
        return result
    return _load(graph, result, _module_layers, chain)


def _load(graph: Graph, result, read_layers, chain: Optional[Chain]):
    """Write the graph's parameters into ``result`` (a module copy or a state dict) and return it."""
    layers = read_layers(result, chain)
    layout = common_layout(graph)
    if len(layout) - 1 != len(layers):
        raise GraphConversionError(f"graph has {len(layout) - 1} layers but the template has {len(layers)}")
    check_finite(graph)
    blocks, biases = graph_to_blocks(graph)
    updates = []
    for l, ((name, weight, bias, conv), block, b) in enumerate(zip(layers, blocks, biases), start=1):
        b = b[0]
        if bias is None and bool((b != 0).any()):
            raise GraphConversionError(f"layer {name!r}: template has no bias but the graph's biases are nonzero")
        updates.append((name, weight, bias, layer_weight(name, weight, bias, conv, block[0], layout[l - 1] if l > 1 else None), b))
    if chain is not None:
        if graph_skips(graph) != tuple(sorted(chain.skips)):
            raise GraphConversionError(
                f"graph has residual skips {list(graph_skips(graph))} (node layers a -> b) but the template has "
                f"{sorted(chain.skips)}"
            )
        in_graph = graph_shortcuts(graph)
        in_template = {(a, b): rest for *rest, a, b in _module_shortcuts(result, chain)}
        if sorted(in_graph) != sorted(in_template):
            raise GraphConversionError(f"graph has projection shortcuts {sorted(in_graph)} (node layers a -> b) but "
                                       f"the template has {sorted(in_template)}")
        for pair, block in in_graph.items():  # the shortcut's bias is in the layer it adds into
            name, weight, bias, conv = in_template[pair]
            new_weight = layer_weight(name, weight, bias, conv, block, layout[pair[0]])
            updates.append((name, weight, bias, new_weight, None if bias is None else torch.zeros_like(bias)))
    if chain is not None:
        _check_architecture(graph, chain)
    for name, weight, bias, new_weight, b in updates:
        if isinstance(result, nn.Module):
            with torch.no_grad():
                weight.copy_(new_weight)
                if bias is not None:
                    bias.copy_(b)
        else:
            result[f"{name}.weight"] = new_weight
            if bias is not None:
                result[f"{name}.bias"] = b.to(bias.dtype)
    return result


def _check_architecture(graph: Graph, chain: Chain) -> None:
    """A graph that records an architecture matches the template's, step by step."""
    recorded = getattr(graph, "architecture", None)
    if recorded is not None and tuple(recorded) != chain.architecture:
        step, (found, wanted) = next(
            (i, pair) for i, pair in enumerate(itertools.zip_longest(recorded, chain.architecture, fillvalue="<end>"), 1)
            if pair[0] != pair[1]
        )
        raise GraphConversionError(
            f"the template's architecture differs from the graph's at step {step}: graph {found!r}, "
            f"template {wanted!r} (delete graph.architecture to load the weights regardless)"
        )
