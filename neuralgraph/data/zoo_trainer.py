"""The trainer every zoo generator shares: many networks of one family, each trained as if alone.

A shard of a zoo is ``n`` networks, each with its own hyperparameters, initialisation, training
subset, mini-batch order, dropout masks and optimizer state. The generators
(:mod:`~neuralgraph.data.cnn_zoo`, :mod:`~neuralgraph.data.small_cnn_zoo_preset`,
:mod:`~neuralgraph.data.transformer_zoo`) keep their recipes (what to draw, how to initialise,
what to store) and hand the networks to :func:`fit`, which trains a *stack* of them:

* **Stacked parameters.** A stack holds its networks' parameters as rows of one flat tensor
  ``[n, P]`` (the CNN's in the layout its matrix products read, the ViT's one flat tensor per
  architecture), and :class:`StackedOptimizer` steps every network's row with that network's own
  rule (:class:`Adam`, :class:`RMSprop`, :class:`SGD`; AdamW is ``Adam(decoupled=True)``), learning
  rate and weight decay, held as per-network tensors: a few operations per run of networks of one
  rule, each the arithmetic of ``torch.optim``'s single-network step.
* **Own mini-batches.** Each network draws batches without replacement from its own training
  subset, in an order from its own seed (:class:`MiniBatches`); a network with a smaller subset
  takes fewer steps per epoch (the networks of a stack are ordered so that those still stepping
  are leading rows of every run).
* **Own dropout masks.** Each network's masks come from its own counter-based stream of random
  16-bit integers (:class:`RandomBits`): a unit is kept when its integer is below the network's
  threshold. The stream is the same from torch operations on any device and from the compiled
  kernels.
* **CNN** (:class:`ConvStack`): forward and backward written out per network in image tiles
  that stay in the processor's caches: each convolution its 3x3 stride-2 patches (channels last)
  and one matrix product, the backward the transposed products and the patches' gradients added
  back; no autograd. On CPU the elementwise steps run as compiled kernels
  (``neuralgraph/_kernels/zoo_conv.cpp``: the first convolution, activation, mask and patches in
  one pass; the patch gradients, activation derivative and first-layer weight gradient in
  another), else as torch operations.
* **ViT** (:class:`VitStack`): the networks of one architecture as one batched matrix product
  per layer (``bmm`` over networks), differentiated by autograd.

So a network's training does not depend on which networks share its shard (tested: one network
trained alone and within a shard of 64 ends with the same weights, to float rounding). The
device is that of the tensors: on CPU the tiles are cache-sized and each operation runs on one
thread (:func:`fit` trains ``torch.get_num_threads()`` networks side by side), elsewhere a tile
is a whole batch; no step reads a value back to the host (a network whose parameters turned
non-finite is found once per epoch). Float32 is the default and a rerun is bitwise identical;
float64 runs the same code (the tests compare against ``nn.Module`` + ``torch.optim`` that way).
"""
from __future__ import annotations

import ctypes
import math
import warnings
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, NamedTuple, Optional, Sequence, Union

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

# ---------------------------------------------------------------------------------------------
# optimizers


@dataclass(frozen=True)
class Adam:
    """``torch.optim.Adam`` (``decoupled``: ``torch.optim.AdamW``); weight decay per network.

    Args:
        betas: the moments' decay rates.
        eps: added to the second moment's root.
        decoupled: weight decay shrinks the parameters (AdamW) instead of adding to the gradient.
    """

    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-8
    decoupled: bool = False


@dataclass(frozen=True)
class RMSprop:
    """``torch.optim.RMSprop`` without momentum, not centered.

    Args:
        alpha: the squared gradients' decay rate.
        eps: added to their mean's root.
    """

    alpha: float = 0.99
    eps: float = 1e-8


@dataclass(frozen=True)
class SGD:
    """``torch.optim.SGD`` (no dampening, not Nesterov).

    Args:
        momentum: the momentum factor (0: none).
    """

    momentum: float = 0.0


Rule = Union[Adam, RMSprop, SGD]


def torch_optimizer(rule: Rule, params, lr: float, weight_decay: float = 0.0) -> torch.optim.Optimizer:
    """The ``torch.optim`` optimizer of one network trained alone under ``rule`` (what
    :class:`StackedOptimizer` computes row by row).

    Args:
        rule: :class:`Adam`, :class:`RMSprop` or :class:`SGD`.
        params: the parameters or parameter groups.
        lr: the learning rate.
        weight_decay: the weight decay (a group's own overrides it).

    Returns:
        The optimizer.
    """
    if isinstance(rule, Adam):
        kind = torch.optim.AdamW if rule.decoupled else torch.optim.Adam
        return kind(params, lr=lr, betas=rule.betas, eps=rule.eps, weight_decay=weight_decay)
    if isinstance(rule, RMSprop):
        return torch.optim.RMSprop(params, lr=lr, alpha=rule.alpha, eps=rule.eps, weight_decay=weight_decay)
    return torch.optim.SGD(params, lr=lr, momentum=rule.momentum, weight_decay=weight_decay)


def _runs(keys: Sequence) -> list[tuple[int, int]]:
    """``(start, end)`` of each run of equal consecutive ``keys``."""
    out, start = [], 0
    for i in range(1, len(keys) + 1):
        if i == len(keys) or keys[i] != keys[start]:
            out.append((start, i))
            start = i
    return out


def _ranges(rows: Sequence[int], start: int, end: int) -> Optional[Union[slice, list[int]]]:
    """The rows of ``rows`` (sorted) within ``[start, end)``: a slice when they are consecutive."""
    inside = [r for r in rows if start <= r < end]
    if not inside:
        return None
    if inside[-1] - inside[0] + 1 == len(inside):
        return slice(inside[0], inside[-1] + 1)
    return inside


class StackedOptimizer:
    """Each row of ``params`` ``[n, P]`` is one network, stepped by its own rule, learning rate and
    weight decay as ``torch_optimizer(rule, [row], lr, weight_decay)`` would step it alone.

    ``decay`` ``[P]`` (0 or 1) marks the entries weight decay applies to (default: all); a network
    of a coupled rule adds ``weight_decay * param`` to those entries' gradients, one of
    ``Adam(decoupled=True)`` shrinks them by ``1 - lr * weight_decay``. Consecutive networks of equal
    rule are one run, stepped by a few operations on their rows; per-network learning rates, decays
    and Adam's step counts (for its bias correction) are tensors. Only the rows :meth:`step` names
    move (parameters and state).

    Args:
        params: ``[n, P]``, one network per row, stepped in place.
        rules: each network's rule.
        lr: each network's learning rate.
        weight_decay: each network's weight decay.
        decay: ``[P]``, 1 where weight decay applies (default: everywhere).
        groups: each network's group (its architecture): runs of one group and rule step together.
    """

    def __init__(self, params: Tensor, rules: Sequence[Rule], lr: Sequence[float], weight_decay: Sequence[float],
                 decay: Optional[Tensor] = None, groups: Optional[Sequence] = None):
        n = params.shape[0]
        if not (len(rules) == len(lr) == len(weight_decay) == n):
            raise ValueError(f"StackedOptimizer: {n} rows, {len(rules)} rules, {len(lr)} learning rates, "
                             f"{len(weight_decay)} weight decays")
        self.params, self.rules = params, list(rules)
        device, dtype = params.device, params.dtype
        wd64 = torch.tensor(list(weight_decay), dtype=torch.float64, device=device)
        decay = torch.ones(params.shape[1], dtype=dtype, device=device) if decay is None else decay.to(device, dtype)
        coupled = torch.tensor([not (isinstance(r, Adam) and r.decoupled) for r in rules], device=device)
        self.coupled = (torch.where(coupled, wd64, 0).to(dtype).unsqueeze(1) * decay).contiguous()
        self.uses_coupled = [bool(w) for w in torch.where(coupled, wd64, 0).tolist()]
        self._decoupled_wd, self._decay = torch.where(coupled, 0, wd64), decay
        self.set_lr(lr)
        self.uses_shrink = [isinstance(r, Adam) and r.decoupled and w != 0 for r, w in zip(rules, weight_decay)]
        self.steps = torch.zeros(n, dtype=torch.float64, device=device)
        first = any(isinstance(r, Adam) or (isinstance(r, SGD) and r.momentum) for r in rules)
        second = any(isinstance(r, (Adam, RMSprop)) for r in rules)
        self.exp_avg = torch.zeros_like(params) if first else None  # Adam's first moment, SGD's momentum buffer
        self.exp_avg_sq = torch.zeros_like(params) if second else None
        self._rows: dict[tuple, Tensor] = {}
        self.blocks = _runs(self.rules if groups is None else list(zip(groups, map(repr, self.rules))))

    def set_lr(self, lr: Sequence[float]) -> None:
        """Each network's learning rate from now on (a schedule's; the state is kept).

        Args:
            lr: each network's learning rate.
        """
        dtype = self.params.dtype
        lr64 = torch.tensor(list(lr), dtype=torch.float64, device=self.params.device)
        self.lr64 = lr64
        self.neg_lr = (-lr64).to(dtype).unsqueeze(1)
        # decoupled decay: p *= 1 - lr * wd on the decayed entries (1 elsewhere)
        shrink = (1 - lr64 * self._decoupled_wd).to(dtype).unsqueeze(1)
        self.shrink = (1 + (shrink - 1) * self._decay).contiguous()

    @torch.no_grad()
    def step(self, grad: Tensor, rows: Optional[Sequence[int]] = None) -> None:
        """Step the networks ``rows`` (sorted; default all) on their gradients ``grad`` ``[n, P]``."""
        rows = range(len(self.rules)) if rows is None else rows
        for start, end in self.blocks:
            index = _ranges(rows, start, end)
            if index is None:
                continue
            if isinstance(index, slice):
                self._update(self.rules[start], index, grad[index], any(self.uses_coupled[index]),
                             any(self.uses_shrink[index]))
                continue
            key = tuple(index)
            if key not in self._rows:  # made once per pattern: no copy to the device per step
                self._rows[key] = torch.tensor(index, device=grad.device)
            idx = self._rows[key]
            picked = [self.uses_coupled[i] for i in index], [self.uses_shrink[i] for i in index]
            views = {name: getattr(self, name) for name in ("params", "exp_avg", "exp_avg_sq")}
            copies = {name: None if t is None else t[idx] for name, t in views.items()}
            self._update(self.rules[start], idx, grad[idx], any(picked[0]), any(picked[1]), copies)
            for name, t in views.items():
                if t is not None:
                    t.index_copy_(0, idx, copies[name])

    def _update(self, rule: Rule, index, grad: Tensor, coupled: bool, shrink: bool,
                copies: Optional[dict] = None) -> None:
        param = self.params[index] if copies is None else copies["params"]
        state = {name: getattr(self, name) for name in ("exp_avg", "exp_avg_sq")}
        m, v = ((None if t is None else t[index] if copies is None else copies[name]) for name, t in state.items())
        if coupled:
            grad = torch.addcmul(grad, param, self.coupled[index])
        neg_lr = self.neg_lr[index]
        if isinstance(rule, Adam):
            self.steps[index] += 1
            steps = self.steps[index]
            if shrink:
                param.mul_(self.shrink[index])
            beta1, beta2 = rule.betas
            m.lerp_(grad, 1 - beta1)
            v.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
            step_size = (-self.lr64[index] / (1 - beta1 ** steps)).to(param.dtype).unsqueeze(1)
            correction = torch.sqrt(1 - beta2 ** steps).to(param.dtype).unsqueeze(1)
            denom = v.sqrt().div_(correction).add_(rule.eps)
            param.add_(m.mul(step_size).div_(denom))
        elif isinstance(rule, RMSprop):
            v.mul_(rule.alpha).addcmul_(grad, grad, value=1 - rule.alpha)
            param.add_(grad.mul(neg_lr).div_(v.sqrt().add_(rule.eps)))
        else:
            if rule.momentum:
                grad = m.mul_(rule.momentum).add_(grad)
            param.add_(grad.mul(neg_lr))


