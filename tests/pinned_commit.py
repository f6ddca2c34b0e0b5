"""The ``neuralgraph`` package as of an older git commit, imported beside the working tree's, for tests that
check the current code computes what that commit's did (tests/test_dense_path.py)."""
import atexit
import importlib
import importlib.util
import io
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path
from types import ModuleType

REPO = Path(__file__).resolve().parents[1]
BASELINE_COMMIT = "77cece5"  # main before the message-passing dense path


def pinned_neuralgraph(commit: str = BASELINE_COMMIT) -> ModuleType:
    """The ``neuralgraph.nn`` package as of git ``commit``, imported beside the current one.

    ``git archive`` extracts the package into a temporary directory (removed at exit) under the
    name ``neuralgraph_<commit>``, with its own imports renamed, so its metanetworks register in
    their own ``METANETS`` and share no module with the working tree.
    """
    alias = f"neuralgraph_{re.sub(r'[^0-9A-Za-z]', '_', commit)}"
    if alias in sys.modules:
        return importlib.import_module(f"{alias}.nn")
    archive = subprocess.run(["git", "-C", str(REPO), "archive", "--format=tar", commit, "neuralgraph"],
                             capture_output=True)
    if archive.returncode:
        raise RuntimeError(f"git archive {commit} neuralgraph failed in {REPO}: {archive.stderr.decode().strip()}")
    directory = Path(tempfile.mkdtemp(prefix="neuralgraph_pinned_"))
    atexit.register(shutil.rmtree, directory, ignore_errors=True)
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        for member in tar.getmembers():
            if not member.isfile():
                continue
            target = directory / alias / Path(member.name).relative_to("neuralgraph")
            target.parent.mkdir(parents=True, exist_ok=True)
            content = tar.extractfile(member).read()
            if member.name.endswith(".py"):
                content = re.sub(rb"\bneuralgraph(?=\.)", alias.encode(), content)
            target.write_bytes(content)
    spec = importlib.util.spec_from_file_location(alias, directory / alias / "__init__.py",
                                                  submodule_search_locations=[str(directory / alias)])
    package = importlib.util.module_from_spec(spec)
    sys.modules[alias] = package
    spec.loader.exec_module(package)
    return importlib.import_module(f"{alias}.nn")
