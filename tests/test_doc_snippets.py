"""Every ```python block of README.md and docs/ runs as written.

The blocks of one page run in order in one namespace (a page may build on its earlier blocks), in a
fresh interpreter per page, so that what a page registers (a metanetwork, a converter) or seeds stays
out of the other tests. A block that raises fails its page's test with the page and line it starts at.
Shell commands belong in ```bash blocks, which are not run.
"""
import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LANGUAGES = {"python", "py", "python3"}
FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>```+|~~~+)[ \t]*(?P<info>[^`\s]*)[^`]*$")

RUNNER = r"""
import json, sys, traceback
path, blocks = sys.argv[1], json.loads(sys.stdin.read())
namespace = {"__name__": "__main__", "__file__": path}
for line, code in blocks:
    try:
        exec(compile("\n" * (line - 1) + code, path, "exec"), namespace)
    except BaseException:
        print(f"the block of {path} at line {line - 1} raised:", file=sys.stderr)
        traceback.print_exc()
        sys.exit(1)
print(f"{len(blocks)} blocks ran")
"""


def python_blocks(text: str) -> list[tuple[int, str]]:
    """``(line of the block's first code line, code)`` of every python fenced block, dedented.

    A fence may be indented (a block inside a list item); it closes at the first fence line of the
    same character and at least its length, as CommonMark reads it. An unclosed fence is an error."""
    blocks, lines, i = [], text.splitlines(), 0
    while i < len(lines):
        opening = FENCE.match(lines[i])
        if not opening:
            i += 1
            continue
        fence, start = opening["fence"], i + 1
        end = start
        while end < len(lines):
            closing = FENCE.match(lines[end])
            if (closing and not closing["info"] and closing["fence"][0] == fence[0]
                    and len(closing["fence"]) >= len(fence)):
                break
            end += 1
        else:
            raise ValueError(f"the fence opened at line {start} is never closed")
        if opening["info"].lower() in LANGUAGES:
            blocks.append((start + 1, textwrap.dedent("\n".join(lines[start:end])) + "\n"))
        i = end + 1
    return blocks


def pages() -> list[Path]:
    docs = [p for p in sorted((ROOT / "docs").rglob("*.md")) if "_build" not in p.relative_to(ROOT / "docs").parts]
    return [ROOT / "README.md", *docs]


PAGES_WITH_CODE = [p for p in pages() if python_blocks(p.read_text(encoding="utf-8"))]


@pytest.mark.parametrize("page", PAGES_WITH_CODE, ids=[str(p.relative_to(ROOT)) for p in PAGES_WITH_CODE])
def test_every_python_block_of_the_page_runs(page, tmp_path):
    blocks = python_blocks(page.read_text(encoding="utf-8"))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    result = subprocess.run(
        [sys.executable, "-c", RUNNER, str(page)], input=json.dumps(blocks), text=True,
        capture_output=True, cwd=tmp_path, env=env, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-6000:]
    assert result.stdout.strip().endswith(f"{len(blocks)} blocks ran")


def test_the_readme_has_a_quickstart_that_is_run():
    assert ROOT / "README.md" in PAGES_WITH_CODE


def test_the_reader_of_fences():
    text = "a\n```python\nx = 1\n```\n\n- item\n\n  ```python\n  y = x\n  ```\n```bash\nls\n```\n````\n```python\n````\n"
    assert python_blocks(text) == [(3, "x = 1\n"), (9, "y = x\n")]
    with pytest.raises(ValueError, match="line 2"):
        python_blocks("a\n```python\nx = 1\n")


def test_a_block_that_raises_fails(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("```python\nx = 1\n```\n\n```python\nraise RuntimeError(x)\n```\n")
    result = subprocess.run([sys.executable, "-c", RUNNER, str(page)], input=json.dumps(python_blocks(page.read_text())),
                            text=True, capture_output=True, timeout=60)
    assert result.returncode == 1
    assert "at line 5 raised" in result.stderr and f'File "{page}", line 6' in result.stderr