# ---------------------------------------------------------------------------------------------
# per-network randomness and mini-batches


GOLDEN = 0x9E3779B97F4A7C15  # splitmix64's increment
MIX = (0xBF58476D1CE4E5B9, 0x94D049BB133111EB)  # splitmix64's finalizer multipliers


def _signed(value: int) -> int:
    """A 64-bit pattern as the int64 torch holds it."""
    return value - (1 << 64) if value >= 1 << 63 else value


def mix64(z: Tensor) -> Tensor:
    """splitmix64's finalizer of int64 ``z`` (two's complement, arithmetic modulo 2**64).

    Args:
        z: int64 tensor.

    Returns:
        The mixed values, int64.
    """
    z = z ^ ((z >> 30) & ((1 << 34) - 1))  # logical shifts: torch's >> on int64 keeps the sign
    z = z * _signed(MIX[0])
    z = z ^ ((z >> 27) & ((1 << 37) - 1))
    z = z * _signed(MIX[1])
    return z ^ ((z >> 31) & ((1 << 33) - 1))


def _mix64(z: int) -> int:
    z &= (1 << 64) - 1
    z = ((z ^ (z >> 30)) * MIX[0]) & ((1 << 64) - 1)
    z = ((z ^ (z >> 27)) * MIX[1]) & ((1 << 64) - 1)
    return z ^ (z >> 31)


