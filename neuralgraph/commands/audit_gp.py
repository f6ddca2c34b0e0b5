"""``neuralgraph audit-gp DIR``: how many networks stay in general position at each bit width.

``DIR`` is an INR dataset (a folder with a manifest, see :mod:`neuralgraph.data.inr_dataset`)
or a folder of MLP checkpoints (``*.safetensors``, or ``*.pt``/``*.pth`` state dicts, loaded
with ``weights_only=True``). Every network is quantized (:mod:`neuralgraph.theory.quantize`)
and audited (:mod:`neuralgraph.theory.gp`); the printed markdown table gives, per bit width
and quantization granularity, the percentage of networks in bias GP, in combined
(five-separator) GP and in invariant (five scalar separators) GP, and the median numbers
of tied pairs. ``--group sign`` (SIRENs, tanh) or
``--group scale`` (ReLU) audits GP up to neuron sign flips or rescalings as well.
"""
from __future__ import annotations

import argparse
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Iterator, Optional

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file
from torch import Tensor

from neuralgraph.commands import load_torch_file, positive_int
from neuralgraph.data.shards import MANIFEST
from neuralgraph.data.inr_dataset import InrDataset
from neuralgraph.graph import SCALING_GROUPS, GraphConversionError, graph_to_mlp, module_to_graph
from neuralgraph.theory.gp import audit_gp
from neuralgraph.theory.quantize import GRANULARITIES, IEEE_FORMATS, UNIFORM_BITS, is_ieee, quantize_mlp

