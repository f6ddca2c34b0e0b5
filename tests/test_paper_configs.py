"""configs/benchmarks/dilation/paper: every row of the paper's dilation table builds at its published size."""
from pathlib import Path

import pytest
import yaml

from neuralgraph.bench import load_script
from neuralgraph.bench.widths import inr_spec
from neuralgraph.nn.budget import count_trainable
from neuralgraph.training.tasks import InrEditing

ROOT = Path(__file__).resolve().parents[1]
PAPER = ROOT / "configs" / "benchmarks" / "dilation" / "paper"
PAPER_ROWS = load_script(ROOT / "benchmarks" / "dilation.py").PAPER_ROWS


def test_every_row_has_every_k():
    assert {c.stem for c in PAPER.glob("*.yaml")} == {f"{row}_k{k}" for row in PAPER_ROWS for k in (1, 2, 4, 8)}


@pytest.mark.parametrize("row", PAPER_ROWS)
def test_row_builds_and_oce_stays_within_the_k1_budget(row, capsys):
    """The task built from the config and the INR data's spec (what ``neuralgraph fit`` starts with); k = 8 no
    larger than k = 1."""
    counts = {}
    for k in (1, 8):
        init_args = yaml.safe_load((PAPER / f"{row}_k{k}.yaml").read_text())["model"]["init_args"]
        task = InrEditing(**init_args, spec=inr_spec().to_dict())
        counts[k] = count_trainable(task)
    assert 0 < counts[8] <= counts[1]
    assert f"budget match: {init_args['metanet']} k=8" in capsys.readouterr().out
