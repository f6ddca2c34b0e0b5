"""The sharded dataset folder that every dataset writer of the package shares.

A folder holds safetensors shards (:func:`shard_name`) and a ``manifest.json`` listing each
shard's file name, its fields and its sha256, beside the settings that determine every byte and
the folder's format (:class:`FolderFormat`). A writer (:func:`open_folder`, :func:`shard_to_write`,
:func:`commit_shard`) resumes after a kill (a shard is written to ``<name>.tmp``, recorded, then
renamed), reruns byte-identically, verifies what the manifest lists and refuses files it does not
list; readers check each shard's sha256. Every error names the file.

A folder can also be written by many processes or machines at once (:class:`FolderWriter`): each
:class:`Worker` writes its share of the planned shards and records them in its own file
``worker-{i}-of-{N}.json``, never in the manifest; a merge verifies every planned shard and writes
the manifest a run alone would have written. Readers refuse a folder with unmerged worker records.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path
from typing import NamedTuple, Optional

from safetensors import SafetensorError
from safetensors.torch import load as load_safetensors

from neuralgraph.data.mnist import PathLike

MANIFEST = "manifest.json"
SPLITS = ("train", "val", "test")  # the splits of every dataset folder (MNIST itself has train and test)


class DatasetError(ValueError):
    """A dataset folder that cannot be used as is; the message names the file and field."""


class FolderFormat(NamedTuple):
    """A kind of dataset folder: the ``format`` its manifest records and the command that writes it.

    Attributes:
        name: the manifest's ``format``.
        command: the ``neuralgraph`` subcommand that writes such a folder, named by errors.
    """

    name: str
    command: str


class Worker(NamedTuple):
    """Worker ``index`` (from 0) of ``count`` sharing a folder: it writes the planned shards ``k``
    with ``k % count == index`` (round robin, so every worker gets about as many INRs or networks).

    Attributes:
        index: this worker's index, ``0 .. count - 1``.
        count: the number of workers sharing the folder.
    """

    index: int
    count: int

    @property
    def record(self) -> str:
        """Name of the file that records this worker's shards."""
        return f"worker-{self.index}-of-{self.count}.json"


WORKER_RECORD = re.compile(r"worker-(\d+)-of-(\d+)\.json")


def worker_records(out: Path) -> list[Path]:
    """The worker record files in ``out`` (none if ``out`` is not a folder).

    Args:
        out: a dataset folder.

    Returns:
        The paths of its ``worker-{i}-of-{N}.json`` files, sorted.
    """
    return sorted(p for p in out.iterdir() if WORKER_RECORD.fullmatch(p.name)) if out.is_dir() else []


def refuse_unmerged(out: Path, folder: FolderFormat) -> None:
    """One line naming the merge when ``out`` holds worker records not yet merged into its manifest.

    Args:
        out: a dataset folder.
        folder: its kind, whose command the error names.

    Raises:
        DatasetError: ``out`` holds worker records.
    """
    records = worker_records(out)
    if records:
        names = ", ".join(p.name for p in records[:3]) + ", ..." * (len(records) > 3)
        raise DatasetError(f"{out}: worker records ({names}) "
                           f"not merged into {MANIFEST}; when every worker is done, run the workers' "
                           f"`neuralgraph {folder.command}` command once more with --merge")


def shard_name(group: str, k: int) -> str:
    """File name of shard ``k`` of ``group`` (a split, or ``zoo``): ``<group>-00000.safetensors``.

    Args:
        group: a split, or ``zoo``.
        k: the shard's index in its group, from 0.

    Returns:
        The file name, the index in five digits.
    """
    return f"{group}-{k:05d}.safetensors"


def sha256_file(path: Path) -> str:
    """The sha256 of a file, as the manifest records it.

    Args:
        path: the file.

    Returns:
        Its sha256, in hexadecimal.
    """
    return hashlib.sha256(path.read_bytes()).hexdigest()


