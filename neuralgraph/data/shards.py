"""The sharded dataset folder that every dataset writer of the package shares.

A folder holds safetensors shards (:func:`shard_name`) and a ``manifest.json`` listing each
shard's file name, its fields and its sha256, beside the settings that determine every byte and
the folder's format (:class:`FolderFormat`). A writer (:func:`open_folder`, :func:`shard_to_write`,
:func:`commit_shard`) resumes after a kill (a shard is written to ``<name>.tmp``, recorded, then
renamed), reruns byte-identically, verifies what the manifest lists and refuses files it does not
list; readers check each shard's sha256. Every error names the file.
"""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import NamedTuple

from safetensors import SafetensorError
from safetensors.torch import load as load_safetensors

from neuralgraph.data.mnist import PathLike

MANIFEST = "manifest.json"
SPLITS = ("train", "val", "test")  # the splits of every dataset folder (MNIST itself has train and test)


class DatasetError(ValueError):
    """A dataset folder that cannot be used as is; the message names the file and field."""


class FolderFormat(NamedTuple):
    """A kind of dataset folder: the ``format`` its manifest records and the command that writes it."""

    name: str
    command: str


def shard_name(group: str, k: int) -> str:
    """File name of shard ``k`` of ``group`` (a split, or ``zoo``): ``<group>-00000.safetensors``."""
    return f"{group}-{k:05d}.safetensors"


def sha256_file(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def read_manifest(root: PathLike, folder: FolderFormat) -> dict:
    """The manifest of a dataset folder of kind ``folder``; a clear error when it is missing,
    unreadable or of another format."""
    path = Path(root) / MANIFEST
    try:
        manifest = json.loads(path.read_text())
    except FileNotFoundError as err:
        raise DatasetError(f"{path}: no manifest; is {root} a dataset made by `neuralgraph {folder.command}`?") from err
    except json.JSONDecodeError as err:
        raise DatasetError(f"{path}: not valid JSON ({err})") from err
    if manifest.get("format") != folder.name:
        raise DatasetError(f"{path}: format {manifest.get('format')!r}, expected {folder.name!r}")
    return manifest


def check_settings(manifest: dict, expected: dict, path: Path) -> None:
    """Error naming the first field of ``expected`` whose manifest value differs."""
    for key, value in expected.items():
        found = manifest.get(key)
        if isinstance(value, dict) and isinstance(found, dict):
            check_settings(found, value, path)
        elif found != value:
            raise DatasetError(f"{path}: {key} is {found!r} in the manifest, but this run uses {value!r}")


def temporary(path: Path) -> Path:
    return path.with_name(path.name + ".tmp")


def write_durable(path: Path, data: bytes) -> None:
    """``data`` into ``path``, flushed to disk (mode from the umask, as any file the user writes)."""
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def write_manifest(root: Path, manifest: dict) -> None:
    path = root / MANIFEST
    write_durable(temporary(path), (json.dumps(manifest, indent=1, sort_keys=True) + "\n").encode())
    os.replace(temporary(path), path)


def refuse_unowned_files(out: Path) -> None:
    """A folder without a manifest must be empty (but for a manifest a kill left half-written)."""
    found = sorted(p.name for p in out.iterdir() if p.name != temporary(out / MANIFEST).name)
    if found:
        raise DatasetError(f"{out}: holds {len(found)} files ({', '.join(found[:3])}{', ...' * (len(found) > 3)}) "
                           f"but no {MANIFEST}; refusing to write into it (use an empty or new folder)")


def open_folder(out: Path, folder: FolderFormat, settings: dict, **empty) -> dict:
    """The manifest to write ``out`` with (created if need be): its own, checked against
    ``settings``, else, for an empty folder, a new one holding ``settings`` and the ``empty``
    fields. Nothing is written yet."""
    out.mkdir(parents=True, exist_ok=True)
    path = out / MANIFEST
    if path.exists():
        manifest = read_manifest(out, folder)
        check_settings(manifest, settings, path)
        return manifest
    refuse_unowned_files(out)
    return {"format": folder.name, **settings, **empty}


def _verify_recorded_shard(path: Path, record: dict) -> None:
    """A shard the manifest lists: finish its rename if a kill interrupted it, then check its sha256."""
    if not path.exists() and temporary(path).exists() and sha256_file(temporary(path)) == record["sha256"]:
        os.replace(temporary(path), path)
    if not path.exists():
        raise DatasetError(f"{path}: listed in the manifest but missing")
    if sha256_file(path) != record["sha256"]:
        raise DatasetError(f"{path}: sha256 differs from the manifest's; the shard is corrupt")


def shard_to_write(path: Path, recorded: dict, manifest_path: Path) -> bool:
    """Whether the planned shard ``path`` is still to be written: one the manifest lists
    (``recorded``: file name -> record) is verified instead, an unlisted existing file refused."""
    if path.name in recorded:
        _verify_recorded_shard(path, recorded[path.name])
        return False
    if path.exists():
        raise DatasetError(f"{path}: not listed in {manifest_path}; refusing to overwrite it "
                           "(move it away, or use another folder)")
    return True


def commit_shard(out: Path, manifest: dict, records: list, path: Path, data: bytes, **fields) -> None:
    """Write ``data`` to ``<path>.tmp``, append its record (``fields`` and sha256) to ``records``
    of ``manifest``, save the manifest, then rename: a kill at any moment is resumable."""
    write_durable(temporary(path), data)
    records.append({"file": path.name, **fields, "sha256": hashlib.sha256(data).hexdigest()})
    write_manifest(out, manifest)
    os.replace(temporary(path), path)


def read_shard(path: Path, record: dict, command: str) -> dict:
    """The tensors of a shard the manifest lists, its sha256 checked; errors name the file."""
    if not path.exists():
        hint = f" (an interrupted {command}: rerun it to finish)" if temporary(path).exists() else ""
        raise DatasetError(f"{path}: shard listed in the manifest is missing{hint}")
    if sha256_file(path) != record["sha256"]:
        raise DatasetError(f"{path}: sha256 differs from the manifest's; the shard is corrupt or was changed")
    try:
        return load_safetensors(path.read_bytes())
    except (SafetensorError, ValueError) as err:
        raise DatasetError(f"{path}: not a readable safetensors file ({err})") from err
