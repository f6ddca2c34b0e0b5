"""The benchmarks' library: a benchmark as a description and the one ``main`` that runs it
(:mod:`~neuralgraph.bench.benchmark`), the fit runner and its resumable results files
(:mod:`~neuralgraph.bench.runner`), the machine description (:mod:`~neuralgraph.bench.machine`), the
published numbers (:mod:`~neuralgraph.bench.published`), the width search at a parameter budget
(:mod:`~neuralgraph.bench.widths`) and the tables' cells (:mod:`~neuralgraph.bench.tables`).

The scripts in the checkout's ``benchmarks/`` are descriptions run by it; docs/benchmarks.md
("Adding a benchmark") adds one. Importing this package imports no torch.
"""
from neuralgraph.bench.benchmark import INR_DATA, Benchmark, Data, Report, load_script, main
from neuralgraph.bench.tables import Column, Group

__all__ = ["INR_DATA", "Benchmark", "Column", "Data", "Group", "Report", "load_script", "main"]
