"""The MNIST-INR dataset as a torch ``Dataset``, held in memory, and its one way to make a batch."""
from __future__ import annotations

from pathlib import Path
from typing import NamedTuple, Optional, Sequence

import torch
from torch import Tensor
from torch.utils.data import Dataset
from torch_geometric.data import Batch

from neuralgraph.data.generate import INR_FOLDER
from neuralgraph.data.shards import MANIFEST, DatasetError, check_settings, read_manifest, read_shard
from neuralgraph.graph import mlp_to_graph, permute_mlp, random_hidden_permutations
from neuralgraph.graph.blocks import GraphFacts, WeightBlocks, graph_facts
from neuralgraph.inr import SirenConvention
from neuralgraph.inr.augment import InrAugmentation, augment_inrs


class InrBatch(NamedTuple):
    """A mini-batch of INRs: their parameter graphs (one per INR), their weights, and what they encode.

    Targets are not part of it: each task derives its own from these fields (an edit of
    ``image``, the ``label``, a statistic of the weights), in one place, the task's loss.
    ``blocks`` holds the weights the graph was built from (:meth:`InrDataset.batch`), so the
    metanet, its heads and the targets read them without decoding the graph; a batch built
    by hand may leave it out (``None``), and they then decode the graph. ``facts`` are what the
    graph's index fields hold (:class:`~neuralgraph.graph.blocks.GraphFacts`), read on the CPU where
    the batch is built, so that a step on the accelerator reads nothing back; ``None``: read then.
    With ``index`` and ``size`` these are the fields of :class:`~neuralgraph.graph.blocks.MetanetBatch`,
    which every task reads.

    Attributes:
        graph: parameter graphs of the ``B`` INRs, of one layout.
        image: ``[B, H, W]`` the digit each INR encodes, values in ``[0, 1]``; ``None`` for a set without images.
        label: ``[B]`` digit class.
        index: ``[B]`` position of each INR in its split.
        blocks: the INRs' weights and biases, layer by layer.
        facts: sizes and index ranges of the graph, read on the CPU.
    """

    graph: Batch  # parameter graphs of the B INRs, one layout
    image: Optional[Tensor]  # [B, H, W] the digit each INR encodes, values in [0, 1]; None for a set without images
    label: Tensor  # [B] digit class
    index: Tensor  # [B] position of each INR in its split
    blocks: Optional[WeightBlocks] = None  # the INRs' weights and biases, layer by layer
    facts: Optional[GraphFacts] = None  # sizes and index ranges of the graph, read on the CPU

    @property
    def size(self) -> int:
        return int(self.label.shape[0])


