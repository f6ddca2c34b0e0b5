"""``neuralgraph edit``: apply a trained INR editor to one INR, write a PNG and the edited INR.

The INR comes from a safetensors file (``--inr``: keys ``weight.<l>`` ``[d_out, d_in]`` and
``bias.<l>`` ``[d_out]`` for l = 1..L, as ``--export`` writes them) or from the checkpoint's
dataset (``--index``, in ``--split``). The PNG shows the input, the target when known, the OCE
average and each member. With ``k > 1`` the export is ONE network that computes the average
of the k members exactly (:func:`neuralgraph.nn.merge_ensemble`); ``--inr`` reads it like any
INR: any width and depth the editor's metanetwork reads, or an error saying why not.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from neuralgraph.commands import check_output_file, load_torch_file, nonnegative_int, positive_int
from neuralgraph.graph import mlp_to_graph


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Adds ``edit``'s arguments: the checkpoint, the INR (``--inr`` or ``--index``) and the outputs.

    Args:
        parser: the subcommand's parser.
    """
    parser.add_argument("--ckpt", required=True, type=Path, help="checkpoint of an InrEditing run")
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--inr", type=Path, help="a .safetensors INR (weight.<l>, bias.<l>)")
    source.add_argument("--index", type=nonnegative_int, help="index of an INR in the checkpoint's dataset split")
    parser.add_argument("--split", default="test", choices=("train", "val", "test"))
    parser.add_argument("--data-root", type=Path, help="dataset folder (default: the one the checkpoint was trained on)")
    parser.add_argument("--out", required=True, type=Path, help="PNG to write")
    parser.add_argument("--export", type=Path, help="write the edited INR (merged when k > 1) as .safetensors")
    parser.add_argument("--resolution", type=positive_int, default=28, help="render resolution of the PNG")
    parser.add_argument("--force", action="store_true", help="overwrite --out and --export when they exist")


def save_inr(path: Path, weights, biases, metadata: dict | None = None) -> None:
    """One INR as safetensors: ``weight.<l>``, ``bias.<l>`` (l from 1), JSON metadata.

    Args:
        path: the file to write (its folder is created).
        weights: per layer, the weight ``[d_out, d_in]``.
        biases: per layer, the bias ``[d_out]``.
        metadata: values stored JSON-encoded in the file's metadata, or None.
    """
    tensors = {f"weight.{l}": w.detach().contiguous().cpu() for l, w in enumerate(weights, start=1)}
    tensors.update({f"bias.{l}": b.detach().contiguous().cpu() for l, b in enumerate(biases, start=1)})
    path.parent.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(path), metadata={k: json.dumps(v) for k, v in (metadata or {}).items()})


def load_inr(path: Path) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Inverse of :func:`save_inr`; errors name the file and the missing key.

    Args:
        path: a safetensors INR.

    Returns:
        Its weights and biases, one of each per layer from the first.

    Raises:
        ValueError: the file is unreadable or its keys are not ``weight.1..L`` and ``bias.1..L``.
    """
    try:
        tensors = load_file(str(path))
    except (SafetensorError, OSError) as err:
        raise ValueError(f"{path}: not a readable safetensors INR ({err})") from None
    num_layers = sum(1 for key in tensors if key.startswith("weight."))
    expected = {f"{kind}.{l}" for kind in ("weight", "bias") for l in range(1, num_layers + 1)}
    if num_layers == 0 or set(tensors) != expected:
        raise ValueError(f"{path}: expected keys weight.1..weight.L and bias.1..bias.L, found {sorted(tensors)}")
    return ([tensors[f"weight.{l}"] for l in range(1, num_layers + 1)],
            [tensors[f"bias.{l}"] for l in range(1, num_layers + 1)])


def run(args: argparse.Namespace) -> int:
    """Runs ``edit``: edits the INR with the checkpoint's editor, writes the PNG (and ``--export``).

    Args:
        args: the parsed arguments of :func:`add_arguments`.

    Returns:
        The exit status, 0.
    """
    from neuralgraph.inr import render, siren_layout
    from neuralgraph.nn import merge_ensemble
    from neuralgraph.training.tasks import InrEditing, check_checkpoint
    from neuralgraph.training.visualize import save_editing_grid

    for option, path in (("--out", args.out), ("--export", args.export)):
        if path is not None:
            check_output_file(path, option, args.force)
    checkpoint = load_torch_file(args.ckpt)
    check_checkpoint(checkpoint, "InrEditing", {}, args.ckpt)
    task = InrEditing.load_from_checkpoint(args.ckpt, map_location="cpu", weights_only=True)
    task.eval()

    target = None
    if args.inr is not None:
        weights, biases = load_inr(args.inr)
        try:
            siren_layout(weights, biases)
        except ValueError as err:
            raise ValueError(f"--inr {args.inr}: {err}") from None
    else:
        from neuralgraph.data.inr_dataset import InrDataset

        root = args.data_root or Path(checkpoint.get("datamodule_hyper_parameters", {}).get("root", "data/inrs"))
        dataset = InrDataset(root, args.split)
        if not 0 <= args.index < len(dataset):
            raise ValueError(f"--index {args.index}: split {args.split!r} of {root} has {len(dataset)} INRs")
        item = dataset[args.index]
        weights, biases = item["weights"], item["biases"]
        if args.resolution == item["image"].shape[-1]:  # the digit is only known at its own size
            target = task.edit(item["image"].unsqueeze(0))[0]

    graph = mlp_to_graph([w.unsqueeze(0) for w in weights], [b.unsqueeze(0) for b in biases])
    with torch.no_grad():
        try:  # any width and depth the metanetwork reads; otherwise its own error says why not
            out_w, out_b = task.edited_networks(graph)
        except ValueError as err:
            raise ValueError(f"the {task.hparams.metanet!r} editor of {args.ckpt} cannot read an INR of layout "
                             f"{siren_layout(weights, biases)}: {err}") from None
        members = render([w[0] for w in out_w], [b[0] for b in out_b], args.resolution)  # [k, H, W]
        merged_w, merged_b = merge_ensemble(out_w, out_b)
        merged_w, merged_b = [w[0] for w in merged_w], [b[0] for b in merged_b]
    save_editing_grid(args.out, render(weights, biases, args.resolution).unsqueeze(0), members.mean(0, keepdim=True),
                      members.unsqueeze(0), None if target is None else target.unsqueeze(0))
    print(f"wrote {args.out} (k={members.shape[0]})")
    if args.export is not None:
        layout = [merged_w[0].shape[1]] + [w.shape[0] for w in merged_w]
        save_inr(args.export, merged_w, merged_b, {"layout": layout, "merged_members": members.shape[0]})
        print(f"wrote {args.export}: one INR of layout {layout} computing the average of the {members.shape[0]} members")
    return 0