class RandomBits:
    """One stream of uniform random 16-bit integers per network, counter-based.

    Word ``w`` of network ``i``'s stream is splitmix64's finalizer of ``key_i + w * GOLDEN``
    (modulo 2**64; ``key_i`` the finalizer of its seed), and its four 16-bit integers are the
    word's little-endian quarters. A draw takes the next whole words, so a stream depends on its
    seed alone and the draws can be cut anywhere on multiples of four; the same integers come out
    of :meth:`draw` (torch integer operations, on any device) and of the compiled kernels
    (:meth:`reserve`: the words a kernel computes itself).

    Args:
        seeds: each network's seed.
        device: where :meth:`draw` puts the integers.
    """

    def __init__(self, seeds: Sequence[int], device: torch.device):
        self.device = torch.device(device)
        self.keys = [_mix64(int(s)) for s in seeds]
        self.words = [0] * len(self.keys)

    def reserve(self, i: int, count: int) -> tuple[int, int]:
        """Take the next ``count`` integers of stream ``i`` without making them (a kernel will).

        Args:
            i: the network's row.
            count: how many (a multiple of four).

        Returns:
            Its key and the index of the first word taken.
        """
        start = self.words[i]
        self.words[i] += -(-count // 4)
        return self.keys[i], start

    def draw(self, i: int, count: int) -> Tensor:
        """The next ``count`` int16 of stream ``i`` (a multiple of four keeps later draws aligned).

        Args:
            i: the network's row.
            count: how many.

        Returns:
            ``[count]`` int16, uniform over all 65,536 values.
        """
        key, start = self.reserve(i, count)
        index = torch.arange(start, start + -(-count // 4), dtype=torch.int64, device=self.device)
        words = mix64(index * _signed(GOLDEN) + _signed(key))
        return words.view(torch.int16)[:count]  # little-endian quarters: the kernels' order


def keep_threshold(rate: float) -> Optional[int]:
    """Dropout of ``rate`` on 16-bit integers: a unit is kept when its integer (in [-32768, 32767])
    is below the threshold, so with probability ``(threshold + 32768) / 65536``, the nearest to
    ``1 - rate``.

    Args:
        rate: the dropout rate, in [0, 1).

    Returns:
        The threshold, or ``None`` when the probability is 1 (nothing dropped).
    """
    if not 0 <= rate < 1:
        raise ValueError(f"dropout rate {rate}: expected 0 <= rate < 1")
    threshold = round((1 - rate) * 65536) - 32768
    return None if threshold >= 32768 else threshold


def keep_mask(bits: Tensor, threshold: Optional[int], dtype: torch.dtype = torch.float32) -> Tensor:
    """The keep mask of ``bits`` under ``threshold``.

    Args:
        bits: int16 tensor (:class:`RandomBits`).
        threshold: :func:`keep_threshold`'s.
        dtype: the mask's dtype.

    Returns:
        1 where kept, 0 where dropped, shaped as ``bits``.
    """
    if threshold is None:
        return torch.ones(bits.shape, dtype=dtype, device=bits.device)
    return torch.lt(bits, threshold, out=torch.empty(bits.shape, dtype=dtype, device=bits.device))


class MiniBatches:
    """Each network's mini-batches: its own subset of the training images, shuffled every epoch by
    its own ``torch.Generator``, cut into batches.

    Args:
        subsets: each network's training images (indices).
        seeds: each network's seed of its order.
        batch_size: images per batch.
        drop_last: drop an incomplete last batch (else it is a smaller batch).
    """

    def __init__(self, subsets: Sequence[Tensor], seeds: Sequence[int], batch_size: int, drop_last: bool):
        self.subsets = [torch.as_tensor(s, dtype=torch.long) for s in subsets]
        self.generators = [torch.Generator().manual_seed(s) for s in seeds]
        self.batch_size, self.drop_last = batch_size, drop_last
        self.steps = [len(s) // batch_size if drop_last else -(-len(s) // batch_size) for s in self.subsets]

    def epoch(self, i: int) -> list[Tensor]:
        """Network ``i``'s batches of the next epoch (its generator advances)."""
        subset = self.subsets[i]
        order = subset[torch.randperm(len(subset), generator=self.generators[i])]
        return list(order[:self.steps[i] * self.batch_size].split(self.batch_size))


class _Workers:
    """Threads that run a stack's networks side by side (each network on one thread, its ops one
    thread each): on CPU, one small network's operations do not divide well among threads, and
    wait at their barriers when another process holds a core. :func:`fit` sets the count."""

    def __init__(self, count: int = 1):
        self.count = count
        self._pool: Optional[ThreadPoolExecutor] = None

    def run(self, fn: Callable[[int, object], None], items: list) -> None:
        """``fn(worker, item)`` for every item, item ``k`` on worker ``k % count``."""
        if self.count <= 1 or len(items) <= 1:
            for item in items:
                fn(0, item)
            return
        if self._pool is None or self._pool._max_workers != self.count:
            self._pool = ThreadPoolExecutor(self.count, thread_name_prefix="zoo-trainer")
        chunks = [(w, items[w::self.count]) for w in range(min(self.count, len(items)))]
        for _ in self._pool.map(lambda chunk: [fn(chunk[0], item) for item in chunk[1]], chunks):
            pass


@contextmanager
def op_threads(count: int):
    """Run the block with ``torch.set_num_threads(count)``, then restore the count.

    Args:
        count: threads of each operation.

    Yields:
        Nothing.
    """
    previous = torch.get_num_threads()
    torch.set_num_threads(count)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


# ---------------------------------------------------------------------------------------------
# the CNN: three 3x3 stride-2 convolutions, global average pooling, a linear classifier

KERNEL, STRIDE = 3, 2
#: The activations a network of a :class:`ConvStack` may have.
CONV_ACTIVATIONS = ("relu", "tanh", "gelu")
#: Images per tile on CPU, so that one network's tile (about 60 KB an image) stays near the core.
CPU_TILE = 128  # images per tile on CPU: a network's tile stays in the core's caches (64-256 measured alike)


def conv_sizes(image_size: int) -> tuple[int, int, int]:
    """Side of each convolution's output map (28 -> 13, 6, 2).

    Args:
        image_size: side of the square input images.

    Returns:
        The three sides.
    """
    h1 = (image_size - KERNEL) // STRIDE + 1
    h2 = (h1 - KERNEL) // STRIDE + 1
    return h1, h2, (h2 - KERNEL) // STRIDE + 1


def conv1_columns(images: Tensor) -> Tensor:
    """The first convolution's input rows: per output position, the 3x3 stride-2 patch of the
    image (taps in row-major order) and a 1 for the bias.

    Args:
        images: ``[N, 1, H, H]``.

    Returns:
        ``[N, h1 * h1 * 10]``.
    """
    N, size = images.shape[0], images.shape[-1]
    h = conv_sizes(size)[0]
    x = images.reshape(N, size, size)
    s = x.stride()
    cols = torch.ones(N, h * h, KERNEL * KERNEL + 1, dtype=images.dtype, device=images.device)
    cols[..., :KERNEL * KERNEL].view(N, h, h, KERNEL, KERNEL).copy_(
        x.as_strided((N, h, h, KERNEL, KERNEL), (s[0], STRIDE * s[1], STRIDE * s[2], s[1], s[2])))
    return cols.view(N, -1)


def _patches(src: Tensor, h: int) -> Tensor:
    """The 3x3 stride-2 patches of channels-last maps ``src`` ``[T, H, H, C]`` as a view
    ``[T, h, h, 3, 3 * C]`` (taps, then channels, per patch row)."""
    T, _, _, C = src.shape
    s = src.stride()
    return src.as_strided((T, h, h, KERNEL, KERNEL * C), (s[0], STRIDE * s[1], STRIDE * s[2], s[1], 1))


def _activate(kind: str, z: Tensor, out: Tensor) -> Tensor:
    """``kind`` of ``z`` into ``out`` (``out`` may be ``z``)."""
    if kind == "relu":
        return torch.clamp_min(z, 0, out=out)
    if kind == "tanh":
        return torch.tanh(z, out=out)
    return torch._C._nn.gelu(z, out=out)


def _activation_backward(kind: str, grad: Tensor, out: Tensor, z: Tensor, mask: Optional[Tensor],
                         dest: Tensor) -> Tensor:
    """Gradient at the pre-activation ``z`` from ``grad`` at ``out = act(z) * mask`` (into ``dest``,
    which may alias ``grad``)."""
    if kind == "relu":  # out > 0 exactly where z > 0 and the unit was kept
        return torch.ops.aten.threshold_backward.grad_input(grad, out, 0, grad_input=dest)
    if kind == "tanh":  # 1 - out^2 where kept (out = tanh z); the mask zeroes the dropped units
        dest = torch.ops.aten.tanh_backward.grad_input(grad, out, grad_input=dest)
    else:
        dest = torch.ops.aten.gelu_backward.grad_input(grad, z, grad_input=dest)
    return dest if mask is None else dest.mul_(mask)


class _ConvWorkspace:
    """Buffers of one network's tile of up to ``T`` images, reused across tiles and steps.

    Per layer ``j``: ``z[j]`` its pre-activation (relu and tanh write their output over it; gelu
    into ``a[j]``), ``m[j]`` its dropout mask (``keep[j]`` as bytes, for the compiled kernels),
    ``cols[j]`` its input patches (``cols[0]``, gathered from the prepared inputs, with a ones
    column for the bias), ``d[j]`` the gradient at its output. The gradient at layer ``j``'s
    patches (``j`` > 0) reuses ``cols[j]``'s storage once its weight gradient is taken.
    """

    def __init__(self, T: int, C: int, sizes: tuple[int, int, int], classes: int, device, dtype, image_size: int):
        e = {"device": device, "dtype": dtype}
        self.T, self.C, self.sizes = T, C, sizes
        areas = [h * h for h in sizes]
        self.cols = [torch.empty(T * areas[0], KERNEL * KERNEL + 1, **e)] + \
                    [torch.empty(T * a, 9 * C, **e) for a in areas[1:]]
        self.z = [torch.empty(T * a, C, **e) for a in areas]
        self.a = [torch.empty(T * a, C, **e) for a in areas]
        self.m = [torch.empty(T * a, C, **e) for a in areas]
        self.keep = [torch.empty(T * a * C, dtype=torch.uint8, device=device) for a in areas]
        self.keep_f = torch.empty(T * C, dtype=torch.uint8, device=device)
        self.images = torch.empty(T, image_size * image_size, **e)
        self.d = [torch.empty(T, h, h, C, **e) for h in sizes]
        self.f = torch.empty(T, C, **e)
        self.mf = torch.empty(T, C, **e)
        self.logits = torch.empty(T, classes, **e)
        self.p = torch.empty(T, classes, **e)
        self.df = torch.empty(T, C, **e)
        self.bias_grad = torch.empty(max(C, classes), **e)
        self.minus_one = torch.full((T, 1), -1.0, **e)
        self.plans: dict[tuple[int, str], _TilePlan] = {}

    def plan(self, T: int, kind: str) -> "_TilePlan":
        if (T, kind) not in self.plans:
            self.plans[T, kind] = _TilePlan(self, T, kind)
        return self.plans[T, kind]


class _TilePlan:
    """Every view a tile of ``T`` images of a network of activation ``kind`` reads and writes,
    made once (a tile then only calls operations)."""

    def __init__(self, ws: _ConvWorkspace, T: int, kind: str):
        C, (h1, h2, h3) = ws.C, ws.sizes
        sizes = (h1, h2, h3)
        areas = [h * h for h in sizes]
        self.T, self.kind = T, kind
        self.c0 = ws.cols[0][:T * areas[0]]
        self.c0_rows = self.c0.view(T, -1)  # index_select's out: one row of patches per image
        self.z = [ws.z[j][:T * areas[j]] for j in range(3)]
        self.out = [ws.a[j][:T * areas[j]] if kind == "gelu" else self.z[j] for j in range(3)]
        self.m = [ws.m[j][:T * areas[j]] for j in range(3)]
        self.m_rows = [m.view(T, -1) for m in self.m]
        self.keep = [ws.keep[j][:T * areas[j] * C] for j in range(3)]
        self.keep_f = ws.keep_f[:T * C]
        self.images = ws.images[:T]
        self.cols = [self.c0] + [ws.cols[j][:T * areas[j]] for j in (1, 2)]
        # im2col of layer j + 1's input: destination and strided source views (the torch path)
        self.patch_dst = [self.cols[j + 1].view(T, sizes[j + 1], sizes[j + 1], KERNEL, KERNEL * C) for j in (0, 1)]
        self.patch_src = [_patches(self.out[j].view(T, sizes[j], sizes[j], C), sizes[j + 1]) for j in (0, 1)]
        self.f = ws.f[:T]
        self.out3 = self.out[2].view(T, areas[2], C)
        self.mf = ws.mf[:T]
        self.logits, self.p, self.df = ws.logits[:T], ws.p[:T], ws.df[:T]
        self.bias_grad = ws.bias_grad
        self.minus_one = ws.minus_one[:T]
        shape = (T, areas[2], C)
        self.df_spread = self.df.unsqueeze(1).expand(shape)
        self.layer3 = (self.out[2].view(shape), self.z[2].view(shape), self.m[2].view(shape), ws.d[2][:T].view(shape))
        self.dcols = [None, self.cols[1], self.cols[2]]  # the patches' storage, once they are used
        self.d = [ws.d[j][:T] for j in range(3)]
        self.d_flat = [d.view(-1, C) for d in self.d]
        self.add_back = [None] + [self._add_back_views(self.dcols[j], self.d[j - 1], sizes[j]) for j in (1, 2)]

    @staticmethod
    def _add_back_views(dcols: Tensor, dst: Tensor, h: int) -> list:
        """The adjoint of :func:`_patches` as ``(op, destination, source)`` operations: the gradient
        ``dcols`` ``[T * h * h, 9 * C]`` at the patches added back at their pixels of ``dst``
        ``[T, H, H, C]`` (a pixel lies in up to four patches). Taps (0|1, 0|1) tile the pixels
        [0, 2h) x [0, 2h) once: a copy; the pixels beyond are zeroed; the other taps are added."""
        T, H, _, C = dst.shape
        d = dcols.view(T, h, h, KERNEL, KERNEL, C)
        s = dst.stride()
        ops = [("copy", dst.as_strided((T, h, 2, h, 2, C), (s[0], 2 * s[1], s[1], 2 * s[2], s[2], 1)),
                d[:, :, :, :2, :2].permute(0, 1, 3, 2, 4, 5))]
        if H > 2 * h:
            ops += [("zero", dst[:, 2 * h:], None), ("zero", dst[:, :2 * h, 2 * h:], None)]
        ops += [("add", dst[:, :, 2:].as_strided((T, h, 2, h, C), (s[0], 2 * s[1], s[1], 2 * s[2], 1)),
                 d[:, :, :, :2, 2].permute(0, 1, 3, 2, 4)),
                ("add", dst[:, 2:].as_strided((T, h, h, 2, C), (s[0], 2 * s[1], 2 * s[2], s[2], 1)), d[:, :, :, 2, :2]),
                ("add", dst[:, 2:, 2:].as_strided((T, h, h, C), (s[0], 2 * s[1], 2 * s[2], 1)), d[:, :, :, 2, 2])]
        return ops


def _gather(source: Tensor, index: Tensor, out: Tensor) -> Tensor:
    """``out`` = rows ``index`` of ``source`` (aten's own operation: some libraries wrap ``torch.index_select``)."""
    return torch.ops.aten.index_select.out(source, 0, index, out=out)


def _run(ops: list) -> None:
    for op, dst, src in ops:
        if op == "copy":
            dst.copy_(src)
        elif op == "zero":
            dst.zero_()
        else:
            dst.add_(src)


class _ConvKernels:
    """``neuralgraph/_kernels/zoo_conv.cpp`` for one dtype (float32 or float64), called on tensors."""

    SOURCE = Path(__file__).resolve().parents[1] / "_kernels" / "zoo_conv.cpp"

    def __init__(self, dtype: torch.dtype):
        from neuralgraph import _kernels

        path = _kernels.build(self.SOURCE, "zoo_conv", _kernels.extra_flags())
        try:
            library = ctypes.CDLL(str(path))
        except OSError as err:
            raise _kernels.KernelBuildError(f"{path}: cannot be loaded ({err})") from err
        suffix = {torch.float32: "f32", torch.float64: "f64"}[dtype]
        i, p, lg, u64 = ctypes.c_int, ctypes.c_void_p, ctypes.c_long, ctypes.c_uint64
        self._mask_patches = getattr(library, f"zoo_mask_patches_{suffix}")
        self._mask_patches.argtypes = [i, i, i, i, p, i, i, u64, u64, lg, lg, i, p, p]
        self._mask_patches.restype = None
        self._patches_back = getattr(library, f"zoo_patches_back_{suffix}")
        self._patches_back.argtypes = [i, i, i, i, p, p, p, i, p]
        self._patches_back.restype = None
        self._first_layer_back = getattr(library, f"zoo_first_layer_back_{suffix}")
        self._first_layer_back.argtypes = [i, i, i, i, i, p, p, p, i, p, p]
        self._first_layer_back.restype = None
        self._first_layer = getattr(library, f"zoo_first_layer_{suffix}")
        self._first_layer.argtypes = [i, i, i, i, p, p, p]
        self._first_layer.restype = None
        self._first_layer_grad = getattr(library, f"zoo_first_layer_grad_{suffix}")
        self._first_layer_grad.argtypes = [i, i, i, i, p, p, p]
        self._first_layer_grad.restype = None

    def mask_patches(self, T: int, H: int, h: int, C: int, out: Tensor, relu: bool, stream: Optional[tuple],
                     threshold: int, keep: Optional[Tensor], cols: Optional[Tensor]) -> None:
        """``out`` ``[T, H, H, C]`` = relu (if ``relu``) and dropout mask of ``out``, in place, and
        ``cols`` (unless None) = its 3x3 stride-2 patches. ``stream``: ``(key, first word, words
        per image, offset of these units in words)`` of :class:`RandomBits` (None: no mask); a unit
        is kept where its integer is below ``threshold``; ``keep`` (unless None) gets the mask."""
        key, word, image_words, offset = stream if stream is not None else (0, 0, 0, 0)
        self._mask_patches(T, H, h, C, out.data_ptr(), int(relu), int(stream is not None), key, word, image_words,
                           offset, threshold, None if keep is None else keep.data_ptr(),
                           None if cols is None else cols.data_ptr())

    def patches_back(self, T: int, H: int, h: int, C: int, dcols: Tensor, out: Tensor, keep: Optional[Tensor],
                     activation: int, dz: Tensor) -> None:
        """``dz`` ``[T, H, H, C]`` = the patch gradient ``dcols`` added back at its pixels, times the
        activation's derivative (0 relu, 1 tanh, from the output ``out``; 2 none) and ``keep``."""
        self._patches_back(T, H, h, C, dcols.data_ptr(), out.data_ptr(), None if keep is None else keep.data_ptr(),
                           activation, dz.data_ptr())


    def first_layer(self, T: int, H: int, C: int, images: Tensor, W: Tensor, z: Tensor) -> None:
        """``z`` ``[T, H, H, C]`` = the first convolution (3x3, stride 2; ``W`` ``[10, C]``: taps, then
        the bias) of ``images`` ``[T, S * S]``."""
        S = math.isqrt(images.shape[1])
        self._first_layer(T, S, H, C, images.data_ptr(), W.data_ptr(), z.data_ptr())

    def first_layer_back(self, T: int, H: int, h: int, C: int, dcols: Tensor, out: Tensor, keep: Optional[Tensor],
                         activation: int, images: Tensor, dW: Tensor) -> None:
        """As :meth:`patches_back` for the first layer, whose gradient at its pre-activation ``g``
        only makes its weight gradient: ``dW`` ``[10, C]`` += the patches of ``images`` (and a 1)
        transposed times ``g``, without writing ``g``."""
        S = math.isqrt(images.shape[1])
        self._first_layer_back(T, S, H, h, C, dcols.data_ptr(), out.data_ptr(),
                               None if keep is None else keep.data_ptr(), activation, images.data_ptr(), dW.data_ptr())

    def first_layer_grad(self, T: int, H: int, C: int, g: Tensor, images: Tensor, dW: Tensor) -> None:
        """``dW`` ``[10, C]`` += the first layer's weight gradient at its pre-activation gradient ``g``."""
        S = math.isqrt(images.shape[1])
        self._first_layer_grad(T, S, H, C, g.data_ptr(), images.data_ptr(), dW.data_ptr())


_conv_kernels: dict[torch.dtype, Union[_ConvKernels, Exception]] = {}


def conv_kernels(dtype: torch.dtype) -> Optional[_ConvKernels]:
    """The compiled elementwise kernels of the CNN tiles for ``dtype`` (built on first use; ``None``
    when they cannot be: no C++ compiler, a failed build, another dtype).

    Args:
        dtype: the parameters' dtype.

    Returns:
        The kernels, or ``None`` (the stack then runs the same steps as torch operations).
    """
    if dtype not in (torch.float32, torch.float64):
        return None
    if dtype not in _conv_kernels:
        try:
            _conv_kernels[dtype] = _ConvKernels(dtype)
        except Exception as err:  # no compiler, a failed build or load: the torch operations do the same
            _conv_kernels[dtype] = err
            warnings.warn(f"the CNN zoo trainer's compiled kernels are unavailable ({err}); the same steps run as "
                          "torch operations, several times slower", RuntimeWarning, stacklevel=2)
    found = _conv_kernels[dtype]
    return None if isinstance(found, Exception) else found


class ConvStack:
    """``n`` CNNs of one shape: three 3x3 stride-2 convolutions of ``C`` channels (valid padding),
    each followed by the network's activation, global average pooling and a linear classifier
    (``neuralgraph.data.cnn_zoo.ZooNetwork``), each trained on its own images.

    ``weights``: PyTorch layouts stacked over the networks (``conv1.weight`` ``[n, C, 1, 3, 3]``,
    ..., ``linear.bias`` ``[n, classes]``). ``dropout``: each network's rate, applied after every
    convolution's activation (``dropout_at="conv"``) or to the pooled features
    (``"features"``), its masks from its stream of :class:`RandomBits` (``bit_seeds``), laid out
    image by image (each image's units, layer by layer, padded to a multiple of four) so that a
    tile of images is a consecutive draw. Attach the optimizer with :meth:`optimizer`.

    The parameters are rows of :attr:`params` ``[n, P]`` in the layout the products read: per
    layer ``[taps * C_in + 1, C_out]``, its kernel rows (taps, then input channels) and its bias
    row. A step runs each network alone, in tiles of ``tile`` images (:data:`CPU_TILE` on CPU,
    so that a tile's buffers stay in the core's cache; the whole batch elsewhere): the forward
    keeps each layer's output, channels last, for the backward, which is written out (no
    autograd). Dropout's ``1 / keep`` and the pooling's mean are folded into the next layer's
    kernel rows, so a mask is a product by 0 or 1. On CPU the elementwise steps around the
    products run as compiled kernels (:func:`conv_kernels`: the first convolution, activations,
    masks and patches fused per tile) when a C++ compiler is there, else as torch operations; both
    draw the same masks and batches, and their arithmetic differs by rounding only.

    Args:
        weights: the networks' parameters, PyTorch layouts stacked over the networks.
        activations: each network's activation, one of :data:`CONV_ACTIVATIONS`.
        dropout: each network's dropout rate.
        dropout_at: ``"conv"`` (after every convolution's activation) or ``"features"``.
        bit_seeds: each network's seed of its dropout stream (default: its row).
        tile: images per tile (default :data:`CPU_TILE` on CPU, a whole batch elsewhere).
        fused: use the compiled kernels (default: when they build, on CPU); False: torch alone.
    """

    def __init__(self, weights: dict[str, Tensor], activations: Sequence[str], dropout: Sequence[float],
                 dropout_at: str = "conv", bit_seeds: Optional[Sequence[int]] = None, tile: Optional[int] = None,
                 fused: Optional[bool] = None):
        self.n, self.C = weights["conv1.weight"].shape[:2]
        self.classes = weights["linear.weight"].shape[1]
        if dropout_at not in ("conv", "features"):
            raise ValueError(f"ConvStack: dropout_at={dropout_at!r}, expected 'conv' or 'features'")
        for a in activations:
            if a not in CONV_ACTIVATIONS:
                raise ValueError(f"ConvStack: activation {a!r}, expected one of {CONV_ACTIVATIONS}")
        self.activations, self.dropout_at = list(activations), dropout_at
        self.thresholds = [keep_threshold(r) for r in dropout]
        self.keep = [1.0 - r if t is not None else 1.0 for r, t in zip(dropout, self.thresholds)]
        w = weights["conv1.weight"]
        self.device, self.dtype = w.device, w.dtype
        self.kernels = conv_kernels(self.dtype) if self.device.type == "cpu" and fused is not False else None
        if fused and self.kernels is None:
            raise RuntimeError(f"ConvStack(fused=True): no compiled kernels on {self.device} for {self.dtype} "
                               f"({_conv_kernels.get(self.dtype, 'another device or dtype')})")
        self.image_size = 0  # set by prepare()
        self.tile = tile
        C, k = self.C, self.classes
        self.shapes = [(KERNEL * KERNEL + 1, C), (9 * C + 1, C), (9 * C + 1, C), (C + 1, k)]
        sizes = [a * b for a, b in self.shapes]
        self.offsets = [sum(sizes[:i]) for i in range(5)]
        self.params = torch.empty(self.n, self.offsets[-1], device=self.device, dtype=self.dtype)
        self.load(weights)
        self.grad = torch.zeros_like(self.params)
        self.bits = RandomBits(bit_seeds if bit_seeds is not None else range(self.n), self.device)
        self.optimizer_: Optional[StackedOptimizer] = None
        self._workspaces: dict[tuple[int, int], _ConvWorkspace] = {}
        self._folds: dict[tuple, Tensor] = {}
        self.workers = _Workers()

    # -- layout
    def layer(self, flat: Tensor, j: int) -> Tensor:
        """Layer ``j``'s block ``[..., rows, cols]`` of rows ``flat`` ``[..., P]`` (a view)."""
        return flat[..., self.offsets[j]:self.offsets[j + 1]].unflatten(-1, self.shapes[j])

    def kernel_entries(self) -> Tensor:
        """``[P]``: 1 on kernel entries, 0 on biases (Keras' ``kernel_regularizer`` decays those)."""
        mask = torch.ones(self.offsets[-1], dtype=self.dtype, device=self.device)
        for j in range(4):
            self.layer(mask, j)[-1] = 0
        return mask

    def load(self, weights: dict[str, Tensor]) -> None:
        """Set every row from PyTorch-layout ``weights`` (``[n, ...]``)."""
        C, n = self.C, self.n
        for j, name in enumerate(("conv1", "conv2", "conv3")):
            w = weights[f"{name}.weight"]  # [n, C_out, C_in, 3, 3] -> [n, (taps, C_in), C_out]
            block = self.layer(self.params, j)
            block[:, :-1] = w.permute(0, 3, 4, 2, 1).reshape(n, -1, C)
            block[:, -1] = weights[f"{name}.bias"]
        block = self.layer(self.params, 3)
        block[:, :-1] = weights["linear.weight"].transpose(1, 2)
        block[:, -1] = weights["linear.bias"]

    def state(self) -> dict[str, Tensor]:
        """PyTorch-layout parameters ``[n, ...]`` (copies)."""
        params, n, C = self.params, self.n, self.C
        out = {}
        for j, name in enumerate(("conv1", "conv2", "conv3")):
            block = self.layer(params, j)
            c_in = 1 if j == 0 else C
            kernel = block[:, :-1].reshape(n, KERNEL, KERNEL, c_in, C)
            out[f"{name}.weight"] = kernel.permute(0, 4, 3, 1, 2).contiguous()
            out[f"{name}.bias"] = block[:, -1].clone()
        block = self.layer(params, 3)
        out["linear.weight"] = block[:, :-1].transpose(1, 2).contiguous()
        out["linear.bias"] = block[:, -1].clone()
        return out

    def finite(self) -> Tensor:
        """``[n]``: whether each network's parameters are all finite."""
        return torch.isfinite(self.params).all(1)

    def optimizer(self, rules: Sequence[Rule], lr: Sequence[float], weight_decay: Sequence[float],
                  decay: str = "all", groups: Optional[Sequence] = None) -> StackedOptimizer:
        """Attach the optimizer; ``decay``: weight decay on ``"all"`` parameters or the ``"kernels"``;
        ``groups``: as :func:`order_networks` was given (runs of one group and rule step together)."""
        mask = None if decay == "all" else self.kernel_entries()
        self.optimizer_ = StackedOptimizer(self.params, rules, lr, weight_decay, mask, groups)
        return self.optimizer_

    def set_lr(self, lr: Sequence[float]) -> None:
        """Each network's learning rate from now on (:meth:`StackedOptimizer.set_lr`)."""
        self.optimizer_.set_lr(lr)

    # -- data
    def prepare(self, images: Tensor) -> Tensor:
        """Inputs of :meth:`step` and :meth:`evaluate` for ``images`` ``[N, 1, H, W]``, on the stack's
        device and dtype: the images as rows (for the compiled kernels), else their first layer's
        patches (:func:`conv1_columns`)."""
        self.image_size = images.shape[-1]
        images = images.to(self.device, self.dtype)
        if self.kernels is not None:  # the kernels read the images themselves
            return images.reshape(len(images), -1).contiguous()
        return conv1_columns(images)

    def _workspace(self, T: int, worker: int) -> _ConvWorkspace:
        if (T, worker) not in self._workspaces:
            self._workspaces[T, worker] = _ConvWorkspace(T, self.C, conv_sizes(self.image_size), self.classes,
                                                         self.device, self.dtype, self.image_size)
        return self._workspaces[T, worker]

    def _tile_size(self, count: int) -> int:
        if self.tile is not None:
            return self.tile
        return CPU_TILE if self.device.type == "cpu" else min(count, 1024)

    def _fold(self, train: bool) -> Tensor:
        """Factors ``[n, P]`` of the forward's weights: kernel rows after a dropout layer times
        ``1 / keep`` (training), the classifier's kernel rows divided by the pooled positions."""
        key = (train, self.image_size)
        if key not in self._folds:
            scale = torch.ones(self.n, self.offsets[-1], dtype=torch.float64)
            h3 = conv_sizes(self.image_size)[2]
            keep = torch.tensor(self.keep, dtype=torch.float64)[:, None, None]
            dropped = (1, 2, 3) if self.dropout_at == "conv" else (3,)
            for j in range(1, 4):
                block = self.layer(scale, j)[:, :-1]
                if train and j in dropped:
                    block /= keep
                if j == 3:
                    block /= h3 * h3
            self._folds[key] = scale.to(self.device, self.dtype)
        return self._folds[key]

    def bit_layout(self) -> list[tuple[int, int]]:
        """``(start, end)`` of each dropout layer's units within an image's integers (each start a
        multiple of four), and the image's count (a multiple of four) as the last entry's end."""
        h1, h2, h3 = conv_sizes(self.image_size)
        counts = [h * h * self.C for h in (h1, h2, h3)] if self.dropout_at == "conv" else [self.C]
        layout, start = [], 0
        for c in counts:
            layout.append((start, start + c))
            start += -(-c // 4) * 4  # each layer's units start on a whole word of the stream
        return layout + [(start, start)]

    # -- training
    @torch.no_grad()
    def step(self, batches: Sequence[tuple[int, Tensor]], inputs: Tensor, labels: Tensor) -> None:
        """One optimizer step of each network ``i`` of ``batches`` (``(i, image indices)``, ``i``
        increasing) on its mean cross-entropy over its images; the others do not move."""
        scale = self._fold(train=True)
        folded = self.params * scale
        self.grad.zero_()
        self.workers.run(lambda worker, item: self._forward_backward(item[0], folded[item[0]], item[1], inputs, labels,
                                                                     worker), list(batches))
        self.grad.mul_(scale)
        self.optimizer_.step(self.grad, [i for i, _ in batches])

    def _forward_backward(self, i: int, folded: Tensor, index: Tensor, inputs: Tensor, labels: Tensor,
                          worker: int = 0) -> None:
        b, C = len(index), self.C
        kind, threshold = self.activations[i], self.thresholds[i]
        conv_masks = threshold is not None and self.dropout_at == "conv"
        feature_masks = threshold is not None and self.dropout_at == "features"
        layout = self.bit_layout() if threshold is not None else None
        W = [self.layer(folded, j) for j in range(4)]
        Wt = [W[j][:-1].T for j in range(4)]
        G = [self.layer(self.grad[i], j) for j in range(4)]
        T_max = self._tile_size(b)
        ws = self._workspace(T_max, worker)
        target = labels[index]
        sides = conv_sizes(self.image_size)
        kernels = self.kernels
        keep_bytes = kernels is not None and conv_masks and kind != "relu"  # relu's backward reads its output
        code = ("relu", "tanh", "gelu").index(kind)  # the kernel's activation code (gelu: 2, none)
        for t0 in range(0, b, T_max):
            T = min(T_max, b - t0)
            plan = ws.plan(T, kind)
            if threshold is not None and kernels is None:
                bits = self.bits.draw(i, T * layout[-1][1]).view(T, -1)
            elif threshold is not None:  # the kernels compute the stream's words themselves
                key, word = self.bits.reserve(i, T * layout[-1][1])
                stream = [(key, word, layout[-1][1] // 4, start // 4) for start, _ in layout[:-1]]
            if kernels is not None:
                images = _gather(inputs, index[t0:t0 + T], plan.images)
                kernels.first_layer(T, sides[0], C, images, W[0], plan.z[0])
                z = plan.z[0]
            else:
                _gather(inputs, index[t0:t0 + T], plan.c0_rows)
                z = torch.mm(plan.c0, W[0], out=plan.z[0])
            for j in range(3):
                if j > 0:
                    z = torch.addmm(W[j][-1], plan.cols[j], W[j][:-1], out=plan.z[j])
                if kernels is not None:  # activation (relu), mask and next patches in one pass
                    if kind != "relu":
                        _activate(kind, z, plan.out[j])
                    kernels.mask_patches(T, sides[j], sides[j + 1] if j < 2 else 0, C, plan.out[j], kind == "relu",
                                         stream[j] if conv_masks else None, threshold or 0,
                                         plan.keep[j] if keep_bytes else None, plan.cols[j + 1] if j < 2 else None)
                    continue
                _activate(kind, z, plan.out[j])
                if conv_masks:
                    torch.lt(bits[:, layout[j][0]:layout[j][1]], threshold, out=plan.m_rows[j])
                    plan.out[j].mul_(plan.m[j])
                if j < 2:
                    plan.patch_dst[j].copy_(plan.patch_src[j])
            if keep_bytes:  # layer 3's backward runs in torch: its mask as numbers
                plan.m[2].view(-1).copy_(plan.keep[2])
            torch.sum(plan.out3, 1, out=plan.f)
            if feature_masks and kernels is not None:
                kernels.mask_patches(T, 1, 0, C, plan.f, False, stream[0], threshold, plan.keep_f, None)
                plan.mf.view(-1).copy_(plan.keep_f)
            elif feature_masks:
                torch.lt(bits[:, layout[0][0]:layout[0][1]], threshold, out=plan.mf)
                plan.f.mul_(plan.mf)
            torch.addmm(W[3][-1], plan.f, W[3][:-1], out=plan.logits)
            # d(mean cross-entropy) / d logits = (softmax - onehot) / b
            p = torch.ops.aten._softmax.out(plan.logits, 1, False, out=plan.p)
            p.scatter_add_(1, target[t0:t0 + T].view(-1, 1), plan.minus_one).mul_(1.0 / b)
            self._add_gradient(G[3], plan.f, p, plan.bias_grad)
            torch.mm(p, Wt[3], out=plan.df)
            if feature_masks:
                plan.df.mul_(plan.mf)
            # every pooled position gets df (the mean's 1 / positions is folded into W[3])
            out3, z3, m3, d3 = plan.layer3
            dz = _activation_backward(kind, plan.df_spread, out3, z3, m3 if conv_masks else None, d3).view(-1, C)
            for j in (2, 1):
                self._add_gradient(G[j], plan.cols[j], dz, plan.bias_grad)
                dcols = torch.mm(dz, Wt[j], out=plan.dcols[j])  # over the patches, which are used
                d = plan.d_flat[j - 1]
                if kernels is not None and j == 1 and kind != "gelu":  # layer 1's gradient goes straight to W[0]
                    kernels.first_layer_back(T, sides[0], sides[1], C, dcols, plan.out[0],
                                             plan.keep[0] if keep_bytes else None, code, images, G[0])
                    break
                if kernels is not None:
                    kernels.patches_back(T, sides[j - 1], sides[j], C, dcols, plan.out[j - 1],
                                         plan.keep[j - 1] if keep_bytes else None, code, d)
                    dz = d if kind != "gelu" else torch.ops.aten.gelu_backward.grad_input(d, plan.z[j - 1],
                                                                                          grad_input=d)
                    continue
                _run(plan.add_back[j])
                dz = _activation_backward(kind, d, plan.out[j - 1], plan.z[j - 1],
                                          plan.m[j - 1] if conv_masks else None, d)
            else:
                if kernels is not None:
                    kernels.first_layer_grad(T, sides[0], C, dz, images, G[0])
                else:
                    G[0].addmm_(plan.c0.T, dz)

    @staticmethod
    def _add_gradient(block: Tensor, x: Tensor, dz: Tensor, bias: Tensor) -> None:
        """``block`` ``[rows + 1, out]`` += the gradient of ``x @ block[:-1] + block[-1]`` at ``dz``."""
        block[:-1].addmm_(x.T, dz)
        block[-1].add_(torch.sum(dz, 0, out=bias[:dz.shape[1]]))

    # -- evaluation
    @torch.no_grad()
    def logits(self, i: int, inputs: Tensor) -> Tensor:
        """Network ``i``'s logits ``[N, classes]`` (no dropout) on prepared ``inputs``."""
        folded = self.params[i] * self._fold(train=False)[i]
        return torch.cat([lg.clone() for lg in self._eval_logits(i, folded, inputs)])

    def _eval_logits(self, i: int, folded: Tensor, inputs: Tensor, index: Optional[Tensor] = None, worker: int = 0):
        """Network ``i``'s logits, tile by tile (a buffer, valid until the next), on ``inputs``
        (rows ``index``, default all)."""
        kind, C = self.activations[i], self.C
        W = [self.layer(folded, j) for j in range(4)]
        N = len(inputs) if index is None else len(index)
        T_max = self._tile_size(N)
        ws = self._workspace(T_max, worker)
        sides = conv_sizes(self.image_size)
        for t0 in range(0, N, T_max):
            T = min(T_max, N - t0)
            plan = ws.plan(T, kind)
            if self.kernels is not None:
                images = inputs[t0:t0 + T] if index is None else _gather(inputs, index[t0:t0 + T], plan.images)
                self.kernels.first_layer(T, sides[0], C, images, W[0], plan.z[0])
                z = plan.z[0]
            else:
                if index is None:
                    x = inputs[t0:t0 + T].view(-1, KERNEL * KERNEL + 1)
                else:
                    _gather(inputs, index[t0:t0 + T], plan.c0_rows)
                    x = plan.c0
                z = torch.mm(x, W[0], out=plan.z[0])
            for j in range(3):
                if j > 0:
                    z = torch.addmm(W[j][-1], plan.cols[j], W[j][:-1], out=plan.z[j])
                if self.kernels is not None and j < 2:
                    if kind != "relu":
                        _activate(kind, z, plan.out[j])
                    self.kernels.mask_patches(T, sides[j], sides[j + 1], C, plan.out[j], kind == "relu", None, 0, None,
                                              plan.cols[j + 1])
                    continue
                _activate(kind, z, plan.out[j])
                if j < 2:
                    plan.patch_dst[j].copy_(plan.patch_src[j])
            torch.sum(plan.out3, 1, out=plan.f)
            yield torch.addmm(W[3][-1], plan.f, W[3][:-1], out=plan.logits)

    @torch.no_grad()
    def evaluate(self, inputs: Tensor, labels: Tensor, subsets: Optional[Sequence[Tensor]] = None,
                 rows: Optional[Sequence[int]] = None) -> tuple[Tensor, Tensor]:
        """Per network (``rows``, default all): accuracy and mean cross-entropy ``[n]`` (float64)
        on ``inputs`` (every network on all of them, or network ``i`` on ``subsets[i]``)."""
        rows = list(range(self.n) if rows is None else rows)
        folded = self.params * self._fold(train=False)
        results: dict[int, tuple[Tensor, Tensor, int]] = {}

        def network(worker: int, i: int) -> None:
            index = None if subsets is None else subsets[i]
            target = labels if index is None else labels[index]
            correct = torch.zeros((), dtype=torch.float64, device=self.device)
            total = torch.zeros((), dtype=torch.float64, device=self.device)
            start = 0
            for logits in self._eval_logits(i, folded[i], inputs, index, worker):
                y = target[start:start + len(logits)]
                start += len(logits)
                correct += (logits.argmax(1) == y).sum()
                total += F.cross_entropy(logits, y, reduction="sum").double()
            results[i] = correct, total, start

        self.workers.run(network, rows)
        accuracy = torch.full((self.n,), math.nan, dtype=torch.float64, device=self.device)
        loss = accuracy.clone()
        if rows:
            index = torch.tensor(rows, device=self.device)
            count = torch.tensor([results[i][2] for i in rows], dtype=torch.float64, device=self.device)
            accuracy[index] = torch.stack([results[i][0] for i in rows]) / count
            loss[index] = torch.stack([results[i][1] for i in rows]) / count
        return accuracy, loss


# ---------------------------------------------------------------------------------------------
# the ViT: networks of one architecture as one batched product per layer


class VitArchitecture(NamedTuple):
    """A ViT of ``neuralgraph.data.transformer_zoo.ZooViT``'s kind (its constructor's arguments).

    Attributes:
        dim: width of the tokens.
        depth: transformer blocks.
        heads: attention heads per block.
        mlp_dim: hidden width of each block's MLP.
        patch: side of the square patches.
        activation: the MLPs' activation (``"gelu"``, ``"silu"`` or ``"relu"``).
        classes: outputs.
        image_size: side of the square input images.
    """

    dim: int
    depth: int
    heads: int
    mlp_dim: int
    patch: int
    activation: str
    classes: int
    image_size: int

    def shapes(self) -> dict[str, tuple[int, ...]]:
        """The state-dict shapes of one network."""
        d, m, p = self.dim, self.mlp_dim, self.patch
        tokens = (self.image_size // p) ** 2
        shapes = {"patch.weight": (d, 1, p, p), "patch.bias": (d,), "position": (1, tokens, d)}
        for b in range(self.depth):
            shapes.update({f"blocks.{b}.norm1.weight": (d,), f"blocks.{b}.norm1.bias": (d,),
                           f"blocks.{b}.attention.in_proj_weight": (3 * d, d),
                           f"blocks.{b}.attention.in_proj_bias": (3 * d,),
                           f"blocks.{b}.attention.out_proj.weight": (d, d), f"blocks.{b}.attention.out_proj.bias": (d,),
                           f"blocks.{b}.norm2.weight": (d,), f"blocks.{b}.norm2.bias": (d,),
                           f"blocks.{b}.mlp.0.weight": (m, d), f"blocks.{b}.mlp.0.bias": (m,),
                           f"blocks.{b}.mlp.2.weight": (d, m), f"blocks.{b}.mlp.2.bias": (d,)})
        shapes.update({"norm.weight": (d,), "norm.bias": (d,), "head.weight": (self.classes, d),
                       "head.bias": (self.classes,)})
        return shapes


def vit_patches(images: Tensor, patch: int) -> Tensor:
    """The patch convolution's input: the non-overlapping patches of the images, tokens in row-major order.

    Args:
        images: ``[N, 1, H, H]``.
        patch: side of the square patches.

    Returns:
        ``[N, tokens, patch * patch]``.
    """
    N, size = images.shape[0], images.shape[-1]
    g = size // patch
    x = images.reshape(N, g, patch, g, patch)
    return x.permute(0, 1, 3, 2, 4).reshape(N, g * g, patch * patch)


class _VitGroup:
    """The networks of one architecture: one flat leaf ``[n_g, P_g]`` and views into it."""

    def __init__(self, arch: VitArchitecture, states: list[dict[str, Tensor]], device, dtype):
        self.arch = arch
        self.shapes = arch.shapes()
        sizes = {k: math.prod(s) for k, s in self.shapes.items()}
        self.offsets, start = {}, 0
        for k, size in sizes.items():
            self.offsets[k] = (start, start + size)
            start += size
        rows = [torch.cat([s[k].reshape(-1) for k in self.shapes]) for s in states]
        self.params = torch.stack(rows).to(device, dtype)

    def tensor(self, flat: Tensor, key: str) -> Tensor:
        a, b = self.offsets[key]
        return flat[:, a:b].unflatten(1, self.shapes[key])

    def state(self, flat: Tensor) -> dict[str, Tensor]:
        return {k: self.tensor(flat, k).detach().clone() for k in self.shapes}


#: The ViT's dropout layers in the order their masks are drawn (the embedded tokens, then per
#: block the attention's output and the MLP's, each before its residual add).
VIT_DROPOUT_SITES = ("embedding", "attention", "mlp")
#: The MLP activations a ViT of the stack may have.
VIT_ACTIVATIONS = {"gelu": F.gelu, "silu": F.silu, "relu": F.relu}


def vit_dropout_units(arch: VitArchitecture, images: int) -> int:
    """The dropout units of one step of one network on ``images`` images: tokens x width at each of
    the ``1 + 2 depth`` sites (:data:`VIT_DROPOUT_SITES`).

    Args:
        arch: the network's architecture.
        images: its images this step.

    Returns:
        The count (also the 16-bit integers its :class:`RandomBits` stream gives up).
    """
    return (1 + 2 * arch.depth) * images * (arch.image_size // arch.patch) ** 2 * arch.dim


def vit_forward(group: _VitGroup, flat: Tensor, patches: Tensor, keep: Optional[Tensor] = None) -> Tensor:
    """The logits of ``k`` networks of one architecture, each on its own images: the arithmetic of
    ``ZooViT`` in training mode, one ``bmm`` per layer over the networks.

    Args:
        group: the networks' architecture and parameter layout.
        flat: ``[k, P]`` their parameters (rows of the group's flat tensor).
        patches: ``[k, B, tokens, patch * patch]`` (or ``[1, ...]``: the same for all).
        keep: dropout's scaled keep masks ``[k, 1 + 2 depth, B * tokens, dim]`` (0 or ``1 / (1 - rate)``,
            :data:`VIT_DROPOUT_SITES` order), or ``None`` (no dropout).

    Returns:
        ``[k, B, classes]``.
    """
    arch, t = group.arch, (lambda key: group.tensor(flat, key))
    k = flat.shape[0]
    if patches.shape[0] != k:
        patches = patches.expand(k, *patches.shape[1:])
    _, B, L, _ = patches.shape
    d, heads = arch.dim, arch.heads
    hd = d // heads

    def linear(x, weight, bias):  # x [k, M, in], weight [k, out, in] -> [k, M, out]
        return torch.baddbmm(bias.unsqueeze(1), x, weight.transpose(1, 2))

    def norm(x, key):  # LayerNorm over the last dimension, each network its own affine
        y = F.layer_norm(x, (d,), eps=1e-5)
        return torch.addcmul(t(f"{key}.bias").view(k, 1, d), y, t(f"{key}.weight").view(k, 1, d))

    x = linear(patches.reshape(k, B * L, -1), t("patch.weight").reshape(k, d, -1), t("patch.bias"))
    x = (x.view(k, B, L, d) + t("position").view(k, 1, L, d)).view(k, B * L, d)
    drop = (lambda h, site: h) if keep is None else (lambda h, site: h * keep[:, site])
    x = drop(x, 0)
    act = VIT_ACTIVATIONS[arch.activation]
    for b in range(arch.depth):
        pre = f"blocks.{b}"
        h = norm(x, f"{pre}.norm1")
        qkv = linear(h, t(f"{pre}.attention.in_proj_weight"), t(f"{pre}.attention.in_proj_bias"))
        q, key, v = (part.reshape(k * B, L, heads, hd).transpose(1, 2) for part in qkv.split(d, dim=2))
        # softmax(q k^T / sqrt(hd)) v as plain products: at 16 tokens and heads of 6-12 features
        # they take half the time of the fused attention kernel, backward included
        scores = torch.matmul(q * hd ** -0.5, key.transpose(-1, -2))  # [kB, heads, L, L]
        attention = torch.matmul(torch.softmax(scores, -1), v).transpose(1, 2).reshape(k, B * L, d)
        x = x + drop(linear(attention, t(f"{pre}.attention.out_proj.weight"), t(f"{pre}.attention.out_proj.bias")),
                     1 + 2 * b)
        h = norm(x, f"{pre}.norm2")
        h = act(linear(h, t(f"{pre}.mlp.0.weight"), t(f"{pre}.mlp.0.bias")))
        x = x + drop(linear(h, t(f"{pre}.mlp.2.weight"), t(f"{pre}.mlp.2.bias")), 2 + 2 * b)
    pooled = norm(x, "norm").view(k, B, L, d).mean(2)
    return linear(pooled, t("head.weight"), t("head.bias"))


class VitStack:
    """``n`` ViTs (:class:`VitArchitecture`), each trained on its own images.

    ``states``: each network's state dict (``ZooViT``'s keys); ``architectures``: each one's; the
    networks of one architecture must be consecutive (one group, one flat parameter tensor, one
    :class:`StackedOptimizer`). A step runs each group's stepping networks as one batch of
    products (:func:`vit_forward`; a network with fewer images this step has its batch padded with
    images of weight 0) and autograd; every network's loss is its own mean cross-entropy.
    ``dropout``: each network's rate at the :data:`VIT_DROPOUT_SITES`, its masks drawn from its own
    :class:`RandomBits` stream (seeded by ``bit_seeds``), site by site, so that they depend on its
    own steps alone.

    Args:
        states: each network's state dict (``ZooViT``'s keys).
        architectures: each network's architecture.
        device: where they train (default: their tensors').
        dtype: their dtype (default: their tensors').
        dropout: each network's dropout rate (default: none).
        bit_seeds: each network's seed of its dropout stream (default: its row).
    """

    def __init__(self, states: Sequence[dict[str, Tensor]], architectures: Sequence[VitArchitecture],
                 device=None, dtype=None, dropout: Optional[Sequence[float]] = None,
                 bit_seeds: Optional[Sequence[int]] = None):
        first = next(iter(states[0].values()))
        self.device = torch.device(device) if device is not None else first.device
        self.dtype = dtype or first.dtype
        self.n = len(states)
        self.architectures = list(architectures)
        self.groups: list[tuple[int, int, _VitGroup]] = []
        for start, end in _runs(self.architectures):
            self.groups.append((start, end, _VitGroup(self.architectures[start], list(states[start:end]),
                                                      self.device, self.dtype)))
        if len({a for a in self.architectures}) != len(self.groups):
            raise ValueError("VitStack: order the networks so that those of one architecture are consecutive")
        self.optimizers: list[StackedOptimizer] = []
        self.workers = _Workers()
        self._rows: dict[tuple, Tensor] = {}
        rates = [0.0] * self.n if dropout is None else list(dropout)
        if len(rates) != self.n:
            raise ValueError(f"VitStack: {self.n} networks, {len(rates)} dropout rates")
        self.thresholds = [keep_threshold(r) for r in rates]
        self.keep_scale = [1.0 / (1.0 - r) for r in rates]
        self.bits = RandomBits(range(self.n) if bit_seeds is None else bit_seeds, self.device)

    def optimizer(self, rules: Sequence[Rule], lr: Sequence[float], weight_decay: Sequence[float]) -> None:
        """Attach each group's optimizer (weight decay on every parameter)."""
        self.optimizers = [StackedOptimizer(g.params, rules[s:e], lr[s:e], weight_decay[s:e])
                           for s, e, g in self.groups]

    def set_lr(self, lr: Sequence[float]) -> None:
        """Each network's learning rate from now on (:meth:`StackedOptimizer.set_lr`)."""
        for (start, end, _), optimizer in zip(self.groups, self.optimizers):
            optimizer.set_lr(lr[start:end])

    def _keep(self, g: _VitGroup, networks: list[int], sizes: list[int], B: int) -> Optional[Tensor]:
        """The scaled keep masks of one step of ``networks`` (stack rows) on ``sizes`` images each
        (padded to ``B``), as :func:`vit_forward` takes them, or ``None`` when none drops."""
        if all(self.thresholds[i] is None for i in networks):
            return None
        arch = g.arch
        sites, L, d = 1 + 2 * arch.depth, (arch.image_size // arch.patch) ** 2, arch.dim
        keep = torch.ones(len(networks), sites, B, L, d, dtype=g.params.dtype, device=self.device)
        for j, (i, size) in enumerate(zip(networks, sizes)):
            if self.thresholds[i] is None:
                continue
            bits = self.bits.draw(i, vit_dropout_units(arch, size)).view(sites, size, L, d)
            keep[j, :, :size] = keep_mask(bits, self.thresholds[i], g.params.dtype) * self.keep_scale[i]
        return keep.view(len(networks), sites, B * L, d)

    def prepare(self, images: Tensor) -> Tensor:
        """Inputs of :meth:`step` and :meth:`evaluate`: the images' patches on the stack's device and dtype."""
        return vit_patches(images.to(self.device, self.dtype), self.groups[0][2].arch.patch)

    def state(self) -> list[dict[str, Tensor]]:
        """Each network's state dict (copies)."""
        out = []
        for _, _, g in self.groups:
            states = g.state(g.params)
            out += [{k: v[r] for k, v in states.items()} for r in range(g.params.shape[0])]
        return out

    def finite(self) -> Tensor:
        return torch.cat([torch.isfinite(g.params).all(1) for _, _, g in self.groups])

    def step(self, batches: Sequence[tuple[int, Tensor]], inputs: Tensor, labels: Tensor) -> None:
        """One optimizer step of each network ``i`` of ``batches`` (``(i, image indices)``, ``i``
        increasing) on its mean cross-entropy over its images; the others do not move."""
        by_row = dict(batches)
        work = [(start, end, g, optimizer, [i - start for i in range(start, end) if i in by_row])
                for (start, end, g), optimizer in zip(self.groups, self.optimizers)]
        self.workers.run(lambda worker, item: self._step_group(*item, by_row, inputs, labels),
                         [w for w in work if w[-1]])

    def _step_group(self, start: int, end: int, g: _VitGroup, optimizer: StackedOptimizer, rows: list[int],
                    by_row: dict, inputs: Tensor, labels: Tensor) -> None:
        """One step of the group's networks ``rows`` (positions in the group): one forward over their
        own batches (a shorter batch padded with images of weight 0), autograd, their optimizer."""
        batches = [by_row[start + r] for r in rows]
        sizes = [len(b) for b in batches]
        B = max(sizes)
        index = torch.stack([F.pad(b, (0, B - len(b))) for b in batches])
        leaf = g.params.detach().requires_grad_()
        picked = _ranges(rows, 0, end - start)
        if not isinstance(picked, slice):
            key = tuple(picked)
            if key not in self._rows:  # made once per pattern: no copy to the device per step
                self._rows[key] = torch.tensor(picked, device=self.device)
            picked = self._rows[key]
        keep = self._keep(g, [start + r for r in rows], sizes, B)
        logits = vit_forward(g, leaf[picked], inputs[index], keep)
        ce = F.cross_entropy(logits.flatten(0, 1), labels[index].flatten(), reduction="none").view(len(rows), B)
        if min(sizes) == B:
            loss = ce.mean(1).sum()
        else:
            weight = torch.tensor([[1.0 / n] * n + [0.0] * (B - n) for n in sizes], dtype=ce.dtype)
            loss = (ce * weight.to(ce.device, non_blocking=True)).sum()
        (grad,) = torch.autograd.grad(loss, leaf)
        optimizer.step(grad, rows)

    @torch.no_grad()
    def evaluate(self, inputs: Tensor, labels: Tensor, subsets: Optional[Sequence[Tensor]] = None,
                 rows: Optional[Sequence[int]] = None, chunk: int = 500) -> tuple[Tensor, Tensor]:
        """As :meth:`ConvStack.evaluate`."""
        rows = set(range(self.n) if rows is None else rows)
        accuracy = torch.full((self.n,), math.nan, dtype=torch.float64, device=self.device)
        loss = accuracy.clone()
        for start, end, g in self.groups:
            members = [r for r in range(start, end) if r in rows]
            if not members:
                continue
            if subsets is None:
                correct = torch.zeros(len(members), dtype=torch.float64, device=self.device)
                total = torch.zeros_like(correct)
                flat = g.params[torch.tensor([r - start for r in members], device=self.device)]
                for c0 in range(0, len(inputs), chunk):
                    logits = vit_forward(g, flat, inputs[None, c0:c0 + chunk])
                    y = labels[c0:c0 + chunk]
                    correct += (logits.argmax(-1) == y).sum(1)
                    total += F.cross_entropy(logits.transpose(1, 2), y.expand(len(members), -1),
                                             reduction="none").sum(1).double()
                idx = torch.tensor(members, device=self.device)
                accuracy[idx], loss[idx] = correct / len(inputs), total / len(inputs)
                continue
            for r in members:
                index = subsets[r]
                correct = torch.zeros((), dtype=torch.float64, device=self.device)
                total = torch.zeros_like(correct)
                for c0 in range(0, len(index), chunk):
                    part = index[c0:c0 + chunk]
                    logits = vit_forward(g, g.params[r - start:r - start + 1], inputs[part][None])[0]
                    correct += (logits.argmax(-1) == labels[part]).sum()
                    total += F.cross_entropy(logits, labels[part], reduction="sum").double()
                accuracy[r], loss[r] = correct / len(index), total / len(index)
        return accuracy, loss


# ---------------------------------------------------------------------------------------------
# the loop


class Checkpoint(NamedTuple):
    """What :func:`fit` hands its ``record`` callback at each checkpoint epoch (rows in stack order).

    Attributes:
        epoch: the epoch (0: before training).
        train_accuracy: ``[n]`` float64, each network on its own training images.
        train_loss: ``[n]`` their mean cross-entropy.
        test_accuracy: ``[n]`` on the test images.
        test_loss: ``[n]``.
        alive: ``[n]`` trained this far with finite parameters (all, unless stopping).
    """

    epoch: int
    train_accuracy: Tensor  # [n] float64, on the network's own training images
    train_loss: Tensor
    test_accuracy: Tensor
    test_loss: Tensor
    alive: Tensor  # [n] bool: trained this far with finite parameters (always all when not stopping)


def network_seed(seed: int, network: int, stream: int = 0) -> int:
    """Seed of one of ``network``'s random streams: 0 its hyperparameters and initialisation, 1 its
    mini-batch order, 2 its training subset, 3 its dropout masks (every zoo generator's convention).

    Args:
        seed: the zoo's seed.
        network: the network's id.
        stream: 0, 1, 2 or 3.

    Returns:
        A 32-bit seed.
    """
    return int(np.random.SeedSequence([seed, network, stream]).generate_state(1)[0])


class NetworkPlan(NamedTuple):
    """The networks of one shard, drawn and put in a stack's order (:func:`plan_networks`).

    Attributes:
        ids: the networks' ids, as given.
        seeds: their stream-0 seeds (hyperparameters, initialisation).
        hypers: their hyperparameters.
        subsets: their training images.
        rules: their optimizer rules.
        groups: what networks stacked together share (an activation, an architecture).
        order: the stack's order (positions in ``ids``).
        zoo_seed: the zoo's seed.
        batch_size: the mini-batch size.
        drop_last: an epoch leaves out its last, smaller mini-batch.
    """

    ids: list
    seeds: list
    hypers: list
    subsets: list
    rules: list
    groups: list
    order: list
    zoo_seed: int
    batch_size: int
    drop_last: bool

    def ordered(self, values: Sequence) -> list:
        """``values`` in the stack's order.

        Args:
            values: one per network, in the order of ``ids``.

        Returns:
            The values, reordered.
        """
        return [values[k] for k in self.order]

    def streams(self, stream: int) -> list[int]:
        """Each network's seed of one of its streams, in the stack's order.

        Args:
            stream: the stream (:func:`network_seed`).

        Returns:
            The seeds.
        """
        return [network_seed(self.zoo_seed, self.ids[k], stream) for k in self.order]

    def mini_batches(self) -> MiniBatches:
        """The networks' mini-batches, in the stack's order.

        Returns:
            Each network's mini-batches of its own images, in an order from its stream 1.
        """
        return MiniBatches(self.ordered(self.subsets), self.streams(1), self.batch_size, drop_last=self.drop_last)


def plan_networks(ids: Sequence[int], zoo_seed: int, sample: Callable[[int], dict],
                  subset: Callable[[int, dict], Tensor], rule: Callable[[dict], Rule], group: Callable[[dict], Any],
                  batch_size: int, drop_last: bool) -> NetworkPlan:
    """Draw a shard's networks as every zoo generator does: each network's hyperparameters from its
    stream-0 seed, its training images and optimizer rule from them, then the stack's order
    (:func:`order_networks`: by group, rule, most steps first).

    Args:
        ids: the networks' ids.
        zoo_seed: the zoo's seed.
        sample: a network's hyperparameters from its seed.
        subset: a network's training images from its id and hyperparameters.
        rule: its optimizer rule from its hyperparameters.
        group: what it shares with the networks stacked beside it, from its hyperparameters.
        batch_size: the mini-batch size.
        drop_last: an epoch leaves out its last, smaller mini-batch.

    Returns:
        The plan.
    """
    ids = list(ids)
    seeds = [network_seed(zoo_seed, i) for i in ids]
    hypers = [sample(s) for s in seeds]
    subsets = [subset(i, h) for i, h in zip(ids, hypers)]
    rules = [rule(h) for h in hypers]
    groups = [group(h) for h in hypers]
    steps = [len(s) // batch_size if drop_last else -(-len(s) // batch_size) for s in subsets]
    return NetworkPlan(ids, seeds, hypers, subsets, rules, groups, order_networks(groups, rules, steps), zoo_seed,
                       batch_size, drop_last)


def order_networks(groups: Sequence, rules: Sequence[Rule], steps: Sequence[int]) -> list[int]:
    """A stack's order of networks: by architecture, then rule, then most steps per epoch first, so
    that the networks still stepping lead every run of one group and rule.

    Args:
        groups: each network's architecture (anything with a ``repr``).
        rules: each network's rule.
        steps: each network's steps per epoch.

    Returns:
        The networks' positions in that order.
    """
    keys = [(repr(g), repr(r), -s, i) for i, (g, r, s) in enumerate(zip(groups, rules, steps))]
    return [k[-1] for k in sorted(keys)]


def fit(stack, batches: MiniBatches, train: tuple[Tensor, Tensor], test: tuple[Tensor, Tensor],
        checkpoint_epochs: Sequence[int], record: Callable[[Checkpoint], None], stop_nonfinite: bool = False,
        progress: Optional[Callable[[int], None]] = None, threads: Optional[int] = None,
        lr_schedule: Optional[Callable[[int], Sequence[float]]] = None) -> None:
    """Train every network of ``stack`` for ``max(checkpoint_epochs)`` epochs of its own
    ``batches`` and call ``record`` at each checkpoint epoch (0: before training).

    ``train``/``test``: the stack's prepared inputs (:meth:`ConvStack.prepare`) and labels; a
    network's train metrics are on its own subset. ``stop_nonfinite``: a network whose parameters
    become non-finite stops (checked once per epoch) and is reported not alive from then on.
    ``progress(epoch)`` after each epoch of training.

    On CPU each operation runs on one thread and ``threads`` (default ``torch.get_num_threads()``)
    threads train networks side by side; a network's arithmetic does not depend on the count.

    Args:
        stack: a :class:`ConvStack` or :class:`VitStack`, its optimizer attached.
        batches: the networks' mini-batches (stack order).
        train: the prepared training inputs and their labels.
        test: the prepared test inputs and their labels.
        checkpoint_epochs: the epochs to record.
        record: called with each :class:`Checkpoint`.
        stop_nonfinite: stop a network whose parameters or losses become non-finite.
        progress: called with each epoch number after its training.
        threads: networks trained side by side on CPU.
        lr_schedule: ``lr_schedule(epoch)``, each network's learning rate (stack order) in that epoch
            (1, 2, ...), set before it; ``None``: the optimizer's rates throughout.
    """
    device = train[0].device
    if device.type != "cpu":
        _fit(stack, batches, train, test, checkpoint_epochs, record, stop_nonfinite, progress, lr_schedule)
        return
    stack.workers = _Workers(torch.get_num_threads() if threads is None else threads)
    with op_threads(1):
        _fit(stack, batches, train, test, checkpoint_epochs, record, stop_nonfinite, progress, lr_schedule)


def _fit(stack, batches, train, test, checkpoint_epochs, record, stop_nonfinite, progress, lr_schedule) -> None:
    n = stack.n
    device = train[0].device
    subsets = [s.to(device) for s in batches.subsets]
    alive = torch.ones(n, dtype=torch.bool, device=device)
    alive_host = [True] * n
    last = max(checkpoint_epochs)
    for epoch in range(last + 1):
        if epoch > 0:
            if lr_schedule is not None:
                stack.set_lr(lr_schedule(epoch))
            order = [[b.to(device, non_blocking=True) for b in batches.epoch(i)] if alive_host[i] else []
                     for i in range(n)]
            for s in range(max(map(len, order), default=0)):
                stack.step([(i, order[i][s]) for i in range(n) if len(order[i]) > s], *train)
            if stop_nonfinite:
                alive &= stack.finite()
                alive_host = alive.tolist()
        if epoch in checkpoint_epochs:
            test_accuracy, test_loss = stack.evaluate(*test)
            train_accuracy, train_loss = stack.evaluate(*train, subsets=subsets)
            if stop_nonfinite:
                alive &= stack.finite() & torch.isfinite(test_loss) & torch.isfinite(train_loss)
                alive_host = alive.tolist()
            record(Checkpoint(epoch, train_accuracy, train_loss, test_accuracy, test_loss, alive.clone()))
        if progress is not None and epoch > 0:
            progress(epoch)
