"""Dataset folders written by many workers (torchrun, a SLURM array, --worker-index) and merged:
the merge is byte-identical to a run alone, a killed worker resumes, an unmerged or incomplete
folder is refused in one line, and a worker of other settings is refused naming the field."""
import argparse
import json
import os
import subprocess
import sys

import pytest

from neuralgraph.cli import build_parser, main
from neuralgraph.commands import make_cnn_zoo
from neuralgraph.commands.distributed import worker_of
from neuralgraph.data import DatasetError, GenerationSettings, InrDataset, make_inrs
from neuralgraph.data.cnn_zoo import CnnZooDataset
from neuralgraph.data.shards import Worker
from neuralgraph.inr import FitConfig
from source_formats import write_small_cnn_zoo

LAUNCHER_VARIABLES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "SLURM_ARRAY_TASK_ID",
                      "SLURM_ARRAY_TASK_MIN", "SLURM_ARRAY_TASK_COUNT")
# worker i of 3 as each launcher names it: torchrun, a SLURM array --array=10-12, the options
LAUNCHERS = (({"RANK": "0", "WORLD_SIZE": "3", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "3"}, []),
             ({"SLURM_ARRAY_TASK_ID": "11", "SLURM_ARRAY_TASK_MIN": "10", "SLURM_ARRAY_TASK_COUNT": "3"}, []),
             ({}, ["--worker-index", "2", "--num-workers", "3"]))
MAKE_INRS = ["make-inrs", "--source", "embedded", "--split", "all", "--limit", "3", "--shard-size", "2", "--steps", "5"]
ZOO = ["make-cnn-zoo", "--networks", "5", "--shard-size", "1", "--epochs", "1", "--channels", "4", "--train-size", "16",
       "--test-size", "16", "--batch-size", "16", "--source", "embedded"]


def files_of(root):
    return {p.name: p.read_bytes() for p in sorted(root.iterdir())}


def environment(extra):
    env = {k: v for k, v in os.environ.items() if k not in LAUNCHER_VARIABLES}
    return {**env, **extra}