#: Files of a checkpoint folder that are read as MLP checkpoints, by suffix.
CHECKPOINT_SUFFIXES = (".safetensors", ".pt", ".pth")
#: Bit widths audited when ``--bits`` is not given: IEEE single, then 16-, 12- and 8-bit grids.
DEFAULT_BITS = (32, 16, 12, 8)
Networks = tuple[list[Tensor], list[Tensor]]  # batched weights [B, d_out, d_in], biases [B, d_out]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Adds ``audit-gp``'s arguments: the folder, bit widths, split, granularities, limits and group.

    Args:
        parser: the subcommand's parser.
    """
    parser.add_argument("root", type=Path, metavar="DIR", help="INR dataset folder or folder of MLP checkpoints")
    parser.add_argument("--bits", type=bit_width, nargs="+", default=None,
                        help="bit widths to audit: 32 (IEEE single) or 2..16 (uniform grid; 16 as IEEE half with "
                             f"--granularity ieee) (default: {' '.join(map(str, DEFAULT_BITS))}; 32 16 with "
                             "--granularity ieee alone)")
    parser.add_argument("--split", default="train", help="split of an INR dataset (ignored for checkpoints)")
    parser.add_argument(
        "--granularity", nargs="+", choices=GRANULARITIES, default=["tensor"],
        help="scale of the uniform grid: per tensor, per layer, or ieee (a cast to IEEE floats at 16 bits)"
    )
    parser.add_argument("--limit", type=positive_int, default=None, help="audit at most this many networks")
    parser.add_argument("--chunk", type=positive_int, default=1024, help="networks audited at once (memory)")
    parser.add_argument("--group", choices=SCALING_GROUPS, default=None,
                        help="also identify neurons up to sign flips (sign: sine, tanh) or rescalings (scale: ReLU)")


def bit_width(text: str) -> int:
    """argparse type of ``--bits``: a width :func:`~neuralgraph.theory.quantize.quantize_mlp` supports.

    Args:
        text: the option's value.

    Returns:
        The width, 32 or 2..16.

    Raises:
        argparse.ArgumentTypeError: ``text`` is not such a width.
    """
    bits = positive_int(text)
    if bits not in IEEE_FORMATS and bits not in UNIFORM_BITS:
        raise argparse.ArgumentTypeError(f"{bits} bits: choose 32 or 2..16")
    return bits


def load_checkpoint(path: Path) -> Networks:
    """One MLP from a checkpoint file, as a batch of one; errors name the file.

    Args:
        path: a ``.safetensors`` file or a ``torch.save`` state dict (read with ``weights_only=True``).

    Returns:
        Its weights ``[1, d_out, d_in]`` and biases ``[1, d_out]``, one of each per layer.

    Raises:
        ValueError: the file cannot be read.
        GraphConversionError: it holds no MLP state dict.
    """
    if path.suffix != ".safetensors":
        state = load_torch_file(path)
    else:
        try:
            state = load_file(str(path))
        except SafetensorError as err:
            raise ValueError(f"{path}: not a readable safetensors checkpoint ({err})") from None
    if not isinstance(state, dict):
        raise GraphConversionError(f"{path}: holds {type(state).__name__}, expected a state dict")
    try:
        weights, biases = graph_to_mlp(module_to_graph(state))
    except GraphConversionError as err:
        raise GraphConversionError(f"{path}: {err}") from None
    return [w.unsqueeze(0) for w in weights], [b.unsqueeze(0) for b in biases]


def checkpoint_networks(root: Path, limit: int | None) -> Iterator[Networks]:
    """The checkpoints of ``root`` (sorted by name), stacked into one batch per layout.

    Args:
        root: a folder of MLP checkpoints (:data:`CHECKPOINT_SUFFIXES`).
        limit: read at most this many files (the first by name), or None for all.

    Yields:
        One batch of weights and biases per layout, its networks in name order.

    Raises:
        ValueError: ``root`` holds no checkpoint.
    """
    paths = sorted(p for p in root.iterdir() if p.suffix in CHECKPOINT_SUFFIXES)[:limit]
    if not paths:
        raise ValueError(f"{root}: no INR dataset manifest and no {'/'.join(CHECKPOINT_SUFFIXES)} checkpoints")
    by_layout: dict[tuple, list[Networks]] = defaultdict(list)
    for path in paths:
        weights, biases = load_checkpoint(path)
        by_layout[tuple(w.shape[1:] for w in weights)].append((weights, biases))
    for group in by_layout.values():
        yield [torch.cat(ws) for ws in zip(*(w for w, _ in group))], [torch.cat(bs) for bs in zip(*(b for _, b in group))]


def load_networks(root: Path, split: str, limit: int | None) -> Iterator[Networks]:
    """The networks of an INR dataset split (when ``root`` has a manifest) or of a checkpoint folder.

    Args:
        root: an INR dataset folder or a folder of MLP checkpoints.
        split: the dataset's split (a checkpoint folder has none).
        limit: audit at most this many networks, or None for all.

    Yields:
        Batches of weights ``[B, d_out, d_in]`` and biases ``[B, d_out]``, one per layout.
    """
    if not (root / MANIFEST).exists():
        yield from checkpoint_networks(root, limit)
        return
    dataset = InrDataset(root, split)
    yield [w[:limit] for w in dataset.weights], [b[:limit] for b in dataset.biases]


def chunked(networks: Iterable[Networks], size: int) -> Iterator[Networks]:
    """Splits batches of networks into batches of at most ``size``, which bounds the audit's memory.

    Args:
        networks: batches of weights and biases.
        size: the most networks of a batch yielded.

    Yields:
        The networks of ``networks`` in order, in batches of at most ``size``.
    """
    for weights, biases in networks:
        for start in range(0, biases[0].shape[0], size):
            yield [w[start : start + size] for w in weights], [b[start : start + size] for b in biases]


@dataclass
class AuditRow:
    """GP statistics of all audited networks at one bit width and granularity.

    Attributes:
        bits: the bit width.
        granularity: the quantization granularity (``tensor``, ``layer`` or ``ieee``).
        networks: how many networks were audited.
        percent_gp: percentage of networks in general position on the bias separator.
        percent_combined_gp: percentage in general position on the five combined separators.
        percent_invariant_gp: percentage in general position on the five invariant separators.
        median_tied_pairs: median number of neuron pairs tied on the bias.
        median_unseparated_pairs: median number of pairs tied on every combined separator.
    """

    bits: int
    granularity: str
    networks: int
    percent_gp: float
    percent_combined_gp: float
    percent_invariant_gp: float
    median_tied_pairs: float
    median_unseparated_pairs: float


def audit_rows(networks: Iterable[Networks], bits: list[int], granularities: list[str], chunk: int,
               group: Optional[str] = None) -> list[AuditRow]:
    """Quantize and audit every network at each ``(bits, granularity)``; one row per setting.

    32 bits is always IEEE single, one row; ``"ieee"`` applies to 16 and 32 bits only.

    Args:
        networks: batches of weights and biases, one layout per batch.
        bits: the bit widths.
        granularities: the quantization granularities.
        chunk: networks audited at once (bounds memory).
        group: audit up to that scaling group too (see :func:`~neuralgraph.theory.gp.audit_gp`),
            or None.

    Returns:
        One :class:`AuditRow` per setting, in the order of ``bits`` then ``granularities``.

    Raises:
        ValueError: a width has no granularity that applies to it (``ieee`` alone at 8 bits).
    """
    settings = []
    for b in bits:
        schemes = granularities[:1] if b == 32 else [g for g in granularities if g != "ieee" or b == 16]
        if not schemes:
            raise ValueError(f"--bits {b}: --granularity ieee applies to 16 and 32 bits only; add tensor or layer")
        settings += [(b, g) for g in schemes]
    tied: dict[tuple, list[Tensor]] = defaultdict(list)
    unseparated: dict[tuple, list[Tensor]] = defaultdict(list)
    invariant_tied: dict[tuple, list[Tensor]] = defaultdict(list)
    for weights, biases in chunked(networks, chunk):
        for setting in settings:
            audit = audit_gp(*quantize_mlp(weights, biases, *setting), group=group)
            tied[setting].append(audit.bias_tied_pairs)
            unseparated[setting].append(audit.combined_tied_pairs)
            invariant_tied[setting].append(audit.invariant_tied_pairs)
    rows = []
    for setting in settings:
        bias_pairs, combined_pairs = torch.cat(tied[setting]).double(), torch.cat(unseparated[setting]).double()
        invariant_pairs = torch.cat(invariant_tied[setting])
        rows.append(
            AuditRow(
                *setting,
                networks=len(bias_pairs),
                percent_gp=100 * (bias_pairs == 0).double().mean().item(),
                percent_combined_gp=100 * (combined_pairs == 0).double().mean().item(),
                percent_invariant_gp=100 * (invariant_pairs == 0).double().mean().item(),
                median_tied_pairs=bias_pairs.quantile(0.5).item(),
                median_unseparated_pairs=combined_pairs.quantile(0.5).item(),
            )
        )
    return rows


def format_table(rows: list[AuditRow]) -> str:
    """Markdown table of :class:`AuditRow` s.

    Args:
        rows: the rows, printed in order.

    Returns:
        The table, with a header, its alignment line and one line per row.
    """
    lines = [
        "| bits | scale | networks | in GP (bias) | in GP (combined) | in GP (invariant) "
        "| median tied pairs (bias) | median tied pairs (combined) |",
        "|---:|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        scale = "IEEE" if is_ieee(r.bits, r.granularity == "ieee") else f"per {r.granularity}"
        lines.append(
            f"| {r.bits} | {scale} | {r.networks} | {r.percent_gp:.2f}% | {r.percent_combined_gp:.2f}% "
            f"| {r.percent_invariant_gp:.2f}% "
            f"| {r.median_tied_pairs:g} | {r.median_unseparated_pairs:g} |"
        )
    return "\n".join(lines)


def default_bits(granularities: list[str]) -> list[int]:
    """``--bits`` when not given.

    Args:
        granularities: the ``--granularity`` values.

    Returns:
        :data:`DEFAULT_BITS`, less the widths that none of ``granularities`` applies to (``ieee``
        alone: 32 and 16).
    """
    return [b for b in DEFAULT_BITS if b == 32 or any(g != "ieee" or b == 16 for g in granularities)]


def run(args: argparse.Namespace) -> int:
    """Runs ``audit-gp``: prints the table of :func:`audit_rows` for the networks of ``args.root``.

    Args:
        args: the parsed arguments of :func:`add_arguments`.

    Returns:
        The exit status, 0.
    """
    if not args.root.is_dir():
        raise ValueError(f"{args.root}: not a folder")
    bits = args.bits if args.bits is not None else default_bits(args.granularity)
    networks = load_networks(args.root, args.split, args.limit)
    print(format_table(audit_rows(networks, bits, args.granularity, args.chunk, args.group)))
    return 0
