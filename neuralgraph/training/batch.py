"""What a training step receives: parameter graphs plus per-INR data, moved to device as one."""
from __future__ import annotations

from typing import NamedTuple

from torch import Tensor
from torch_geometric.data import Batch


class InrBatch(NamedTuple):
    """A mini-batch of INRs: their parameter graphs (one per INR) and what they encode."""

    graph: Batch  # parameter graphs of the B INRs, one layout
    image: Tensor  # [B, H, W] the digit each INR was fitted to, values in [0, 1]
    label: Tensor  # [B] digit class
    index: Tensor  # [B] position of each INR in its split

    @property
    def size(self) -> int:
        return int(self.label.shape[0])