def folder_sha256(manifest: dict) -> str:
    """One name for a sharded folder's bytes: the sha256 of its shards' sha256s, in the manifest's order
    (a folder of splits: each split's shards, in the manifest's order of the splits).

    Trained data is byte-identical when rewritten on one CPU model, not necessarily across models:
    the transformer and CNN zoos are not (their training runs through ATen's and MKL's kernels, which
    torch picks by the CPU; docs/datasets.md), so benchmarks record this name with every run rather
    than trusting the folder's settings.

    Args:
        manifest: the folder's manifest.

    Returns:
        The sha256, in hexadecimal.
    """
    records = (manifest["shards"] if "shards" in manifest
               else [record for split in manifest["splits"].values() for record in split["shards"]])
    return hashlib.sha256("".join(record["sha256"] for record in records).encode()).hexdigest()


def read_manifest(root: PathLike, folder: FolderFormat) -> dict:
    """The manifest of a dataset folder of kind ``folder``; a clear error when it is missing,
    unreadable, of another format, or when worker records await their merge.

    Args:
        root: the dataset folder.
        folder: the kind of folder expected.

    Returns:
        The manifest.

    Raises:
        DatasetError: the manifest is missing, unreadable or of another format, or worker records
            await their merge.
    """
    refuse_unmerged(Path(root), folder)
    return _load_manifest(Path(root), folder)


def _load_manifest(root: Path, folder: FolderFormat) -> dict:
    path = root / MANIFEST
    try:
        manifest = json.loads(path.read_text())
    except FileNotFoundError as err:
        raise DatasetError(f"{path}: no manifest; is {root} a dataset made by `neuralgraph {folder.command}`?") from err
    except json.JSONDecodeError as err:
        raise DatasetError(f"{path}: not valid JSON ({err})") from err
    if manifest.get("format") != folder.name:
        raise DatasetError(f"{path}: format {manifest.get('format')!r}, expected {folder.name!r}")
    return manifest


def check_settings(manifest: dict, expected: dict, path: Path, source: str = "the manifest") -> None:
    """Error naming the first field of ``expected`` whose value in ``manifest`` (read from ``source``) differs.

    Args:
        manifest: the recorded settings (nested dictionaries are compared field by field).
        expected: the settings of this run.
        path: the file ``manifest`` was read from, named by the error.
        source: what ``manifest`` is, in the error.

    Raises:
        DatasetError: a field differs.
    """
    for key, value in expected.items():
        found = manifest.get(key)
        if isinstance(value, dict) and isinstance(found, dict):
            check_settings(found, value, path, source)
        elif found != value:
            raise DatasetError(f"{path}: {key} is {found!r} in {source}, but this run uses {value!r}")


def temporary(path: Path) -> Path:
    """Where ``path`` is written before its rename, so that a kill never leaves it half-written.

    Args:
        path: the file to write.

    Returns:
        ``<path>.tmp``.
    """
    return path.with_name(path.name + ".tmp")


def write_durable(path: Path, data: bytes) -> None:
    """``data`` into ``path``, flushed to disk (mode from the umask, as any file the user writes).

    Args:
        path: the file to write (replaced).
        data: its bytes.
    """
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def write_json(path: Path, data: dict) -> None:
    """``data`` as JSON into ``path``, by ``<path>.tmp`` then rename (a kill leaves the old file whole).

    Args:
        path: the file to write.
        data: the JSON object, written indented with sorted keys.
    """
    write_durable(temporary(path), (json.dumps(data, indent=1, sort_keys=True) + "\n").encode())
    os.replace(temporary(path), path)


def write_manifest(root: Path, manifest: dict) -> None:
    """Saves the manifest of a dataset folder (:func:`write_json`).

    Args:
        root: the dataset folder.
        manifest: its manifest.
    """
    write_json(root / MANIFEST, manifest)


def refuse_unowned_files(out: Path) -> None:
    """A folder without a manifest must be empty (but for a manifest a kill left half-written).

    Args:
        out: a dataset folder without a manifest.

    Raises:
        DatasetError: ``out`` holds other files.
    """
    found = sorted(p.name for p in out.iterdir() if p.name != temporary(out / MANIFEST).name)
    if found:
        raise DatasetError(f"{out}: holds {len(found)} files ({', '.join(found[:3])}{', ...' * (len(found) > 3)}) "
                           f"but no {MANIFEST}; refusing to write into it (use an empty or new folder)")


