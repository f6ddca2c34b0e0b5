"""The shared cells of the benchmark tables: where a row ran and how long, when its seeds ran on different threads."""
from neuralgraph.bench.tables import Group, machine_cell, wall_minutes


def group(*runs: dict) -> Group:
    return Group("gmn", 1, list(runs), report=None)


XEON, EPYC = "Intel(R) Xeon(R) Processor, AVX-512", "AMD EPYC, AVX2"


def test_machine_cell_names_each_cpu_with_its_thread_counts():
    cell = machine_cell(group({"cpu": XEON, "threads": 2}, {"cpu": XEON, "threads": 1}, {"cpu": EPYC, "threads": 2}))
    assert cell == f"{EPYC} (2 threads); {XEON} (1, 2 threads)"
    assert machine_cell(group({"cpu": XEON, "threads": 1})) == f"{XEON} (1 thread)"
    assert machine_cell(group({"wall_s": 1.0})) == "CPU not recorded"


def test_wall_minutes_is_one_mean_for_one_thread_count():
    assert wall_minutes(group({"threads": 2, "wall_s": 60.0}, {"threads": 2, "wall_s": 180.0})) == "2.0"
    assert wall_minutes(group({"wall_s": 90.0, "resumed": True})) == "1.5 (resumed)"


def test_wall_minutes_splits_runs_on_different_thread_counts():
    cell = wall_minutes(group({"threads": 2, "wall_s": 600.0}, {"threads": 1, "wall_s": 900.0},
                              {"threads": 1, "wall_s": 1500.0, "resumed": True}))
    assert cell == "15.0 (1 thread); 10.0 (2 threads) (seed ? resumed, not in the mean)"


def test_a_resumed_run_is_left_out_of_a_mean_of_whole_runs_and_named():
    cell = wall_minutes(group({"seed": 0, "wall_s": 6000.0}, {"seed": 1, "wall_s": 6120.0},
                              {"seed": 2, "wall_s": 600.0, "resumed": True}))
    assert cell == "101.0 (seed 2 resumed, not in the mean)"
    cell = wall_minutes(group({"seed": 0, "wall_s": 60.0}, {"seed": 2, "wall_s": 6.0, "resumed": True},
                              {"seed": 1, "wall_s": 6.0, "resumed": True}))
    assert cell == "1.0 (seeds 1, 2 resumed, not in the mean)"
