"""MNIST digits from the standard IDX files, and the small subset embedded in the package.

MNIST (Yann LeCun, Corinna Cortes, Christopher J.C. Burges) is licensed CC BY-SA 3.0.
``mnist_subset.npz`` next to this module holds 2,000 training and 500 test digits of it,
chosen by :func:`build_subset` (seeded, reproducible) so that the demo and the tests run
offline; it is distributed under the same licence.

The full files are looked up, in order, in: an explicit ``root``; ``$NEURALGRAPH_MNIST``;
``~/.cache/neuralgraph/mnist``; else they are downloaded there from a public mirror. Every
file is checked against the md5 of its uncompressed bytes.
"""
from __future__ import annotations

import gzip
import hashlib
import os
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Union

import numpy as np

ENV_VAR = "NEURALGRAPH_MNIST"
CACHE_DIR = Path.home() / ".cache" / "neuralgraph" / "mnist"
SUBSET_PATH = Path(__file__).with_name("mnist_subset.npz")
MNIST_SPLITS = ("train", "test")
MIRRORS = (
    "https://ossci-datasets.s3.amazonaws.com/mnist/",
    "https://storage.googleapis.com/cvdf-datasets/mnist/",
)
# file stem -> md5 of the uncompressed IDX bytes
FILES = {
    "train-images-idx3-ubyte": "6bbc9ace898e44ae57da46a324031adb",
    "train-labels-idx1-ubyte": "a25bea736e30d166cdddb491f175f624",
    "t10k-images-idx3-ubyte": "2646ac647ad5339dbf082846283269ea",
    "t10k-labels-idx1-ubyte": "27ae3e4e09519cfbb04c329615203637",
}
_PREFIX = {"train": "train", "test": "t10k"}
# IDX type byte -> numpy dtype (big-endian)
_IDX_DTYPES = {0x08: ">u1", 0x09: ">i1", 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}

PathLike = Union[str, os.PathLike]


class MnistFileError(ValueError):
    """A missing, corrupt or malformed MNIST file; the message names the file."""


@dataclass(frozen=True)
class Digits:
    """``images`` ``[N, 28, 28]`` uint8, ``labels`` ``[N]`` int64, and the position of each
    digit in its original MNIST split (``indices`` ``[N]``).

    Attributes:
        images: ``[N, 28, 28]`` uint8.
        labels: ``[N]`` int64.
        indices: ``[N]`` the positions in the MNIST split.
    """

    images: np.ndarray
    labels: np.ndarray
    indices: np.ndarray

    def __len__(self) -> int:
        return len(self.labels)


def parse_idx(data: bytes, name: str = "<bytes>") -> np.ndarray:
    """Decode an uncompressed IDX file: magic ``0x0000 TT NN``, ``NN`` big-endian int32 sizes.

    Args:
        data: the file's bytes.
        name: the file's name, for errors.

    Returns:
        The array, in native byte order.
    """
    if len(data) < 4 or data[0] != 0 or data[1] != 0 or data[2] not in _IDX_DTYPES:
        raise MnistFileError(f"{name}: bad IDX magic number {data[:4].hex()!r}")
    ndim = data[3]
    header = 4 + 4 * ndim
    if len(data) < header:
        raise MnistFileError(f"{name}: truncated IDX header")
    shape = tuple(int(s) for s in np.frombuffer(data, ">i4", ndim, 4))
    dtype = np.dtype(_IDX_DTYPES[data[2]])
    expected = header + int(np.prod(shape)) * dtype.itemsize
    if len(data) != expected:
        raise MnistFileError(f"{name}: {len(data)} bytes, expected {expected} for shape {shape}")
    return np.frombuffer(data, dtype, offset=header).reshape(shape).astype(dtype.newbyteorder("="))


def decode_idx(raw: bytes, name: str, md5: Optional[str] = None) -> np.ndarray:
    """Decode IDX bytes, gunzipping them if they are gzip data; check the md5 of the IDX bytes.

    Args:
        raw: the file's bytes, gzipped or not.
        name: the file's name, for errors.
        md5: the expected md5 of the uncompressed bytes, or ``None``.

    Returns:
        The array.
    """
    if raw[:2] == b"\x1f\x8b":
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError) as err:
            raise MnistFileError(f"{name}: not a valid gzip file ({err})") from err
    if md5 is not None:
        found = hashlib.md5(raw).hexdigest()
        if found != md5:
            raise MnistFileError(f"{name}: md5 {found} does not match the expected {md5}")
    return parse_idx(raw, name)


def read_idx(path: PathLike, md5: Optional[str] = None) -> np.ndarray:
    """Read an IDX file, gzipped or not, checking the md5 of its uncompressed bytes.

    Args:
        path: the file.
        md5: the expected md5, or ``None``.

    Returns:
        The array.
    """
    return decode_idx(Path(path).read_bytes(), str(path), md5)


def _find(stem: str, folder: Path) -> Optional[Path]:
    for name in (stem, stem + ".gz"):
        if (folder / name).is_file():
            return folder / name
    return None


