"""Data: MNIST digits, the MNIST-INR dataset (generation and loading), the sharded folder format."""
from neuralgraph.data.generate import GenerationSettings, make_inrs, split_digits
from neuralgraph.data.inr_dataset import InrBatch, InrDataset
from neuralgraph.data.mnist import Digits, MnistFileError, load_digits, load_mnist, load_subset
from neuralgraph.data.shards import DatasetError

__all__ = [
    "DatasetError",
    "Digits",
    "GenerationSettings",
    "InrBatch",
    "InrDataset",
    "MnistFileError",
    "load_digits",
    "load_mnist",
    "load_subset",
    "make_inrs",
    "split_digits",
]
