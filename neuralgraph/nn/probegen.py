r"""Probing baselines: a network is read through its outputs on learned inputs (probes), not through its weights.

ProbeGen (Kahana et al., ICLR 2025, "Deep Linear Probe Generators for Weight Space Learning",
https://arxiv.org/abs/2410.10811, code https://github.com/jonkahana/ProbeGen) and its vanilla
learned-probe baseline. For a network :math:`f` and ``P`` probes :math:`x_1, \dots, x_P`:

.. math::
    h(f) = \mathrm{MLP}\big([\,f(x_1), f(x_2), \dots, f(x_P)\,]\big), \qquad
    x_p = \begin{cases} G(z_p) = A_K \cdots A_2 A_1 z_p & \texttt{probegen} \\
                        \theta_p & \texttt{probe} \end{cases}

``probegen``'s probes come from learned latent codes :math:`z_p \in \mathbb{R}^{d_z}` through one
generator :math:`G` shared by every probe: a stack of affine layers :math:`A_k` without activations
between them (a *deep linear* generator; its depth is an implicit regulariser towards structured
probes), linear layers for coordinates, transposed convolutions for images. ``probe`` learns each
probe :math:`\theta_p` directly. Image probes are squashed by ``tanh`` into ``[-1, 1]``, as the
reference code does for both. The responses are concatenated in probe order and read by an MLP;
the task's readout is the MLP's last linear layer (:class:`ProbeReadout`).

What is probed, ``network``:

* ``"siren"`` (the default; INR data's ``GraphSpec`` carries its SIREN convention, which fills in
  ``network`` and ``convention``; without one, DWS MNIST's, as the tasks render): probes are
  coordinates in :math:`\mathbb{R}^2`, responses the INR's values :math:`s\,(W_L h_{L-1} + b_L) + c` with
  :math:`h_l = \sin(\omega_0 (W_l h_{l-1} + b_l))`, read from the batch's weights
  (:func:`~neuralgraph.graph.blocks.batch_mlps`) and evaluated for every INR of the batch at once.
* ``"cnn_zoo"``, ``"transformer_zoo"``: probes are images, responses the logits of the module each
  graph rebuilds: the zoo's :class:`~neuralgraph.data.cnn_zoo.ZooNetwork` or
  :class:`~neuralgraph.data.transformer_zoo.ZooViT` whose traced architecture the graph records
  (``graph.architecture``), or, for a graph that records none (a CNN zoo batch built from its weight
  blocks), whose layout and per-layer activations it has. The graphs' parameters are written into
  that module as :func:`~neuralgraph.graph.graph_to_module` writes them (from the batch's
  :class:`~neuralgraph.graph.blocks.WeightBlocks` where it carries them), stacked, and the networks of
  one architecture run as one ``torch.vmap`` of ``torch.func.functional_call`` over their parameters.
  A graph that records neither its architecture nor its activations is refused in one line, and so
  are graphs whose edges carry kernels or attention (``edge_features > 1``) left at ``"siren"``.

Invariance holds by construction: the features depend on the network only through its function
:math:`f`, which a permutation of hidden neurons (channels, attention heads, MLP units) leaves
unchanged; inputs and outputs keep their order (``symmetry = "hidden"``). The probed networks are
data: no gradient flows into their weights; the latent codes, generator and MLP are learned.

Settings and where they come from (reference code: ``ProbeGen.py``, ``main.py`` and
``scripts/main_results``, ``scripts/vanilla_probing`` of the repository above):

* ``num_probes``: 64 or 128 (the paper's tables and the scripts run both; ``main.py``'s default, 128).
* ``latent_dim``: 32 (``--gen_latent_z``).
* Coordinate generator: 2 linear layers, ``32 -> 32 -> 2`` (``gen_type=linear_2_no_acts``, the MNIST
  and Fashion-MNIST INR scripts); its vanilla counterpart learns the coordinates (``linear_0_no_acts``).
* Image generator: 6 transposed convolutions from ``32 x 1 x 1`` through ``8w, 4w, 2w, 2w, w`` channels,
  ``w = 16`` (``--gen_hidden``), to the image, then ``tanh`` (``gen_type=deep_linear_6``, the Small
  CNN Zoo scripts; 5 layers, without the second ``2w`` one, is ``deep_linear_5``, the CNN Wild Park's).
  The reference makes 32x32 images (4, 8, 16, 16, 32, 32 pixels); for an image side ``S`` the second
  layer's kernel is ``S / 4 - 4`` (4 at ``S = 32``, the reference; 3 at ``S = 28``, MNIST, which a
  ViT's positional embedding fixes). Its vanilla counterpart learns the pixels (``deep_linear_0``).
* Classifier: 6 linear layers of width 256 with ReLU (``--n_layers 6 --d_hid 256``): here ``num_layers = 5``
  layers ``Linear + ReLU`` (``hidden_dim = 256``) and the readout's linear layer.
* Optimisation (the configs'): Adam at lr 3e-4 without weight decay, batch 32, 30 epochs for INRs,
  150 for the CNN zoo (the scripts). The reference anneals the rate with a cosine schedule; the
  tasks keep their ReduceLROnPlateau.
* Initialisation (the reference's): latent codes and vanilla probes standard normal, layers PyTorch's default.
"""
from __future__ import annotations