def _download(stem: str, folder: Path) -> Path:
    """Fetch ``stem.gz`` from the first mirror that answers; keep it only if its md5 matches."""
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / f"{stem}.gz"
    errors = []
    for mirror in MIRRORS:
        try:
            with urllib.request.urlopen(mirror + target.name, timeout=60) as response:
                payload = response.read()
        except OSError as err:
            errors.append(f"{mirror}: {err}")
            continue
        decode_idx(payload, mirror + target.name, FILES[stem])
        tmp = target.with_name(target.name + ".part")
        tmp.write_bytes(payload)
        tmp.replace(target)
        return target
    raise MnistFileError(f"could not download {target.name}: " + "; ".join(errors))


def locate(root: Optional[PathLike] = None, download: bool = True) -> Path:
    """The folder holding the four MNIST files: ``root``, ``$NEURALGRAPH_MNIST``, the user
    cache, else (when ``download``) the cache after downloading the missing files into it.

    Args:
        root: a folder to use, or ``None`` to search.
        download: download into the cache when no folder has the files.

    Returns:
        The folder.
    """
    if root is not None:
        candidates = [("root", Path(root))]
    else:
        candidates = [(ENV_VAR, Path(os.environ[ENV_VAR]))] if os.environ.get(ENV_VAR) else []
        candidates.append(("cache", CACHE_DIR))
    for origin, folder in candidates:
        missing = [stem for stem in FILES if _find(stem, folder) is None]
        if not missing:
            return folder
        if origin != "cache":
            raise MnistFileError(f"{origin} folder {folder} lacks MNIST files {missing}")
    if not download:
        raise MnistFileError(f"MNIST not found in {[str(f) for _, f in candidates]} and download=False")
    for stem in FILES:
        if _find(stem, CACHE_DIR) is None:
            _download(stem, CACHE_DIR)
    return CACHE_DIR


def load_mnist(split: str, root: Optional[PathLike] = None, download: bool = True) -> Digits:
    """All digits of the ``"train"`` (60,000) or ``"test"`` (10,000) split, md5-checked.

    Args:
        split: ``"train"`` or ``"test"``.
        root: the MNIST folder, or ``None`` (:func:`locate`).
        download: download when not found.

    Returns:
        The :class:`Digits`.
    """
    if split not in MNIST_SPLITS:
        raise ValueError(f"MNIST split {split!r}: expected one of {MNIST_SPLITS}")
    folder = locate(root, download)
    stems = [f"{_PREFIX[split]}-{kind}" for kind in ("images-idx3-ubyte", "labels-idx1-ubyte")]
    images, labels = (read_idx(_find(stem, folder), FILES[stem]) for stem in stems)
    if images.shape[1:] != (28, 28) or len(images) != len(labels):
        raise MnistFileError(f"{folder}: {split} images {images.shape} and labels {labels.shape} do not match")
    return Digits(images, labels.astype(np.int64), np.arange(len(labels)))


def load_subset(split: str, path: PathLike = SUBSET_PATH) -> Digits:
    """The digits of ``split`` in the embedded subset (``indices`` are their MNIST positions).

    Args:
        split: ``"train"`` or ``"test"``.
        path: the subset file.

    Returns:
        The :class:`Digits`.
    """
    if split not in MNIST_SPLITS:
        raise ValueError(f"MNIST split {split!r}: expected one of {MNIST_SPLITS}")
    with np.load(path) as data:
        return Digits(data[f"{split}_images"], data[f"{split}_labels"].astype(np.int64),
                      data[f"{split}_indices"].astype(np.int64))


def load_digits(split: str, source: str = "full", root: Optional[PathLike] = None) -> Digits:
    """The digits of an MNIST split, from the full set or the embedded subset.

    ``source="full"``: :func:`load_mnist`; ``"embedded"``: :func:`load_subset`.

    Args:
        split: ``"train"`` or ``"test"``.
        source: ``"full"`` or ``"embedded"``.
        root: the MNIST folder, for ``"full"``.

    Returns:
        The :class:`Digits`.
    """
    if source == "full":
        return load_mnist(split, root)
    if source == "embedded":
        return load_subset(split)
    raise ValueError(f"MNIST source {source!r}: expected 'full' or 'embedded'")


SUBSET_SIZES = {"train": 2000, "test": 500}
SUBSET_SEED = 0


def build_subset(out: PathLike = SUBSET_PATH, root: Optional[PathLike] = None,
                 sizes: dict[str, int] = SUBSET_SIZES, seed: int = SUBSET_SEED) -> Path:
    """Write the embedded subset: per split, ``sizes[split]`` digits drawn uniformly without
    replacement by ``numpy.random.default_rng(seed)``, kept in MNIST order.

    Args:
        out: the file written.
        root: the MNIST folder, or ``None``.
        sizes: digits per split.
        seed: the seed of the draw.

    Returns:
        The path written.
    """
    rng = np.random.default_rng(seed)
    arrays = {}
    for split in MNIST_SPLITS:
        digits = load_mnist(split, root)
        chosen = np.sort(rng.choice(len(digits), sizes[split], replace=False))
        arrays[f"{split}_images"] = digits.images[chosen]
        arrays[f"{split}_labels"] = digits.labels[chosen].astype(np.uint8)
        arrays[f"{split}_indices"] = chosen.astype(np.int32)
    np.savez_compressed(out, **arrays)
    return Path(out)


if __name__ == "__main__":  # python -m neuralgraph.data.mnist [MNIST_DIR]: rebuild the subset
    import sys

    print(build_subset(root=sys.argv[1] if len(sys.argv) > 1 else None))