def open_folder(out: Path, folder: FolderFormat, settings: dict, **empty) -> dict:
    """The manifest to write ``out`` with (created if need be): its own, checked against
    ``settings``, else, for an empty folder, a new one holding ``settings`` and the ``empty``
    fields. Nothing is written yet.

    Args:
        out: the dataset folder (created if need be).
        folder: its kind.
        settings: the settings of this run, which an existing manifest must hold.
        **empty: the fields of a new manifest besides its format and settings (``splits={}``).

    Returns:
        The existing manifest, or a new one.

    Raises:
        DatasetError: the manifest's settings differ, worker records await their merge, or a folder
            without a manifest holds files.
    """
    out.mkdir(parents=True, exist_ok=True)
    path = out / MANIFEST
    refuse_unmerged(out, folder)
    if path.exists():
        manifest = read_manifest(out, folder)
        check_settings(manifest, settings, path)
        return manifest
    refuse_unowned_files(out)
    return {"format": folder.name, **settings, **empty}


def _verify_recorded_shard(path: Path, record: dict, source: str = "the manifest") -> None:
    """A shard ``source`` lists: finish its rename if a kill interrupted it, then check its sha256."""
    if not path.exists() and temporary(path).exists() and sha256_file(temporary(path)) == record["sha256"]:
        os.replace(temporary(path), path)
    if not path.exists():
        raise DatasetError(f"{path}: listed in {source} but missing")
    if sha256_file(path) != record["sha256"]:
        raise DatasetError(f"{path}: sha256 differs from the one in {source}; the shard is corrupt")


def shard_to_write(path: Path, recorded: dict, manifest_path: Path) -> bool:
    """Whether the planned shard ``path`` is still to be written: one the manifest lists
    (``recorded``: file name -> record) is verified instead, an unlisted existing file refused.

    Args:
        path: the planned shard.
        recorded: the recorded shards, file name -> record.
        manifest_path: the manifest (or worker record) that lists them, named by errors.

    Returns:
        True when the shard is to be written, False when it is recorded and verified.

    Raises:
        DatasetError: a recorded shard is missing or corrupt, or an unlisted file is in the way.
    """
    if path.name in recorded:
        _verify_recorded_shard(path, recorded[path.name])
        return False
    if path.exists():
        raise DatasetError(f"{path}: not listed in {manifest_path}; refusing to overwrite it "
                           "(move it away, or use another folder)")
    return True


def commit_shard(out: Path, manifest: dict, records: list, path: Path, data: bytes, **fields) -> None:
    """Write ``data`` to ``<path>.tmp``, append its record (``fields`` and sha256) to ``records``
    of ``manifest``, save the manifest, then rename: a kill at any moment is resumable.

    Args:
        out: the dataset folder.
        manifest: its manifest, saved once the record is appended.
        records: the manifest's list the shard's record is appended to.
        path: the shard.
        data: its bytes.
        **fields: what the record holds besides the file name and sha256.
    """
    write_durable(temporary(path), data)
    records.append({"file": path.name, **fields, "sha256": hashlib.sha256(data).hexdigest()})
    write_manifest(out, manifest)
    os.replace(temporary(path), path)


def read_shard(path: Path, record: dict, command: str) -> dict:
    """The tensors of a shard the manifest lists, its sha256 checked; errors name the file.

    Args:
        path: the shard.
        record: its record in the manifest.
        command: the command that writes the folder, named when an interrupted run left the shard missing.

    Returns:
        The shard's tensors, by name.

    Raises:
        DatasetError: the shard is missing, corrupt or unreadable.
    """
    if not path.exists():
        hint = f" (an interrupted {command}: rerun it to finish)" if temporary(path).exists() else ""
        raise DatasetError(f"{path}: shard listed in the manifest is missing{hint}")
    if sha256_file(path) != record["sha256"]:
        raise DatasetError(f"{path}: sha256 differs from the manifest's; the shard is corrupt or was changed")
    try:
        return load_safetensors(path.read_bytes())
    except (SafetensorError, ValueError) as err:
        raise DatasetError(f"{path}: not a readable safetensors file ({err})") from err


