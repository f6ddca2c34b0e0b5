"""``neuralgraph demo`` end to end at toy size: both runs, their table and the side-by-side PNG."""
from pathlib import Path

import yaml
from PIL import Image

from neuralgraph.cli import main
from neuralgraph.commands.demo import DEFAULT_CONFIG


def test_demo_writes_the_table_and_the_side_by_side_grid(tmp_path, capsys):
    config = yaml.safe_load(DEFAULT_CONFIG.read_text())
    config["model"]["init_args"].update(metanet_config={"num_layers": 1, "dropout": 0.0}, reference_hidden_dim=16)
    config["data"].update(root=str(tmp_path / "inrs"), limit_train=12, limit_val=6, limit_test=6)
    config["trainer"].update(max_epochs=1, enable_progress_bar=False)
    path = tmp_path / "demo.yaml"
    path.write_text(yaml.safe_dump(config))
    assert main(["demo", "--config", str(path), "--out", str(tmp_path / "runs")]) == 0
    printed = capsys.readouterr().out
    table = [line for line in printed.splitlines() if line.startswith(("| 1 |", "| 4 |"))]
    assert len(table) == 2, printed
    assert table[0].startswith("| 1 | 16 |") and not table[1].startswith("| 4 | 16 |")  # k = 4 budget-matched
    grid = Path(printed.rsplit("side by side: ", 1)[1].split()[0])
    assert grid == tmp_path / "runs" / "comparison_test.png"
    width, height = Image.open(grid).size
    # input | target | k=1 | k=4 avg, 6 test INRs of 28 x 28 at scale 3 (cells 86 x 86, header 12)
    assert (width, height) == (4 * 86 + 2, 12 + 6 * 86 + 2)