class InrDataset(Dataset):
    """The INRs of one split of a ``make-inrs`` folder, every shard loaded once into memory.

    Item ``i`` is a dict: ``weights`` (list of ``[d_out, d_in]``), ``biases`` (list of
    ``[d_out]``), ``image`` ``[28, 28]`` float in ``[0, 1]``, ``label``, ``mnist_index`` and
    ``psnr``. :meth:`batch` is the one way to make a training batch (:class:`InrBatch`): the
    weights of many INRs are gathered by index, converted by the batched ``mlp_to_graph`` and kept
    beside the graph (``InrBatch.blocks``).

    Every shard's sha256 is checked against the manifest, and a non-finite weight or bias
    (a diverged fit) is refused with the shard file and the INR's index; with ``convention``
    given, a dataset of another convention is refused.

    Args:
        root: the dataset folder.
        split: the split to load.
        convention: the convention the dataset must have, or ``None`` to take its own.
    """

    def __init__(self, root: str | Path, split: str = "train", convention: Optional[SirenConvention] = None):
        self.root = Path(root)
        manifest = read_manifest(self.root, INR_FOLDER)
        manifest_path = self.root / MANIFEST
        # an imported set (import-dataset) has no fitting record (steps), and images only when attached
        self.imported = manifest.get("imported")
        if convention is not None:
            check_settings(manifest, {"convention": convention.to_dict()}, manifest_path)
        if split not in manifest["splits"]:
            raise DatasetError(f"{manifest_path}: no split {split!r} (has {sorted(manifest['splits'])})")
        self.convention = SirenConvention.from_dict(manifest["convention"])
        self.split = split
        entry = manifest["splits"][split]
        shards, offset = [], 0
        for record in entry["shards"]:
            shards.append(self._load_shard(record, offset))
            offset += record["count"]
        found = sum(len(s["label"]) for s in shards)
        if found != entry["count"]:
            raise DatasetError(f"{manifest_path}: split {split} lists {entry['count']} INRs, its shards hold {found} "
                               f"(an unfinished run? rerun the same {self.command} command)")
        num_layers = len(self.convention.layout) - 1
        self.weights = [torch.cat([s[f"layer{l}.weight"] for s in shards]) for l in range(1, num_layers + 1)]
        self.biases = [torch.cat([s[f"layer{l}.bias"] for s in shards]) for l in range(1, num_layers + 1)]
        def cat(key: str) -> Tensor:
            return torch.cat([s[key] for s in shards])

        def optional(key: str) -> Optional[Tensor]:
            return cat(key) if key in shards[0] else None

        self.labels, self.mnist_indices = cat("label"), cat("mnist_index")
        self.psnrs, self.steps = optional("psnr"), optional("steps")
        if self.mnist_indices.tolist() != entry["mnist_indices"]:
            raise DatasetError(f"{manifest_path}: the shards' mnist_index does not match split {split}'s membership")
        images = optional("image")
        self.images = None if images is None else images.float() / 255

    def _load_shard(self, record: dict, offset: int) -> dict[str, Tensor]:
        """The tensors of one shard, checked; ``offset`` is the split index of its first INR."""
        path = self.root / record["file"]
        tensors = read_shard(path, record, self.command)
        layout = self.convention.layout
        expected = {key: (record["count"],) for key in ("label", "mnist_index", "psnr", "steps")}
        expected["image"] = (record["count"], 28, 28)
        if self.imported is not None:
            expected.pop("steps")
            if self.imported["images"] == "none":
                expected.pop("image")
                expected.pop("psnr")
        for l, (d_in, d_out) in enumerate(zip(layout[:-1], layout[1:]), start=1):
            expected[f"layer{l}.weight"] = (record["count"], d_out, d_in)
            expected[f"layer{l}.bias"] = (record["count"], d_out)
        for key, shape in expected.items():
            if key not in tensors:
                raise DatasetError(f"{path}: tensor {key!r} is missing")
            if tuple(tensors[key].shape) != shape:
                raise DatasetError(f"{path}: tensor {key!r} has shape {tuple(tensors[key].shape)}, expected {shape}")
        for key in (k for k in expected if k.startswith("layer")):
            bad = (~torch.isfinite(tensors[key])).flatten(1).any(1).nonzero().flatten()
            if len(bad):
                i = int(bad[0])
                raise DatasetError(f"{path}: INR {i} of the shard (index {offset + i} of split {self.split!r}, MNIST "
                                   f"index {int(tensors['mnist_index'][i])}) has non-finite values in {key}"
                                   + (f"; {len(bad) - 1} more INRs of the shard too" if len(bad) > 1 else ""))
        return tensors

    @property
    def command(self) -> str:
        """The command that writes this folder (named in errors)."""
        return INR_FOLDER.command if self.imported is None else "import-dataset"

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i: int) -> dict:
        return {
            "index": i,
            "weights": [w[i] for w in self.weights],
            "biases": [b[i] for b in self.biases],
            "image": None if self.images is None else self.images[i],
            "label": self.labels[i],
            "mnist_index": self.mnist_indices[i],
            "psnr": None if self.psnrs is None else self.psnrs[i],
        }

    def batch(self, indices: Sequence[int] | Tensor, permute: bool = False,
              augment: Optional[InrAugmentation] = None) -> InrBatch:
        """INRs ``indices`` as one :class:`InrBatch` (a ``DataLoader``'s ``collate_fn`` over index
        lists); ``permute`` applies a random hidden-neuron permutation to each INR (augmentation:
        the function, image and label are unchanged); ``augment`` moves, turns and zooms the image
        each INR draws and drops weights (:func:`~neuralgraph.inr.augment.augment_inrs`): the label
        holds, the digit image no longer matches, so the batch carries none (``image`` is None)."""
        index = torch.as_tensor(indices, dtype=torch.long)
        weights, biases = [w[index] for w in self.weights], [b[index] for b in self.biases]
        if permute:
            weights, biases = permute_mlp(weights, biases,
                                          random_hidden_permutations(self.convention.layout, len(index)))
        if augment is not None:
            weights, biases = augment_inrs(weights, biases, augment)
        images = None if self.images is None or augment is not None else self.images[index]
        graph, blocks = mlp_to_graph(weights, biases), WeightBlocks.of_mlps(weights, biases)
        return InrBatch(graph, images, self.labels[index], index, blocks, graph_facts(graph, blocks.layout))