import contextlib
import copy
import functools
import itertools
from dataclasses import dataclass
from typing import Any, Callable, Optional, Sequence

import torch
from torch import Tensor, nn
from torch.func import functional_call
from torch_geometric.data import Batch
from torch_geometric.utils import scatter

from neuralgraph.graph import Graph, GraphConversionError, graph_layouts, module_to_graph
from neuralgraph.graph.blocks import GraphFacts, WeightBlocks, batch_mlps, num_graphs
from neuralgraph.graph.convert.module import _load_module
from neuralgraph.graph.convert.registry import layer_weight
from neuralgraph.graph.convert.trace import Chain, trace_chain
from neuralgraph.graph.spec import GraphSpec
from neuralgraph.inr.convention import DWS_MNIST, SirenConvention
from neuralgraph.inr.render import autocast_active, autocast_off, full_precision
from neuralgraph.nn.base import Metanet
from neuralgraph.nn.context import GraphContext, graph_context
from neuralgraph.nn.registry import register_baseline

# The reference's settings (module docstring).
NUM_PROBES = 128
LATENT_DIM = 32
COORDINATE_GENERATOR_LAYERS = 2
IMAGE_GENERATOR_LAYERS = 6
GENERATOR_WIDTH = 16
HIDDEN_DIM = 256
NUM_LAYERS = 5


# -- probes ---------------------------------------------------------------------------------------

class LearnedProbes(nn.Module):
    r"""Vanilla probing's probes, learned directly: :math:`x_p = \theta_p` (images: :math:`\tanh \theta_p`).

    Args:
        num_probes: ``P``.
        shape: one probe's shape: ``(d_in,)`` coordinates or ``(C, S, S)`` images.
        squash: ``tanh`` on the parameters (the reference's image probes).
    """

    def __init__(self, num_probes: int, shape: Sequence[int], squash: bool = False):
        super().__init__()
        self.squash = squash
        self.weight = nn.Parameter(torch.empty(num_probes, *shape))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        nn.init.normal_(self.weight)

    def forward(self) -> Tensor:
        """The probes ``[P, *shape]``."""
        return torch.tanh(self.weight) if self.squash else self.weight


class DeepLinearCoordinates(nn.Module):
    r"""Coordinate probes from latent codes through linear layers without activations.

    :math:`x_p = A_K \cdots A_1 z_p`, :math:`A_k(z) = W_k z + b_k`, widths ``d_z -> d_z -> ... -> d_in``.

    Args:
        num_probes: ``P``.
        dim: ``d_in``, the coordinates' dimension.
        latent_dim: ``d_z``.
        layers: ``K``, the linear layers (at least 1).
    """

    def __init__(self, num_probes: int, dim: int, latent_dim: int = LATENT_DIM,
                 layers: int = COORDINATE_GENERATOR_LAYERS):
        super().__init__()
        if layers < 1:
            raise ValueError(f"ProbeGen: generator_layers={layers}: a coordinate generator has at least 1 linear layer")
        self.latent = nn.Parameter(torch.empty(num_probes, latent_dim))
        sizes = [latent_dim] * layers + [dim]
        self.layers = nn.Sequential(*(nn.Linear(a, b) for a, b in zip(sizes, sizes[1:])))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        nn.init.normal_(self.latent)
        for layer in self.layers:
            layer.reset_parameters()

    def forward(self) -> Tensor:
        """The probes ``[P, d_in]``."""
        return self.layers(self.latent)


