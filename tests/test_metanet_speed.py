"""benchmarks/metanet_speed.py: the comparison with the ``nfn`` package (one row per architecture and width, or a
message), the message-passing metanetworks' automatic path against their general path, and speed.py's table."""
import argparse
import sys
from pathlib import Path

import pytest
import torch

from neuralgraph.bench import load_script, machine
from neuralgraph.graph import mlp_to_graph

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
metanet_speed = load_script(BENCHMARKS / "metanet_speed.py")

ARGS = argparse.Namespace(batch=2, num_layers=2, repeats=1, widths=[4])


def graph():
    layout = metanet_speed.LAYOUT
    return mlp_to_graph([torch.randn(ARGS.batch, o, i) for i, o in zip(layout, layout[1:])],
                        [torch.randn(ARGS.batch, o) for o in layout[1:]])


def test_comparison_rows_per_architecture_and_width():
    pytest.importorskip("nfn")
    table = metanet_speed.nfn_comparison(graph(), ARGS, torch.device("cpu"), lambda: None)
    assert sorted(table) == ["dws_C4", "nfn_hnp_C4", "nfn_np_C4"]
    for name, row in table.items():
        assert row["peer"] == metanet_speed.NFN_PEERS[name.rsplit("_C", 1)[0]]
        assert min(row["dense"], row["general"], row["nfn"]) > 0


def test_whole_metanet_rows_per_architecture_width_and_threads():
    """Encoder included on our side, nfn's 1 -> C input layer on theirs, from the same weights."""
    pytest.importorskip("nfn")
    layout = metanet_speed.LAYOUT
    weights = [torch.randn(ARGS.batch, o, i) for i, o in zip(layout, layout[1:])]
    biases = [torch.randn(ARGS.batch, o) for o in layout[1:]]
    args = argparse.Namespace(**vars(ARGS), whole_widths=[4], whole_threads=[1])
    table = metanet_speed.whole_comparison(mlp_to_graph(weights, biases), weights, biases, args, lambda: None)
    assert sorted(table) == ["dws_C4_t1", "nfn_hnp_C4_t1", "nfn_np_C4_t1"]
    for name, row in table.items():
        assert row["peer"] == metanet_speed.NFN_PEERS[name.split("_C")[0]] and row["threads"] == 1
        assert min(row["ours"], row["nfn"]) > 0


def test_cpu_description_names_the_vector_extensions(monkeypatch, tmp_path):
    flags = {"flags": "fpu sse2 avx avx2 fma avx512f avx512bw", "model name": "Some CPU"}
    monkeypatch.setattr(machine, "_cpuinfo_field", lambda prefix: flags.get(prefix, ""))
    assert machine.cpu_description().startswith("Some CPU (AVX-512+AVX2+FMA), ")
    assert machine.cpu_short() == "Some CPU, AVX-512"
    flags["flags"] = "fpu sse2"
    assert machine.cpu_isa() == "SSE only"


def test_machine_name_of_the_cpu_is_its_thread_count():
    """The results files of a CPU benchmark are named by the threads it ran on, a GPU present or not."""
    assert machine.machine_name("cpu") == f"cpu{torch.get_num_threads()}"
    if not torch.cuda.is_available():
        assert machine.machine_name() == machine.machine_name("cpu")


def test_comparison_skipped_with_a_message_without_nfn(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "nfn", None)  # import nfn raises ImportError
    assert metanet_speed.nfn_comparison(graph(), ARGS, torch.device("cpu"), lambda: None) == {}
    assert "nfn package absent: the comparison with nfn's HNPLinear/NPLinear is skipped" in capsys.readouterr().out


def test_baseline_times_the_automatic_path_against_the_general_path():
    """Same parameters on both paths give the same outputs; bfloat16 autocast is close, not equal."""
    args = argparse.Namespace(baseline_metanets=["gmn", "ng_gnn"], baseline_width=8, num_layers=2, batch=ARGS.batch,
                              repeats=1, compile=False, bf16=True)
    table = metanet_speed.baseline_comparison(graph(), args, lambda: None)
    assert sorted(table) == ["gmn", "ng_gnn"]
    for row in table.values():
        assert row["hidden_dim"] == 8 and row["difference"] < 1e-5
        assert 1e-5 < row["bf16_difference"] < 0.5
        assert min(row["new"], row["general"], row["bf16"]) > 0


def test_baseline_widths_are_the_configs():
    assert metanet_speed.config_width("gmn") == 128 and metanet_speed.config_width("ng_gnn") == 64
    with pytest.raises(FileNotFoundError, match="no config width for 'nope'"):
        metanet_speed.config_width("nope")


def test_speed_table_rows_replaced_in_place(tmp_path):
    """speed.py --only-baseline swaps its rows of an existing table and keeps every other row."""
    speed = load_script(BENCHMARKS / "speed.py")
    out = tmp_path / "speed.md"
    out.write_text("# Speed ratios\n\n| benchmark | ours | measured | baseline | measured | ratio |\n|---|---|---|---|---|---|\n"
                   "| other | x | 1 s | y | 2 s | 2.00x |\n| gmn d=8 fwd+bwd, batch 32 | automatic (dense blocks) | 1.0 graphs/s "
                   "| general path | 1.0 graphs/s | 1.00x |\n")
    meta = {"baseline": {"gmn": {"hidden_dim": 8, "new": 3.0, "general": 1.5, "bf16": 6.0}}}
    speed.write_rows(speed.baseline_rows(meta), out, 1, replace=True)
    lines = out.read_text().splitlines()
    assert "| other | x | 1 s | y | 2 s | 2.00x |" in lines
    assert [line for line in lines if line.startswith("| gmn")] == [
        "| gmn d=8 fwd+bwd, batch 32 | automatic (dense blocks) | 3.0 graphs/s | general path | 1.5 graphs/s | 2.00x |",
        "| gmn d=8 fwd+bwd, batch 32 | automatic, bf16 autocast | 6.0 graphs/s | general path | 1.5 graphs/s | 4.00x |"]
    with pytest.raises(SystemExit, match="does not exist"):
        speed.write_rows([], tmp_path / "absent.md", 1, replace=True)
