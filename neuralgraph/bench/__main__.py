"""A benchmark run's child process: ``python -m neuralgraph.bench --run-one RESULT FIELDS fit ...``.

Fits (``neuralgraph fit`` arguments after FIELDS), tests at the best-validation checkpoint and
writes the result fields (FIELDS: JSON ``{field: metric}``) and the run's record to RESULT
(:func:`neuralgraph.bench.runner.run_one`).
"""
import json
import sys
from pathlib import Path

from neuralgraph.bench.runner import run_one

if len(sys.argv) < 4 or sys.argv[1] != "--run-one":
    sys.exit("usage: python -m neuralgraph.bench --run-one RESULT FIELDS fit ...")
run_one(Path(sys.argv[2]), json.loads(sys.argv[3]), sys.argv[4:])
