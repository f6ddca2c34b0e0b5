"""The README's results table against the tables it links: every number it quotes for a system is in
that system's row of a linked ``benchmarks/results/*.md`` (at the README's precision), so a rerun that
moves a mean cannot leave the headline stale."""
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

#: The display names the README uses, each with the system id of the results tables.
SYSTEMS = {"ScaleGMN-B": "scalegmn_b", "ScaleGMN": "scalegmn", "NG-GNN": "ng_gnn", "NG-T": "ng_t", "GMN": "gmn",
           "DWS": "dws", "NFT": "nft", "NFN-HNP": "nfn_hnp", "NFN-NP": "nfn_np", "StatNN": "statnn",
           "ProbeGen": "probegen", "probing": "probe"}
#: Rows that stand for a system in a table that runs it on part of its data (the CNN zoo runs the
#: ScaleGMN variants on its tanh networks).
VARIANTS = {"scalegmn_b": ("scalegmn_b_tanh",), "scalegmn": ("scalegmn_tanh",)}
NAME = re.compile(r"(?<![\w-])(" + "|".join(sorted(map(re.escape, SYSTEMS), key=len, reverse=True)) + r")(?![\w-])")
DECIMAL = re.compile(r"(?<![\w.-])\d+\.\d+(?![\w.])")


def results_rows(readme: str) -> list[tuple[str, str, list[Path]]]:
    """``(benchmark, measured, linked tables)`` of every row of the README's results table."""
    section = readme.split("\n## Results\n", 1)[1].split("\n## ", 1)[0]
    rows = []
    for line in section.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        links = re.findall(r"\]\((benchmarks/results/[^)]+\.md)\)", line)
        if len(cells) == 5 and links:
            rows.append((cells[0], cells[2], [ROOT / link for link in links]))
    return rows


def quoted_numbers(measured: str) -> list[tuple[str, str]]:
    """``(system id, number as written)`` for every decimal of a measured cell, each belonging to the
    nearest system name before it."""
    names = list(NAME.finditer(measured))
    quoted = []
    for name, following in zip(names, names[1:] + [None]):
        segment = measured[name.end():following.start() if following else len(measured)]
        quoted += [(SYSTEMS[name.group(1)], number) for number in DECIMAL.findall(segment)]
    return quoted


def system_numbers(table: str, system: str) -> list[str]:
    """Every decimal (as written) in the rows of a markdown table whose cell names ``system``."""
    names = {system, *VARIANTS.get(system, ())}
    numbers = []
    for line in table.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if line.startswith("|") and names & set(cells):
            numbers += DECIMAL.findall(line)
    return numbers


def decimals(number: str) -> int:
    return len(number.split(".")[1])


def matches(written: str, values: list[str]) -> bool:
    """Whether a number of the table can be the same mean as the README's: within the two roundings
    (half a unit of each one's last digit)."""
    return any(abs(float(value) - float(written)) <= 0.5 * 10 ** -decimals(written) + 0.5 * 10 ** -decimals(value)
               + 1e-12 for value in values)


README = (ROOT / "README.md").read_text()
ROWS = results_rows(README)


def test_the_results_table_is_found_with_its_links():
    assert len(ROWS) >= 8
    for benchmark, _, tables in ROWS:
        for table in tables:
            assert table.is_file(), f"README results row {benchmark!r} links {table.relative_to(ROOT)}, which is missing"


@pytest.mark.parametrize("benchmark, measured, tables", ROWS, ids=[row[0][:40] for row in ROWS])
def test_every_quoted_number_is_in_its_systems_row(benchmark, measured, tables):
    quoted = quoted_numbers(measured)
    assert quoted, f"README results row {benchmark!r} quotes no system's number"
    texts = [table.read_text() for table in tables]
    for system, written in quoted:
        values = [value for text in texts for value in system_numbers(text, system)]
        assert values, f"README results row {benchmark!r}: no row of {system} in {[t.name for t in tables]}"
        assert matches(written, values), (
            f"README results row {benchmark!r} quotes {system} {written}, which no number of its rows in "
            f"{[t.name for t in tables]} rounds to")


def test_a_stale_number_is_caught():
    table = ("| system | tau |\n|---|---|\n| ng_gnn | 0.721 ± 0.021 (2) |\n| ng_t | 0.705 ± 0.035 (2) |\n"
             "| gmn | 3.705 |\n")
    assert quoted_numbers("NG-GNN 0.721 and NG-T 0.705 (seeds 0-1), probing 0.684 at 1e-3") == [
        ("ng_gnn", "0.721"), ("ng_t", "0.705"), ("probe", "0.684")]
    assert matches("0.72", system_numbers(table, "ng_gnn"))
    assert not matches("0.754", system_numbers(table, "ng_gnn"))
    assert not matches("0.721", system_numbers(table, "ng_t"))
    assert matches("3.70", system_numbers(table, "gmn")) and matches("3.71", system_numbers(table, "gmn"))
    assert not matches("3.72", system_numbers(table, "gmn"))
