"""Learning curves of benchmark runs (neuralgraph/bench/curves.py): the epoch history read from CSV logs across a
resumed fit, a bad log named in one line, and the figure drawn from recorded runs."""
import importlib.util

import pytest

from neuralgraph.bench.curves import epoch_history, plot_curves


def write_log(folder, text):
    folder.mkdir(parents=True)
    (folder / "metrics.csv").write_text(text)


def test_history_joins_the_versions_of_a_resumed_fit_and_keeps_epoch_level_values(tmp_path):
    write_log(tmp_path / "version_0", "epoch,step,train/loss,val/accuracy,val/loss\n"
                                      "0,9,,0.5,1.2\n0,9,2.0,,\n1,19,,0.6,1.1\n1,19,1.5,,\n")
    # resumed from epoch 0's checkpoint: epoch 1 again (its values replace the first's), then epoch 2
    write_log(tmp_path / "version_10", "epoch,step,train/loss,val/accuracy,val/loss,test/accuracy\n"
                                       "1,19,,0.65,1.0,\n1,19,1.4,,,\n2,29,,0.7,0.9,\n2,29,1.3,,,\n3,30,,,,0.71\n")
    write_log(tmp_path / "version_2", "epoch,step,val/accuracy\n")  # a start that logged nothing
    assert epoch_history(tmp_path) == {"epoch": [0, 1, 2], "train/loss": [2.0, 1.4, 1.3],
                                       "val/accuracy": [0.5, 0.65, 0.7], "val/loss": [1.2, 1.0, 0.9]}
    assert epoch_history(tmp_path / "missing") == {}


def test_a_log_without_epochs_or_with_a_bad_value_is_named(tmp_path):
    write_log(tmp_path / "a" / "version_0", "step,val/loss\n1,0.5\n")
    with pytest.raises(ValueError, match=r"version_0/metrics.csv: no 'epoch' column"):
        epoch_history(tmp_path / "a")
    write_log(tmp_path / "b" / "version_0", "epoch,val/loss\n0,0.5\n1,oops\n")
    with pytest.raises(ValueError, match=r"version_0/metrics.csv, line 3: could not convert"):
        epoch_history(tmp_path / "b")


@pytest.mark.skipif(importlib.util.find_spec("matplotlib") is None, reason="the bench extra (matplotlib)")
def test_the_figure_draws_the_runs_with_a_history(tmp_path):
    runs = [{"arch": "gmn", "seed": s, "history": {"epoch": [0, 1], "val/accuracy": [0.5, 0.6 + s / 10]}}
            for s in range(3)] + [{"arch": "dws", "seed": 0}]
    assert plot_curves(runs, "val/accuracy", "title", tmp_path / "curves.png", scale=100) == 3
    assert (tmp_path / "curves.png").read_bytes().startswith(b"\x89PNG")
