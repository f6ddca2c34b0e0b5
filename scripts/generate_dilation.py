"""Write the dilation config grids into ``neuralgraph/configs/benchmarks/dilation``.

``configs/benchmarks/dilation/<arch>_k<k>.yaml`` for every registered architecture at its declared
reference configuration, and ``configs/benchmarks/dilation/paper/<row>_k<k>.yaml``: :mod:`neuralgraph.bench.grids`
computes them; this writes them. Run from anywhere: ``python scripts/generate_dilation.py``.
"""
from pathlib import Path

from neuralgraph.bench.grids import FOLDER, dilation_grid, paper_grid

DILATION = Path(__file__).resolve().parents[1] / "neuralgraph" / "configs" / FOLDER


def main() -> None:
    for name, text in {**dilation_grid(), **paper_grid()}.items():
        path = DILATION / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        print(path)


if __name__ == "__main__":
    main()