class DeepLinearImages(nn.Module):
    r"""Image probes from latent codes ``[P, d_z, 1, 1]`` through transposed convolutions without activations,
    then ``tanh``.

    ``layers = 6`` (the reference's ``deep_linear_6``): kernel/stride/padding ``4/1/0`` to ``8w``
    channels at 4x4, ``(S/4 - 4)/2/1`` to ``4w`` at ``S/4``, ``4/2/1`` to ``2w`` at ``S/2``, ``3/1/1`` to
    ``2w``, ``4/2/1`` to ``w`` at ``S``, ``3/1/1`` to the image's ``C`` channels; ``layers = 5``
    (``deep_linear_5``) without the fourth. :math:`x_p = \tanh(A_K \cdots A_1 z_p)`.

    Args:
        num_probes: ``P``.
        channels: ``C``, the images' channels.
        size: ``S``, the images' side: a multiple of 4, at least 20.
        latent_dim: ``d_z``.
        layers: 5 or 6.
        width: ``w``.
    """

    def __init__(self, num_probes: int, channels: int, size: int, latent_dim: int = LATENT_DIM,
                 layers: int = IMAGE_GENERATOR_LAYERS, width: int = GENERATOR_WIDTH):
        super().__init__()
        if layers not in (5, 6):
            raise ValueError(f"ProbeGen: generator_layers={layers}: an image generator has 5 or 6 layers "
                             "(the reference's deep_linear_5 and deep_linear_6)")
        if size % 4 or size < 20:
            raise ValueError(f"ProbeGen: image_size={size}: the image generator makes sides that are multiples "
                             "of 4, at least 20 (its second layer's kernel is side / 4 - 4)")
        self.latent = nn.Parameter(torch.empty(num_probes, latent_dim, 1, 1))
        w = width
        spec = [(latent_dim, 8 * w, 4, 1, 0), (8 * w, 4 * w, size // 4 - 4, 2, 1), (4 * w, 2 * w, 4, 2, 1)]
        spec += [(2 * w, 2 * w, 3, 1, 1)] if layers == 6 else []
        spec += [(2 * w, w, 4, 2, 1), (w, channels, 3, 1, 1)]
        self.layers = nn.Sequential(*(nn.ConvTranspose2d(a, b, k, s, p) for a, b, k, s, p in spec))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        nn.init.normal_(self.latent)
        for layer in self.layers:
            layer.reset_parameters()

    def forward(self) -> Tensor:
        """The probes ``[P, C, S, S]``."""
        return torch.tanh(self.layers(self.latent))


# -- what is probed ------------------------------------------------------------------------------

class SirenResponses:
    """The values of a batch's SIRENs at coordinate probes (module docstring): ``[B, P, d_out]``.

    Called with the batch's graph, its :class:`~neuralgraph.graph.blocks.WeightBlocks` (or ``None``: the
    weights are decoded from the graph) and the probes ``[P, d_in]``.

    Args:
        convention: what turns the weights into the INR's function (``w0``, output scale and offset).
    """

    def __init__(self, convention: SirenConvention):
        self.convention = convention
        self.input_shape = (convention.layout[0],)
        self.outputs = convention.layout[-1]

    def __call__(self, graph: Graph, blocks: Optional[WeightBlocks], probes: Tensor) -> Tensor:
        try:
            weights, biases = batch_mlps(graph, blocks)
        except GraphConversionError as err:
            raise ValueError(f"ProbeGen(network='siren'): the graphs are not SIRENs of one layout ({err})") from None
        if weights[0].shape[-1] != probes.shape[-1]:
            raise ValueError(f"ProbeGen(network='siren'): the INRs read {weights[0].shape[-1]} coordinates, the probes "
                             f"have {probes.shape[-1]}")
        device = weights[0].device.type
        if autocast_active(device) or weights[0].dtype.itemsize < 4:  # as render: sin(w0 x) needs float32
            with autocast_off(device):
                return self.values([full_precision(w) for w in weights], [full_precision(b) for b in biases],
                                   full_precision(probes))
        return self.values(weights, biases, probes)

    def values(self, weights: Sequence[Tensor], biases: Sequence[Tensor], probes: Tensor) -> Tensor:
        """The SIRENs ``[B, d_out, d_in]``/``[B, d_out]`` at ``probes`` ``[P, d_in]``: ``[B, P, d_out]``."""
        c = self.convention
        h = probes.to(weights[0].dtype)  # [P, d_0], shared by every INR
        for w, b in zip(weights[:-1], biases[:-1]):
            h = torch.sin(c.w0 * (torch.matmul(h, w.transpose(1, 2)) + b.unsqueeze(1)))
        out = torch.matmul(h, weights[-1].transpose(1, 2)) + biases[-1].unsqueeze(1)
        return c.output_scale * out + c.output_offset

    def __repr__(self) -> str:
        return f"siren(w0={self.convention.w0})"


class _Candidate:
    """One module a family's graphs may rebuild: its settings, the module (eval mode), its traced walk and the
    input it was traced on (``[2, *input_shape]``)."""

    def __init__(self, settings: tuple[tuple[str, Any], ...], module: nn.Module, chain: Chain, example: Tensor):
        self.settings, self.module, self.chain, self.example = settings, module, chain, example
        self.copies: dict[tuple[torch.device, torch.dtype], nn.Module] = {}

    @functools.cached_property
    def graph(self) -> Graph:
        """Its parameter graph (read for graphs that record no architecture: their layout and activations)."""
        return module_to_graph(self.module, example_input=self.example)

    @functools.cached_property
    def activations(self) -> tuple[int, ...]:
        """Its activation code per node layer (``-1``: none recorded)."""
        graph = self.graph
        codes = torch.full((len(graph.layout),), -1, dtype=torch.long)
        if getattr(graph, "activation", None) is not None:
            codes[graph.node_layer] = graph.activation.long()
        return tuple(codes.tolist())

    def on(self, device: torch.device, dtype: torch.dtype) -> nn.Module:
        """The module on ``device`` in ``dtype`` (the graphs' parameters are written into copies of it)."""
        key = (torch.device(device), dtype)
        if key not in self.copies:
            self.copies[key] = copy.deepcopy(self.module).to(device=device, dtype=dtype).eval()
        return self.copies[key]


@functools.lru_cache(maxsize=256)
def _candidate(family: str, settings: tuple[tuple[str, Any], ...], input_shape: tuple[int, ...]) -> _Candidate:
    """The candidate module of ``family`` built with ``settings``, traced on ``input_shape`` images (once per
    process)."""
    module = FAMILIES[family].module_class()(**dict(settings)).eval()
    example = torch.randn(2, *input_shape, generator=torch.Generator().manual_seed(0))
    return _Candidate(settings, module, trace_chain(module, example), example)


@dataclass(frozen=True)
class Family:
    """Modules the graphs of a zoo rebuild, for :class:`ModuleResponses`.

    Attributes:
        module_class: returns the modules' class (imported when first needed: the data package imports this one).
        candidates: ``candidates(layout)``: the constructor settings of each module graphs of ``layout`` may rebuild.
        channels: the input images' channels.
        image_size: the input images' side.
        fixed_size: no other side runs (a positional embedding fixes the tokens).
        outputs: the logits of a network.
    """

    module_class: Callable[[], type]
    candidates: Callable[[tuple[int, ...]], list[dict[str, Any]]]
    channels: int
    image_size: int
    fixed_size: bool
    outputs: int


def _zoo_network() -> type:
    from neuralgraph.data.cnn_zoo import ZooNetwork
    return ZooNetwork


def _zoo_vit() -> type:
    from neuralgraph.data.transformer_zoo import ZooViT
    return ZooViT


def _cnn_zoo_candidates(layout: tuple[int, ...]) -> list[dict[str, Any]]:
    """The zoo's CNNs of ``layout`` ``(1, C, C, C, 10)``, one per activation."""
    from neuralgraph.data.cnn_zoo import ACTIVATIONS, NUM_CLASSES
    if len(layout) != 5 or layout[0] != 1 or len(set(layout[1:4])) != 1 or layout[-1] != NUM_CLASSES:
        return []
    return [{"channels": layout[1], "activation": a} for a in ACTIVATIONS]


def _transformer_zoo_candidates(layout: tuple[int, ...]) -> list[dict[str, Any]]:
    """Every architecture of the transformer zoo's recipes (their traced walks tell them apart)."""
    from neuralgraph.data.transformer_zoo import RECIPES
    return [{**r.architecture, "depth": d, "heads": h, "mlp_dim": m, "activation": a} for r in RECIPES.values()
            for d, h, m, a in itertools.product(r.depths, r.heads, r.mlp_dims, r.choices["activation"])]


#: The :class:`Family` of each zoo whose graphs :class:`ModuleResponses` rebuilds, by name.
FAMILIES: dict[str, Family] = {
    # the MNIST zoo of make-cnn-zoo (28x28 digits); the reference probes CIFAR10-GS networks at 32x32
    "cnn_zoo": Family(_zoo_network, _cnn_zoo_candidates, channels=1, image_size=28, fixed_size=False, outputs=10),
    # ZooViT: 7x7 patches of 28x28 digits, a positional embedding of their 16 tokens
    "transformer_zoo": Family(_zoo_vit, _transformer_zoo_candidates, channels=1, image_size=28, fixed_size=True,
                              outputs=10),
}
NETWORKS = ("siren", *FAMILIES)


@contextlib.contextmanager
def _batchable_attention():
    """``nn.MultiheadAttention`` off its fused inference kernel and attention on PyTorch's math kernel,
    whose operations ``vmap`` batches (neither fused kernel has a batching rule)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    enabled = torch.backends.mha.get_fastpath_enabled()
    torch.backends.mha.set_fastpath_enabled(False)
    try:
        with sdpa_kernel(SDPBackend.MATH):
            yield
    finally:
        torch.backends.mha.set_fastpath_enabled(enabled)


def _graph_list(graph: Graph, name: str) -> list:
    """A per-graph attribute as a list (a ``Batch`` keeps one entry per graph; ``None`` where absent)."""
    value = getattr(graph, name, None)
    if value is None:
        return [None] * num_graphs(graph)
    if isinstance(graph, Batch):
        return [None if v is None else tuple(v) for v in value]
    return [tuple(value)]


def _graph_activations(graph: Graph, layouts: Sequence[tuple[int, ...]]) -> list[Optional[tuple[int, ...]]]:
    """Each graph's activation code per node layer (``-1``: none recorded), ``None`` for graphs without the field."""
    if getattr(graph, "activation", None) is None:
        return [None] * len(layouts)
    batch = graph.batch if isinstance(graph, Batch) else torch.zeros_like(graph.node_layer)
    codes = torch.full((len(layouts), max(len(l) for l in layouts)), -1, dtype=torch.long, device=graph.x.device)
    codes[batch, graph.node_layer] = graph.activation.long()
    return [tuple(row[:len(layout)]) for row, layout in zip(codes.tolist(), layouts)]


class ModuleResponses:
    """The logits of the modules a batch's graphs rebuild, on image probes (module docstring): ``[B, P, outputs]``.

    Called with the batch's graph, its :class:`~neuralgraph.graph.blocks.WeightBlocks` (``None``: every
    network is rebuilt from its graph) and the probes ``[P, C, S, S]``.

    Args:
        family: a key of :data:`FAMILIES`.
        image_size: the probes' side (default: the family's).
    """

    def __init__(self, family: str, image_size: Optional[int] = None):
        if family not in FAMILIES:
            raise ValueError(f"ProbeGen: network={family!r}: expected one of {list(NETWORKS)}")
        self.family = family
        spec = FAMILIES[family]
        size = spec.image_size if image_size is None else image_size
        if spec.fixed_size and size != spec.image_size:
            raise ValueError(f"ProbeGen: image_size={size}, but {family} networks read {spec.image_size}x"
                             f"{spec.image_size} images only")
        self.input_shape = (spec.channels, size, size)
        self.outputs = spec.outputs

    def candidates(self, layout: tuple[int, ...]) -> list[_Candidate]:
        """The modules graphs of ``layout`` may rebuild."""
        return [_candidate(self.family, tuple(sorted(settings.items())), self.input_shape)
                for settings in FAMILIES[self.family].candidates(layout)]

    def match(self, index: int, layout: tuple[int, ...], architecture: Optional[tuple[str, ...]],
              activations: Optional[tuple[int, ...]]) -> _Candidate:
        """The module graph ``index`` rebuilds: the one whose traced walk it records, or, without a record, the
        one of its layout and per-layer activations. Errors name what the graph lacks."""
        candidates = self.candidates(layout)
        if architecture is not None:
            found = [c for c in candidates if c.chain.architecture == architecture]
        elif activations is None:
            raise ValueError(f"ProbeGen(network={self.family!r}): graph {index} records neither its architecture nor "
                             "its activations, so the module it rebuilds is unknown")
        else:
            found = [c for c in candidates if tuple(c.graph.layout) == layout and c.activations == activations]
        if not found:
            raise ValueError(f"ProbeGen(network={self.family!r}): graph {index} (layout {layout}) rebuilds none of "
                             f"the {len(candidates)} {self.family} networks of its layout")
        return found[0]

    @staticmethod
    def parameters_from_blocks(candidate: _Candidate, module: nn.Module, blocks: WeightBlocks,
                               rows: list[int]) -> Optional[dict[str, Tensor]]:
        """The stacked parameters of networks ``rows`` of a chain module, read from the batch's blocks as
        :func:`~neuralgraph.graph.graph_to_module` reads them from a graph; ``None`` where the blocks do not
        hold every parameter (a module beyond a chain, skips, shortcuts)."""
        chain = candidate.chain
        if chain.general or chain.skips or chain.shortcuts or len(chain.layers) != len(blocks.weights):
            return None
        params: dict[str, Tensor] = {}
        for l, (name, converter) in enumerate(chain.layers):
            weight, bias = converter.parameters(module.get_submodule(name))
            in_neurons = blocks.layout[l] if l > 0 else None
            params[f"{name}.weight"] = torch.stack([layer_weight(name, weight, bias, converter, blocks.weights[l][i],
                                                                 in_neurons) for i in rows])
            if bias is not None:
                params[f"{name}.bias"] = blocks.biases[l][rows].to(bias.dtype)
            elif bool((blocks.biases[l][rows] != 0).any()):
                raise GraphConversionError(f"layer {name!r}: template has no bias but the graph's biases are nonzero")
        expected = {name for name, _ in itertools.chain(module.named_parameters(), module.named_buffers())}
        return params if set(params) == expected else None

    @staticmethod
    def parameters_from_graphs(candidate: _Candidate, module: nn.Module, graph: Graph,
                               rows: list[int]) -> dict[str, Tensor]:
        """The stacked parameters of graphs ``rows``, each written into a copy of the module along its traced walk
        (what :func:`~neuralgraph.graph.graph_to_module` does, without tracing the module again)."""
        states = []
        for i in rows:
            one = graph.get_example(i) if isinstance(graph, Batch) else graph
            rebuilt = _load_module(one, copy.deepcopy(module), candidate.chain)
            states.append(dict(itertools.chain(rebuilt.named_parameters(), rebuilt.named_buffers())))
        return {key: torch.stack([state[key].detach() for state in states]) for key in states[0]}

    def __call__(self, graph: Graph, blocks: Optional[WeightBlocks], probes: Tensor) -> Tensor:
        layouts = [tuple(int(d) for d in layout) for layout in graph_layouts(graph)]
        architectures = _graph_list(graph, "architecture")
        activations = _graph_activations(graph, layouts)
        groups: dict[int, tuple[_Candidate, list[int]]] = {}
        for i, facts in enumerate(zip(layouts, architectures, activations)):
            candidate = self.match(i, *facts)
            groups.setdefault(id(candidate), (candidate, []))[1].append(i)
        dtype = graph.x.dtype
        outputs: list[Optional[Tensor]] = [None] * len(layouts)
        for candidate, rows in groups.values():
            module = candidate.on(graph.x.device, dtype)
            with torch.no_grad():  # the probed networks are data
                params = None if blocks is None else self.parameters_from_blocks(candidate, module, blocks, rows)
                if params is None:
                    params = self.parameters_from_graphs(candidate, module, graph, rows)
            with _batchable_attention():
                logits = torch.vmap(functools.partial(functional_call, module), in_dims=(0, None))(
                    params, (probes.to(dtype),))
            for row, value in zip(rows, logits):
                outputs[row] = value
        return torch.stack(outputs)

    def __repr__(self) -> str:
        return f"{self.family}(input={self.input_shape})"


# -- the baselines --------------------------------------------------------------------------------

class ProbeEncoder(nn.Module):
    """The probes and the networks they go through: ``[B, P * outputs]`` responses per batch, probe by probe.

    Stands where a metanetwork's :class:`~neuralgraph.nn.encoder.GraphEncoder` stands. There is no input
    to standardise (the probes are learned), so the task's ``normalize_inputs`` must be off.

    The probes do not depend on the networks probed: in eval mode without autograd (validation, test,
    prediction) they are made once and kept until a parameter of their module changes (an optimizer step,
    ``load_state_dict``, a move to another device or dtype), so that a prediction costs the networks'
    forward passes and the classifier, not the generator.

    Args:
        probes: makes the probes (``probes()``: ``[P, *input_shape]``).
        responses: :class:`SirenResponses` or :class:`ModuleResponses`.
        outputs: the outputs per probe the networks must give.
    """

    def __init__(self, probes: nn.Module, responses: Callable[[Graph, Optional[WeightBlocks], Tensor], Tensor],
                 outputs: int):
        super().__init__()
        self.probes = probes
        self.responses = responses
        self.outputs = outputs
        self.kept: Optional[tuple[tuple, Tensor]] = None  # (the parameters' state, the probes made from it)

    def reset_parameters(self) -> None:
        self.probes.reset_parameters()

    def set_input_statistics(self, graph: Graph) -> None:
        """Refused in one line: nothing is standardised (the task's ``normalize_inputs`` callback calls this)."""
        raise ValueError("ProbeGen reads the networks' outputs on learned probes and has no input statistics: set "
                         "model.init_args.normalize_inputs to false")

    def current_probes(self) -> Tensor:
        """The probes ``[P, *input_shape]``: made anew in training or under autograd, else kept (class docstring)."""
        if self.training or torch.is_grad_enabled():
            self.kept = None
            return self.probes()
        state = tuple((p.data_ptr(), p._version, p.dtype, p.device) for p in self.probes.parameters())
        if self.kept is None or self.kept[0] != state:
            self.kept = (state, self.probes())
        return self.kept[1]

    def forward(self, graph: Graph, blocks: Optional[WeightBlocks] = None) -> Tensor:
        responses = self.responses(graph, blocks, self.current_probes())
        if responses.shape[-1] != self.outputs:
            raise ValueError(f"ProbeGen: built for networks of {self.outputs} outputs, but the graphs' have "
                             f"{responses.shape[-1]}")
        return responses.flatten(1)


class ProbeReadout(nn.Module):
    """The classifier's last linear layer, on each network's features (its nodes' rows, which are all equal).

    Tasks hand it the ``[B, hidden_dim]`` rows of :meth:`Probing.network_features` directly
    (``per_network``, :meth:`from_network`), which skips the node and edge rows that ``forward`` reads:
    writing one row per edge is most of a probing step on INR batches (38k rows of 256 for 32 SIRENs).

    Args:
        hidden_dim: the features' width.
        out_dim: the outputs.
    """

    per_network = True

    def __init__(self, hidden_dim: int, out_dim: int):
        super().__init__()
        self.lin = nn.Linear(hidden_dim, out_dim)

    def reset_parameters(self) -> None:
        self.lin.reset_parameters()

    def forward(self, graph: Graph, node_features: Tensor, edge_features: Tensor,
                context: Optional[GraphContext] = None) -> Tensor:
        """``[B, out_dim]``; ``context``: the batch's, built here when not given."""
        context = graph_context(graph, dense=False) if context is None else context
        return self.lin(scatter(node_features, context.batch, 0, context.num_graphs, "mean"))

    def from_network(self, network_features: Tensor) -> Tensor:
        """``[B, out_dim]`` from each network's ``[B, hidden_dim]`` features."""
        return self.lin(network_features)


class Probing(Metanet):
    """A network read through its responses to probes (module docstring); subclasses make the probes.

    Args:
        hidden_dim: width of the classifier's hidden layers and of the features handed to the head.
        num_layers: the classifier's ``Linear + ReLU`` layers (at least 1); the readout adds its last
            linear layer.
        dropout: dropout after each ReLU.
        num_probes: ``P``.
        network: what the graphs are: ``"siren"`` (filled in from INR data's GraphSpec), ``"cnn_zoo"`` or
            ``"transformer_zoo"`` (module docstring).
        convention: the SIRENs' convention (``SirenConvention.to_dict()``; from INR data's GraphSpec;
            ``None``: DWS MNIST's).
        image_size: side of the image probes (default: the family's, 28 for both zoos).
        edge_features: the graphs' edge feature width (given by the data's GraphSpec): SIRENs have 1.
    """

    symmetry = "hidden"

    def __init__(self, hidden_dim: int = HIDDEN_DIM, num_layers: int = NUM_LAYERS, dropout: float = 0.0, *,
                 num_probes: int = NUM_PROBES, network: str = "siren", convention: Optional[dict[str, Any]] = None,
                 image_size: Optional[int] = None, edge_features: int = 1):
        name = type(self).__name__
        if num_layers < 1:
            raise ValueError(f"{name}: num_layers={num_layers}: the classifier needs at least 1 layer")
        if num_probes < 1:
            raise ValueError(f"{name}: num_probes={num_probes}: expected at least 1 probe")
        if network not in NETWORKS:
            raise ValueError(f"{name}: network={network!r}: expected one of {list(NETWORKS)}")
        if network == "siren" and edge_features != 1:
            raise ValueError(f"{name}: network='siren', but the graphs have {edge_features} features per edge "
                             f"(kernels or attention): set network to the module they rebuild, one of {list(FAMILIES)}")
        if network != "siren" and convention is not None:
            raise ValueError(f"{name}: network={network!r} with a SIREN convention: only SIRENs are probed with one")
        if network == "siren" and image_size is not None:
            raise ValueError(f"{name}: image_size={image_size}: SIRENs are probed with coordinates, not images")
        super().__init__(hidden_dim, num_layers, dropout, edge_features=edge_features)
        self.num_probes, self.network = num_probes, network
        if network == "siren":
            responses = SirenResponses(DWS_MNIST if convention is None else SirenConvention.from_dict(convention))
        else:
            responses = ModuleResponses(network, image_size)
        self.encoder = ProbeEncoder(self.make_probes(num_probes, responses.input_shape), responses,
                                    responses.outputs)  # no graph encoder: the responses go in
        sizes = [num_probes * responses.outputs] + [hidden_dim] * num_layers
        mlp: list[nn.Module] = []
        for d_in, d_out in zip(sizes, sizes[1:]):
            mlp += [nn.Linear(d_in, d_out), nn.ReLU()] + ([nn.Dropout(dropout)] if dropout else [])
        self.mlp = nn.Sequential(*mlp)

    def make_probes(self, num_probes: int, shape: tuple[int, ...]) -> nn.Module:
        """The module making ``num_probes`` probes of ``shape`` (``probes()`` -> ``[P, *shape]``)."""
        raise NotImplementedError(f"{type(self).__name__} does not say how its probes are made")

    def reset_parameters(self) -> None:
        self.encoder.reset_parameters()
        for module in self.mlp:
            if isinstance(module, nn.Linear):
                module.reset_parameters()

    def context(self, graph: Graph, blocks: Optional[WeightBlocks] = None,
                facts: Optional[GraphFacts] = None) -> GraphContext:
        """The batch's :class:`~neuralgraph.nn.context.GraphContext` (general path), holding its ``blocks``: the
        networks' weights, which the responses read where the batch carries them."""
        return graph_context(graph, dense=False, blocks=blocks, facts=facts)

    def forward(self, graph: Graph, context: Optional[GraphContext] = None) -> tuple[Tensor, Tensor]:
        """The classifier's ``[B, hidden_dim]`` features of the responses, as the features of every node
        ``[N, hidden_dim]`` and every edge ``[E, hidden_dim]`` of its network."""
        context = self.context(graph) if context is None else context
        h = self.network_features(graph, context)
        return h[context.batch], h[context.batch[graph.edge_index[1]]]

    def network_features(self, graph: Graph, context: GraphContext) -> Tensor:
        """The classifier's ``[B, hidden_dim]`` features of each network's responses (what ``forward`` repeats
        over the network's nodes and edges)."""
        return self.mlp(self.encoder(graph, context.blocks))

    def probes(self) -> Tensor:
        """The current probes ``[P, *input_shape]``."""
        return self.encoder.probes()

    def readout(self, out_dim: int, **options) -> ProbeReadout:
        """The classifier's last linear layer (:class:`ProbeReadout`), to ``out_dim`` outputs."""
        if options:
            raise TypeError(f"{type(self).__name__}.readout takes no options (got {sorted(options)}): it is one "
                            "linear layer on the features")
        return ProbeReadout(self.hidden_dim, out_dim)

    @classmethod
    def spec_arguments(cls, spec: GraphSpec) -> dict[str, Any]:
        """The edge feature width; for INR data (a GraphSpec with a SIREN convention), ``network="siren"`` and
        the convention."""
        if spec.convention is not None:
            return {"edge_features": spec.edge_features, "network": "siren", "convention": dict(spec.convention)}
        return {"edge_features": spec.edge_features}

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(hidden_dim={self.hidden_dim}, num_layers={self.num_layers}, "
                f"dropout={self.dropout}, num_probes={self.num_probes}, network={self.encoder.responses!r}, "
                f"probes={type(self.encoder.probes).__name__})")


@register_baseline("probegen")
class ProbeGen(Probing):
    """ProbeGen: probes from learned latent codes through a shared deep linear generator (module docstring).

    Args:
        hidden_dim: width of the classifier's hidden layers and of the features handed to the head.
        num_layers: the classifier's ``Linear + ReLU`` layers (at least 1); the readout adds its last
            linear layer.
        dropout: dropout after each ReLU.
        num_probes: ``P``.
        network: what the graphs are: ``"siren"`` (filled in from INR data's GraphSpec), ``"cnn_zoo"`` or
            ``"transformer_zoo"`` (module docstring).
        convention: the SIRENs' convention (``SirenConvention.to_dict()``; from INR data's GraphSpec;
            ``None``: DWS MNIST's).
        image_size: side of the image probes (default: the family's, 28 for both zoos).
        edge_features: the graphs' edge feature width (given by the data's GraphSpec): SIRENs have 1.
        latent_dim: ``d_z`` of the latent codes.
        generator_layers: the generator's layers: linear layers for coordinates (default 2), transposed
            convolutions for images (5 or 6, default 6).
        generator_width: ``w`` of the image generator's channels (``8w, 4w, 2w, (2w,) w``).
    """

    def __init__(self, hidden_dim: int = HIDDEN_DIM, num_layers: int = NUM_LAYERS, dropout: float = 0.0, *,
                 num_probes: int = NUM_PROBES, network: str = "siren", convention: Optional[dict[str, Any]] = None,
                 image_size: Optional[int] = None, edge_features: int = 1, latent_dim: int = LATENT_DIM,
                 generator_layers: Optional[int] = None, generator_width: int = GENERATOR_WIDTH):
        if latent_dim < 1 or generator_width < 1:
            raise ValueError(f"ProbeGen: latent_dim={latent_dim}, generator_width={generator_width}: expected "
                             "positive sizes")
        self.latent_dim, self.generator_layers, self.generator_width = latent_dim, generator_layers, generator_width
        super().__init__(hidden_dim, num_layers, dropout, num_probes=num_probes, network=network,
                         convention=convention, image_size=image_size, edge_features=edge_features)

    def make_probes(self, num_probes: int, shape: tuple[int, ...]) -> nn.Module:
        """:class:`DeepLinearCoordinates` for coordinates, :class:`DeepLinearImages` for images."""
        if len(shape) == 1:
            layers = COORDINATE_GENERATOR_LAYERS if self.generator_layers is None else self.generator_layers
            return DeepLinearCoordinates(num_probes, shape[0], self.latent_dim, layers)
        layers = IMAGE_GENERATOR_LAYERS if self.generator_layers is None else self.generator_layers
        return DeepLinearImages(num_probes, shape[0], shape[-1], self.latent_dim, layers, self.generator_width)


@register_baseline("probe")
class VanillaProbe(Probing):
    """Vanilla probing: each probe is learned itself (module docstring); image probes through ``tanh``.

    Args:
        hidden_dim: width of the classifier's hidden layers and of the features handed to the head.
        num_layers: the classifier's ``Linear + ReLU`` layers (at least 1); the readout adds its last
            linear layer.
        dropout: dropout after each ReLU.
        num_probes: ``P``.
        network: what the graphs are: ``"siren"`` (filled in from INR data's GraphSpec), ``"cnn_zoo"`` or
            ``"transformer_zoo"`` (module docstring).
        convention: the SIRENs' convention (``SirenConvention.to_dict()``; from INR data's GraphSpec;
            ``None``: DWS MNIST's).
        image_size: side of the image probes (default: the family's, 28 for both zoos).
        edge_features: the graphs' edge feature width (given by the data's GraphSpec): SIRENs have 1.
    """

    def make_probes(self, num_probes: int, shape: tuple[int, ...]) -> nn.Module:
        """:class:`LearnedProbes`, squashed by ``tanh`` for images."""
        return LearnedProbes(num_probes, shape, squash=len(shape) > 1)
