"""MNIST IDX reading, md5 checks, file lookup and the embedded subset."""
import gzip
import hashlib
import os

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from neuralgraph.data import mnist
from neuralgraph.data.mnist import MnistFileError, build_subset, load_mnist, load_subset, locate, parse_idx, read_idx

FULL = os.environ.get(mnist.ENV_VAR)
needs_full = pytest.mark.skipif(not FULL, reason=f"${mnist.ENV_VAR} is not set")


def idx_bytes(array: np.ndarray) -> bytes:
    type_byte = {np.dtype(np.uint8): 0x08, np.dtype(np.int32): 0x0C}[array.dtype]
    header = bytes([0, 0, type_byte, array.ndim]) + np.array(array.shape, ">i4").tobytes()
    return header + array.astype(array.dtype.newbyteorder(">")).tobytes()


@settings(max_examples=25, deadline=None)
@given(st.lists(st.integers(1, 5), min_size=1, max_size=3), st.sampled_from([np.uint8, np.int32]), st.booleans())
def test_idx_round_trip_gzipped_or_not(tmp_path_factory, shape, dtype, gzipped):
    array = np.arange(int(np.prod(shape)), dtype=dtype).reshape(shape)
    raw = idx_bytes(array)
    path = tmp_path_factory.mktemp("idx") / ("f.gz" if gzipped else "f")
    path.write_bytes(gzip.compress(raw) if gzipped else raw)
    decoded = read_idx(path, hashlib.md5(raw).hexdigest())
    assert decoded.dtype == dtype and np.array_equal(decoded, array)


def test_bad_magic_names_the_file(tmp_path):
    path = tmp_path / "bad-idx"
    path.write_bytes(b"\x01\x02\x08\x01" + np.array([3], ">i4").tobytes() + b"abc")
    with pytest.raises(MnistFileError, match="bad-idx.*magic"):
        read_idx(path)


def test_md5_mismatch_names_the_file(tmp_path):
    path = tmp_path / "labels.gz"
    path.write_bytes(gzip.compress(idx_bytes(np.arange(4, dtype=np.uint8))))
    with pytest.raises(MnistFileError, match="labels.gz.*md5"):
        read_idx(path, "0" * 32)


def test_truncated_payload_and_broken_gzip(tmp_path):
    with pytest.raises(MnistFileError, match="expected"):
        parse_idx(idx_bytes(np.arange(6, dtype=np.uint8))[:-1], "short")
    path = tmp_path / "broken.gz"
    path.write_bytes(gzip.compress(b"x" * 100)[:20])
    with pytest.raises(MnistFileError, match="broken.gz.*gzip"):
        read_idx(path)


def test_explicit_folder_without_files_is_an_error(tmp_path):
    with pytest.raises(MnistFileError, match="lacks MNIST files"):
        locate(tmp_path)


def test_embedded_subset_shapes_and_order():
    for split, size, total in (("train", 2000, 60000), ("test", 500, 10000)):
        digits = load_subset(split)
        assert digits.images.shape == (size, 28, 28) and digits.images.dtype == np.uint8
        assert np.all(np.diff(digits.indices) > 0) and digits.indices.max() < total
        assert set(np.unique(digits.labels)) == set(range(10))


@needs_full
def test_full_mnist_and_subset_agree():
    for split in ("train", "test"):
        full, subset = load_mnist(split, download=False), load_subset(split)
        assert np.array_equal(full.images[subset.indices], subset.images)
        assert np.array_equal(full.labels[subset.indices], subset.labels)


@needs_full
def test_subset_is_rebuilt_reproducibly(tmp_path):
    path = build_subset(tmp_path / "subset.npz", root=FULL)
    with np.load(path) as rebuilt, np.load(mnist.SUBSET_PATH) as shipped:
        assert sorted(rebuilt.files) == sorted(shipped.files)
        for key in shipped.files:
            assert np.array_equal(rebuilt[key], shipped[key]), key
