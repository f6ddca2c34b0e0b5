"""Shared fixtures."""
import pytest

from neuralgraph.data.generate import GenerationSettings, make_inrs
from neuralgraph.inr import FitConfig


@pytest.fixture(scope="session")
def tiny_inrs(tmp_path_factory):
    """64/32/32 INRs of embedded MNIST digits, fitted briefly (20 steps: plumbing, not quality)."""
    root = tmp_path_factory.mktemp("inrs")
    settings = GenerationSettings(source="embedded", fit=FitConfig(steps=20), shard_size=32)
    for split, limit in (("train", 64), ("val", 32), ("test", 32)):
        make_inrs(root, (split,), limit, settings, progress=False)
    return root
