"""benchmarks/data_bytes.py: the same folder written twice has one sha256, recorded per machine, and the table
marks a variant that left the bytes alone."""
import json
from pathlib import Path

import pytest

from neuralgraph.bench import load_script

ROOT = Path(__file__).resolve().parents[1]
bench = load_script(ROOT / "benchmarks" / "data_bytes.py")


def test_inrs_written_twice_have_one_sha256_and_a_rerun_replaces_the_machines_rows(tmp_path):
    arguments = ["--folders", "inrs", "--variants", "as is", "written again", "--out", str(tmp_path / "bytes")]
    assert bench.main(arguments) == 0
    records = json.loads((tmp_path / "bytes.json").read_text())["records"]
    assert [r["variant"] for r in records] == ["as is", "written again"]
    assert records[0]["sha256"] == records[1]["sha256"] and len(records[0]["sha256"]) == 64
    table = (tmp_path / "bytes.md").read_text()
    assert f"| inrs | written again | `{records[0]['sha256'][:12]}` = as is |" in table
    assert "| inrs | ATen AVX2 |" not in table  # a variant no machine ran has no row

    other = {**records[0], "machine": "another CPU", "sha256": "f" * 64}
    (tmp_path / "bytes.json").write_text(json.dumps({"records": records + [other]}))
    assert bench.main(arguments[:-4] + ["as is", "--out", str(tmp_path / "bytes")]) == 0
    again = json.loads((tmp_path / "bytes.json").read_text())["records"]
    assert len(again) == 3 and sum(r["machine"] == "another CPU" for r in again) == 1
    assert "| inrs | as is | " in (tmp_path / "bytes.md").read_text() and "`ffffffffffff` |" in (tmp_path / "bytes.md").read_text()


def test_a_folder_written_without_data_files_is_an_error_naming_it(tmp_path):
    (tmp_path / "manifest.json").write_text("{}")
    with pytest.raises(FileNotFoundError, match=f"{tmp_path}: no data files were written"):
        bench.folder_bytes(tmp_path)