class FolderWriter:
    """Writes the planned shards of a folder alone, as one :class:`Worker` of many, or merges.

    Alone (``distributed`` None, no ``merge``) the manifest records each shard as it is written,
    as :func:`commit_shard` does. A worker writes only its share of the plan and records each of
    its shards (file, fields, sha256) in its own ``worker-{i}-of-{N}.json`` beside the run's
    settings and plan, by the same ``.tmp``-record-rename steps, so a killed worker resumes by
    running again and no two workers write one file; it is refused if the folder's manifest or
    another worker's record holds other settings, another plan or another worker count. A merge
    writes no shard: it verifies every planned shard the manifest does not list against the
    worker record listing it, writes the manifest a run alone would have written (shards in plan
    order), then removes the records.

    Use: :meth:`plan` every shard, in the same order in every role; :meth:`start`; then
    :meth:`commit` each shard :meth:`plan` said to write.

    Args:
        out: the dataset folder.
        folder: its kind.
        settings: the settings of this run, which the manifest and every worker record must hold.
        distributed: this process's share when it is one worker of many, or None.
        merge: merge the workers' records instead of writing shards.
        **empty: the fields of a new manifest besides its format and settings (``splits={}``).

    Raises:
        ValueError: both ``distributed`` and ``merge``, or a worker index out of range.
    """

    def __init__(self, out: Path, folder: FolderFormat, settings: dict, distributed: Optional[Worker] = None,
                 merge: bool = False, **empty):
        if distributed is not None and merge:
            raise ValueError("a merge is no worker: it takes every worker's records (no worker index)")
        if distributed is not None and not 0 <= distributed.index < distributed.count:
            raise ValueError(f"worker index {distributed.index} of {distributed.count}: "
                             f"expected 0 .. {distributed.count - 1}")
        self.out, self.folder, self.settings = out, folder, settings
        self.distributed, self.merging = distributed, merge
        self.manifest_path = out / MANIFEST
        self.planned: list[tuple[list, Path, dict]] = []  # (manifest's record list, path, fields) of each shard
        self.pending = 0
        if distributed is None and not merge:
            self.manifest = open_folder(out, folder, settings, **empty)
            return
        out.mkdir(parents=True, exist_ok=True)
        if self.manifest_path.exists():
            self.manifest = _load_manifest(out, folder)
            check_settings(self.manifest, settings, self.manifest_path)
        else:
            self.manifest = {"format": folder.name, **settings, **empty}
        self.shards: list[dict] = []  # this worker's recorded shards
        if distributed is not None and (out / distributed.record).exists():
            self.shards = self._load_record(out / distributed.record)["shards"]

    def plan(self, records: list, path: Path, **fields) -> bool:
        """Plan the next shard, ``path``, listed in ``records`` of the manifest with ``fields``; whether
        this process writes it (a shard already recorded is verified instead: alone here, as a worker
        in :meth:`start`, once the folder is checked)."""
        k = len(self.planned)
        self.planned.append((records, path, fields))
        if self.distributed is None and not self.merging:
            todo = shard_to_write(path, {s["file"]: s for s in records}, self.manifest_path)
        else:
            todo = (not self.merging and k % self.distributed.count == self.distributed.index
                    and not any(s["file"] == path.name for s in records + self.shards))
        self.pending += todo
        return todo

    def start(self) -> None:
        """After planning: save the manifest (alone), check the folder and save the worker's record
        (worker), or merge the workers' records into the manifest (merge)."""
        if self.distributed is None and not self.merging:
            write_manifest(self.out, self.manifest)
        elif self.merging:
            self._merge()
        else:
            self._check_folder()
            own = {s["file"]: s for s in self.shards}
            for records, path, _ in self.planned[self.distributed.index::self.distributed.count]:
                listed = {s["file"]: s for s in records}
                if path.name in listed:
                    _verify_recorded_shard(path, listed[path.name])
                else:
                    shard_to_write(path, own, self.out / self.distributed.record)
            if self.pending:
                self._write_record()

    def commit(self, path: Path, data: bytes) -> None:
        """Write the planned shard ``path``: ``<path>.tmp``, its record (the manifest's, or the
        worker's), then the rename."""
        records, _, fields = next(p for p in self.planned if p[1] == path)
        if self.distributed is None:
            commit_shard(self.out, self.manifest, records, path, data, **fields)
            return
        write_durable(temporary(path), data)
        self.shards.append({"file": path.name, **fields, "sha256": hashlib.sha256(data).hexdigest()})
        self._write_record()
        os.replace(temporary(path), path)

    def _plan_entries(self) -> list[dict]:
        return [{"file": path.name, **fields} for _, path, fields in self.planned]

    def _write_record(self) -> None:
        write_json(self.out / self.distributed.record,
                   {"format": self.folder.name, "worker": self.distributed.index, "workers": self.distributed.count,
                    "settings": self.settings, "plan": self._plan_entries(), "shards": self.shards})

    def _load_record(self, path: Path) -> dict:
        try:
            record = json.loads(path.read_text())
        except json.JSONDecodeError as err:
            raise DatasetError(f"{path}: not valid JSON ({err})") from err
        if record.get("format") != self.folder.name:
            raise DatasetError(f"{path}: format {record.get('format')!r}, expected {self.folder.name!r}")
        return record

    def _read_record(self, path: Path) -> dict:
        """A worker record, checked against this run: format, settings and plan."""
        record = self._load_record(path)
        check_settings(record["settings"], self.settings, path, "this worker record")
        theirs, ours = record["plan"], self._plan_entries()
        if theirs != ours:
            k = next((k for k, (a, b) in enumerate(zip(theirs, ours)) if a != b), min(len(theirs), len(ours)))
            raise DatasetError(f"{path}: plans {len(theirs)} shards, this run {len(ours)}; shard {k} is "
                               f"{theirs[k] if k < len(theirs) else None} there, {ours[k] if k < len(ours) else None} "
                               "here (another --split or --limit?)")
        return record

    def _check_folder(self) -> None:
        """Before a worker writes: every worker record agrees with this run (worker count, settings,
        plan) and, in a folder without a manifest, every other file is a planned shard."""
        planned = {path.name for _, path, _ in self.planned} | {MANIFEST}
        owned = self.manifest_path.exists()  # then, as for a run alone, only planned files are checked
        for path in sorted(self.out.iterdir()):
            name = path.name[:-len(".tmp")] if path.name.endswith(".tmp") else path.name
            match = WORKER_RECORD.fullmatch(name)
            if match and int(match.group(2)) != self.distributed.count:
                raise DatasetError(f"{path}: a record of a run of {match.group(2)} workers, this one has "
                                   f"{self.distributed.count}; run every worker with the same number of workers")
            if not match and not owned and name not in planned:
                raise DatasetError(f"{path}: not a shard this run plans; refusing to write into {self.out} "
                                   "(another --split or --limit? or use an empty or new folder)")
            if match and path.name == name:
                self._read_record(path)

    def _merge(self) -> None:
        recorded = {}  # file name -> (record path, shard entry)
        counts = set()
        for path in worker_records(self.out):
            record = self._read_record(path)
            counts.add(record["workers"])
            recorded.update({entry["file"]: (path, entry) for entry in record["shards"]})
        if len(counts) > 1:
            raise DatasetError(f"{self.out}: worker records of runs of {sorted(counts)} workers; "
                               "every worker of a folder runs with the same number of workers")
        count = counts.pop() if counts else None
        for k, (records, path, _) in enumerate(self.planned):
            listed = {s["file"]: s for s in records}
            if path.name in listed:
                _verify_recorded_shard(path, listed[path.name])
                continue
            if path.name not in recorded:
                owner = f"worker {k % count} of {count}" if count else "no worker record in the folder"
                raise DatasetError(f"{path}: planned but recorded by no worker ({owner}: run it to finish, "
                                   "then merge again)")
            record_path, entry = recorded[path.name]
            _verify_recorded_shard(path, entry, record_path.name)
            records.append(entry)
        write_manifest(self.out, self.manifest)
        for path in worker_records(self.out):
            path.unlink()
            temporary(path).unlink(missing_ok=True)
