"""docs/datasets.md, "Adding a dataset format": the documented format runs as printed, through the Python API
and the command line, and the protocol's check refuses a format that does not follow it."""
import types
from pathlib import Path

import numpy as np
import pytest
import torch

from neuralgraph.cli import main
from neuralgraph.data import formats
from neuralgraph.data.formats import FORMATS, Option, register_format
from neuralgraph.data.inr_dataset import InrDataset

DOCS = Path(__file__).resolve().parents[1] / "docs" / "datasets.md"


def documented_example() -> str:
    """The first ``python`` block after the recipe's heading."""
    section = DOCS.read_text().split("\n## Adding a dataset format\n", 1)[1]
    return section.split("```python\n", 1)[1].split("```", 1)[0]


@pytest.fixture
def registry():
    """The formats as the package registers them, restored after the test."""
    saved = dict(FORMATS)
    yield FORMATS
    FORMATS.clear()
    FORMATS.update(saved)


@pytest.fixture
def recipe(registry, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    namespace = {"__name__": "documented_example"}
    exec(compile(documented_example(), str(DOCS), "exec"), namespace)
    return namespace


def test_the_documented_format_imports_a_folder_that_inr_dataset_reads(recipe, tmp_path):
    assert FORMATS["npz-inrs"] is recipe["NpzInrs"]
    manifest = recipe["manifest"]
    assert manifest["imported"]["source_format"] == "npz-inrs" and manifest["imported"]["options"] == {}
    assert {split: entry["count"] for split, entry in manifest["splits"].items()} == {"train": 8, "val": 4, "test": 4}
    test = InrDataset(tmp_path / "npz-imported", "test")
    first = sorted((tmp_path / "npz-source" / "test").glob("*.npz"))[0]
    arrays = np.load(first)
    assert torch.equal(test.weights[1][0], torch.from_numpy(arrays["weight1"]))
    assert torch.equal(test.biases[2][0], torch.from_numpy(arrays["bias2"]))
    assert int(test.labels[0]) == int(first.stem.split("_")[0])
    assert test.convention.grid == "xy" and test.convention.output_offset == 0.5


def test_the_command_builds_the_documented_formats_flags(recipe, tmp_path, capsys):
    out = tmp_path / "by-command"
    assert main(["import-dataset", "npz-inrs", "npz-source", "--out", str(out), "--pattern", "[0-4]_*.npz",
                 "--images", "none"]) == 0
    manifest = InrDataset(out, "train")
    assert len(manifest) == 5  # labels 0..4 of the 8 training INRs
    assert "--pattern PATTERN" in " ".join(run_help(capsys).split())

    assert main(["import-dataset", "npz-inrs", "npz-source", "--out", str(tmp_path / "x"), "--steps", "86"]) == 2
    assert capsys.readouterr().err == ("neuralgraph import-dataset: error: --steps: not an option of npz-inrs "
                                       "(only of small-cnn-zoo)\n")
    assert not (tmp_path / "x").exists()


def run_help(capsys) -> str:
    with pytest.raises(SystemExit):
        main(["import-dataset", "--help"])
    return capsys.readouterr().out


def test_a_bad_source_file_is_one_line_naming_the_file_and_key(recipe, tmp_path):
    from neuralgraph.data.formats import SourceError
    from neuralgraph.data.importing import import_dataset

    bad = sorted((tmp_path / "npz-source" / "val").glob("*.npz"))[1]
    arrays = dict(np.load(bad))
    arrays["extra"] = np.zeros(3, np.float32)
    np.savez(bad, **arrays)
    with pytest.raises(SourceError, match=r"unexpected keys \['extra'\]") as error:
        import_dataset("npz-inrs", "npz-source", tmp_path / "y", images="none", progress=False)
    assert str(error.value).startswith(f"npz-source/val/{bad.name}: ") and "\n" not in str(error.value)
    assert not (tmp_path / "y").exists()  # a first import that fails leaves nothing
    with pytest.raises(ValueError, match=r"^option 'steps': not an option of npz-inrs \(its options: pattern\)$"):
        import_dataset("npz-inrs", "npz-source", tmp_path / "y", steps=(86,))


def format_like(**changes):
    """A format of the protocol, with ``changes`` (None removes an attribute)."""
    def scan(src, pattern="*.npz"):
        return {}

    attributes = {"NAME": "tiny-inrs", "KIND": "inr", "CONVENTION": {}, "scan": scan, "read": lambda entry: None,
                  "OPTIONS": (Option("pattern", str, "*.npz", "files"),), **changes}
    return types.SimpleNamespace(**{key: value for key, value in attributes.items() if value is not None})


@pytest.mark.parametrize("changes, message", [
    ({"read": None}, "format 'tiny-inrs': no read "),
    ({"CONVENTION": None}, "format 'tiny-inrs': no CONVENTION "),
    ({"KIND": "graph"}, "format 'tiny-inrs': KIND is 'graph', expected one of"),
    ({"NAME": "Tiny Inrs"}, "NAME must be lowercase words joined by '-'"),
    ({"OPTIONS": ()}, "format 'tiny-inrs': scan takes 'pattern', which OPTIONS does not declare"),
    ({"OPTIONS": (Option("pattern", str, "*", "files"),)},
     "option 'pattern' defaults to '*' in OPTIONS but to '*.npz' in scan"),
    ({"OPTIONS": (Option("pattern", str, "*.npz", "files"), Option("limit", int, 0, "n"))},
     "option 'limit' is a name the import itself takes"),
    ({"KIND": "cnn-zoo"}, "format 'tiny-inrs': no folder_settings "),
])
def test_a_format_off_the_protocol_is_refused_naming_the_attribute(registry, changes, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace("*", r"\*")):
        register_format(format_like(**changes))
    assert "tiny-inrs" not in FORMATS


def test_a_name_is_registered_once(registry):
    fmt = format_like()
    assert register_format(fmt) is fmt and register_format(fmt) is fmt
    with pytest.raises(ValueError, match="format 'tiny-inrs': another format of that name is registered"):
        register_format(format_like())
    with pytest.raises(ValueError, match="format 'dws-inrs': another format of that name is registered"):
        register_format(format_like(NAME="dws-inrs"))


def test_the_package_formats_are_its_modules():
    assert [FORMATS[fmt.NAME] for fmt in formats.MODULES] == list(formats.MODULES)
    assert {fmt.KIND for fmt in formats.MODULES} == set(formats.KINDS)