def start(arguments, env=None):
    return subprocess.Popen([sys.executable, "-m", "neuralgraph.cli", *arguments], env=environment(env or {}),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finish(process):
    stdout, stderr = process.communicate(timeout=300)
    assert process.returncode == 0, stderr
    return stdout


def check_records(out, workers=3):
    """Each planned shard is in exactly one worker's record, and no worker wrote the manifest."""
    assert not (out / "manifest.json").exists()
    records = [json.loads((out / f"worker-{i}-of-{workers}.json").read_text()) for i in range(workers)]
    plan = [s["file"] for s in records[0]["plan"]]
    for i, record in enumerate(records):
        assert [s["file"] for s in record["shards"]] == plan[i::workers]


def test_three_make_inrs_workers_merge_to_the_bytes_of_a_run_alone(tmp_path):
    alone, out = tmp_path / "alone", tmp_path / "out"
    processes = [start(MAKE_INRS + ["--out", str(alone), "--threads", "1"])]
    processes += [start(MAKE_INRS + ["--out", str(out), "--threads", "1", *options], env) for env, options in LAUNCHERS]
    finish(processes[0])
    for i, process in enumerate(processes[1:]):
        assert f"worker {i} of 3" in finish(process)
    check_records(out)
    with pytest.raises(DatasetError, match=r"worker records \(worker-0-of-3.json, .*\) not merged .* with --merge"):
        InrDataset(out, "train")
    assert main(MAKE_INRS + ["--out", str(out), "--merge"]) == 0
    assert files_of(out) == files_of(alone)
    assert len(InrDataset(out, "val")) == 3
    assert main(MAKE_INRS + ["--out", str(out), "--merge"]) == 0  # a merged folder merges again as is
    assert files_of(out) == files_of(alone)


def test_a_killed_zoo_worker_resumes_and_a_merge_missing_a_shard_is_one_line(tmp_path, capsys):
    alone, out = tmp_path / "alone", tmp_path / "out"
    assert main(ZOO + ["--out", str(alone)]) == 0
    for i in (0, 1):
        assert main(ZOO + ["--out", str(out), "--worker-index", str(i), "--num-workers", "3"]) == 0
    capsys.readouterr()
    assert main(ZOO + ["--out", str(out), "--merge"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "zoo-00002.safetensors: planned but recorded by no worker (worker 2 of 3" in err
    with pytest.raises(DatasetError, match="not merged into manifest.json; .* --merge"):
        CnnZooDataset(out)
    assert main(ZOO + ["--out", str(out)]) == 2  # a run alone does not write into an unmerged folder
    assert "--merge" in capsys.readouterr().err
    # worker 1 killed twice: after writing zoo-00004's .tmp (not recorded), after recording zoo-00001 (not renamed)
    record_path = out / "worker-1-of-3.json"
    record = json.loads(record_path.read_text())
    lost = record["shards"].pop()
    record_path.write_text(json.dumps(record))
    for name in (lost["file"], record["shards"][0]["file"]):
        (out / name).rename(out / (name + ".tmp"))
    assert main(ZOO + ["--out", str(out), "--worker-index", "1", "--num-workers", "3"]) == 0
    assert main(ZOO + ["--out", str(out), "--worker-index", "2", "--num-workers", "3"]) == 0
    assert main(ZOO + ["--out", str(out), "--merge"]) == 0
    assert files_of(out) == files_of(alone)
    assert len(CnnZooDataset(out, "test")) == 1


def test_a_worker_or_merge_of_other_settings_is_refused_naming_the_field(tmp_path):
    out = tmp_path / "out"
    assert main(ZOO + ["--out", str(out), "--worker-index", "1", "--num-workers", "3"]) == 0
    refusals = {
        ("--seed", "1", "--worker-index", "0", "--num-workers", "3"): "seed is 0 in this worker record, but this run uses 1",
        ("--worker-index", "0", "--num-workers", "2"): "worker-1-of-3.json: a record of a run of 3 workers, this one has 2",
        ("--networks", "6", "--merge"): "networks is 5 in this worker record, but this run uses 6",
        ("--shard-size", "2", "--merge"): "shard_size is 1 in this worker record",
    }
    run = lambda *options: make_cnn_zoo.run(build_parser(ZOO[0]).parse_args(ZOO + ["--out", str(out), *options]))
    for options, message in refusals.items():
        with pytest.raises(DatasetError, match=message):
            run(*options)
    (out / "notes.txt").write_text("not a shard")
    with pytest.raises(DatasetError, match="notes.txt: not a shard this run plans"):
        run("--worker-index", "0", "--num-workers", "3")


def test_three_import_workers_merge_to_the_bytes_of_an_import_alone(tmp_path):
    src = tmp_path / "src"
    write_small_cnn_zoo(src, networks=12)
    alone, out = tmp_path / "alone", tmp_path / "out"
    command = ["import-dataset", "small-cnn-zoo", str(src), "--shard-size", "2", "--out"]
    processes = [start(command + [str(out), *options], env) for env, options in LAUNCHERS]
    assert main(command + [str(alone)]) == 0
    for process in processes:
        finish(process)
    check_records(out)
    assert main(command + [str(out), "--merge"]) == 0
    assert files_of(out) == files_of(alone)
    assert len(CnnZooDataset(out, "train")) == 4


def test_the_worker_comes_from_the_options_or_the_launchers_environment():
    args = lambda index=None, count=None, merge=False: argparse.Namespace(worker_index=index, num_workers=count,
                                                                         merge=merge)
    assert worker_of(args(), {}) is None
    assert worker_of(args(), {"RANK": "5", "WORLD_SIZE": "8"}) == (5, 8)
    assert worker_of(args(), {"LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2"}) == (1, 2)
    assert worker_of(args(), {"SLURM_ARRAY_TASK_ID": "3", "SLURM_ARRAY_TASK_COUNT": "4"}) == (3, 4)
    assert worker_of(args(), {"SLURM_ARRAY_TASK_ID": "1", "SLURM_ARRAY_TASK_COUNT": "1"}) is None  # alone
    assert worker_of(args(1, 2), {"RANK": "5", "WORLD_SIZE": "8"}) == (1, 2)  # the options win
    assert worker_of(args(merge=True), {"RANK": "5", "WORLD_SIZE": "8"}) is None
    refusals = (
        (args(), {"RANK": "1", "WORLD_SIZE": "2", "SLURM_ARRAY_TASK_ID": "0", "SLURM_ARRAY_TASK_COUNT": "2"},
         r"both \$RANK/\$WORLD_SIZE \(torchrun\) and \$SLURM_ARRAY_TASK_ID/\$SLURM_ARRAY_TASK_COUNT"),
        (args(), {"SLURM_ARRAY_TASK_ID": "8", "SLURM_ARRAY_TASK_COUNT": "4"}, r"worker 8 of 4, expected 0 \.\. 3"),
        (args(), {"RANK": "x", "WORLD_SIZE": "2"}, r"\$RANK='x': expected an integer"),
        (args(3, 3), {}, r"--worker-index/--num-workers: worker 3 of 3"),
        (args(1), {}, "--worker-index and --num-workers go together"),
        (args(0, 2, merge=True), {}, "--merge merges the records of every worker"),
    )
    for namespace, environ, message in refusals:
        with pytest.raises(ValueError, match=message):
            worker_of(namespace, environ)


def test_workers_add_a_split_to_a_folder_a_run_alone_began(tmp_path):
    settings = GenerationSettings(fit=FitConfig(steps=5), source="embedded", shard_size=1)
    alone, out = tmp_path / "alone", tmp_path / "out"
    for root in (alone, out):
        make_inrs(root, ("train",), 2, settings, progress=False)
    make_inrs(alone, ("val",), 3, settings, progress=False)
    for i in (1, 0):
        make_inrs(out, ("val",), 3, settings, progress=False, distributed=Worker(i, 2))
    with pytest.raises(DatasetError, match="not merged into manifest.json"):
        InrDataset(out, "train")
    make_inrs(out, ("val",), 3, settings, progress=False, merge=True)
    assert files_of(out) == files_of(alone)
