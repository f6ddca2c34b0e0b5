"""Sphinx configuration of the neuralgraph reference site (``make docs``).

The guide pages are the Markdown files of this folder, read by MyST as they are; the API pages
(``api/*.rst``) are built by autodoc from the package's docstrings, which napoleon reads in the
Google style (``Args:``, ``Returns:``). The build runs with ``-W --keep-going``: every warning fails
it, and nitpicky mode makes every unresolved cross-reference to a ``neuralgraph`` object a warning.
"""
from __future__ import annotations

import ast
import importlib
import inspect
import os
import sys
from pathlib import Path

from docutils import nodes
from sphinx import addnodes
from sphinx.transforms import SphinxTransform
from sphinx.util import logging
from sphinx.util.nodes import make_refnode

DOCS = Path(__file__).resolve().parent
ROOT = DOCS.parent
sys.path.insert(0, str(ROOT))  # the checkout's package, also without an editable install

import neuralgraph  # noqa: E402

PACKAGE = ROOT / "neuralgraph"
API = DOCS / "api"  # generated at every build (not kept in git), from the package's modules


def public_modules() -> list[str]:
    """Every module of the package but private ones (a leading underscore) and the config folder."""
    names = []
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        if not any(part.startswith("_") for part in parts) and parts[:2] != ("neuralgraph", "configs"):
            names.append(".".join(parts))
    return names


def page_of(module: str) -> str:
    """The API page of ``module``: its subpackage (``nn``, ``graph.convert``), or ``neuralgraph`` for the
    package itself and its top-level modules."""
    parts = module.split(".")[1:]
    folder = parts if (PACKAGE.joinpath(*parts)).is_dir() else parts[:-1]
    return ".".join(folder) or "neuralgraph"


def defined_in(module, name: str) -> bool:
    """Whether ``module`` defines ``name`` itself (a class, function or assignment in its source), rather
    than importing it from the submodule that documents it."""
    obj = getattr(module, name)
    if inspect.isclass(obj) or inspect.isfunction(obj):
        return obj.__module__ == module.__name__
    tree = ast.parse(Path(module.__file__).read_text())
    return any(isinstance(target, ast.Name) and target.id == name for statement in tree.body
               if isinstance(statement, (ast.Assign, ast.AnnAssign))
               for target in (statement.targets if isinstance(statement, ast.Assign) else [statement.target]))


def api_page(page: str, modules: list[str]) -> str:
    """The reStructuredText of one API page: each module's docstring and members, a package's exports."""
    name = "neuralgraph" if page == "neuralgraph" else f"neuralgraph.{page}"
    title = f"``{name}``"
    lines = [title, "=" * len(title), ""]
    for module in sorted(modules, key=lambda m: (m != name, m)):
        if module != name:
            heading = f"``{module}``"
            lines += [heading, "-" * len(heading), ""]
        lines += [f".. automodule:: {module}", "   :members:", ""]
        imported = importlib.import_module(module)
        exports = getattr(imported, "__all__", None)
        if exports and hasattr(imported, "__path__"):  # a package: documented where each name is defined
            own = [name for name in exports if defined_in(imported, name)]
            lines[-2:] = [f"   :members: {', '.join(own)}" if own else "   :no-members:", "",
                          ".. rubric:: Exported names", ""]
            callables = [name for name in exports if callable(getattr(imported, name))]
            data = [name for name in exports if name not in callables]
            if callables:  # with the first line of each docstring
                lines += [".. autosummary::", "   :nosignatures:", ""] + [f"   {name}" for name in callables] + [""]
            if data:  # constants: a summary would be their type's docstring
                lines += ["Constants: " + ", ".join(f":data:`{name}`" for name in data) + ".", ""]
    return "\n".join(lines).rstrip() + "\n"


def write_api_pages() -> None:
    """``api/<page>.rst`` for every page of :func:`page_of` and ``api/index.rst`` listing them; a file
    is rewritten only when its text changes, and pages of removed modules are deleted."""
    pages: dict[str, list[str]] = {}
    for module in public_modules():
        pages.setdefault(page_of(module), []).append(module)
    order = sorted(pages, key=lambda page: (page != "neuralgraph", page))
    texts = {f"{page}.rst": api_page(page, pages[page]) for page in order}
    texts["index.rst"] = "\n".join(["API reference", "=============", "",
                                    "One page per subpackage; each object is documented in the module that defines it.",
                                    "", ".. toctree::", "   :maxdepth: 1", ""] + [f"   {page}" for page in order]) + "\n"
    API.mkdir(exist_ok=True)
    for stale in set(path.name for path in API.glob("*.rst")) - set(texts):
        (API / stale).unlink()
    for file, text in texts.items():
        path = API / file
        if not path.exists() or path.read_text() != text:
            path.write_text(text)


write_api_pages()
PUBLIC_MODULES = set(public_modules())
LOGGER = logging.getLogger(__name__)

project = "neuralgraph"
author = "neuralgraph contributors"
copyright = "neuralgraph contributors"
release = version = neuralgraph.__version__

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.napoleon",
    "sphinx.ext.mathjax",
    "myst_parser",
]

source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build"]
html_theme = "furo"
html_title = f"neuralgraph {release}"

# Markdown guides: GitHub-style anchors for their `page.md#section` links, and `$...$` math.
myst_heading_anchors = 4
myst_enable_extensions = ["dollarmath"]

# autodoc: each object is documented once, in the module that defines it; the packages' pages
# list what they export (autosummary tables) and link there. Every generated ``automodule`` names
# its members itself (api_page): a ``members`` default here would replace a package's explicit
# ``:members:`` list under Sphinx 9, and a package's ``__all__`` would then document every
# re-exported object a second time.
autodoc_default_options = {"show-inheritance": True, "member-order": "bysource"}
autodoc_typehints = "signature"
autodoc_preserve_defaults = True
autodoc_inherit_docstrings = False  # a method without its own docstring is not listed (torch's and Lightning's are not ours)
autosummary_generate = False
napoleon_google_docstring = True
napoleon_numpy_docstring = False
napoleon_custom_sections = ["Shapes"]

# Every reference to a neuralgraph object must resolve; references to other libraries' types
# (annotations such as torch.Tensor) have no inventory to resolve against in an offline build.
nitpicky = True
nitpick_ignore_regex = [
    ("py:.*", r"(?!neuralgraph\b).*\..*"),  # dotted names outside the package: torch.Tensor, typing.Any, ...
    ("py:.*", r"(?!neuralgraph\b)[A-Za-z_][A-Za-z0-9_]*"),  # builtins and bare external names: int, Tensor, ...
    ("py:.*", r"neuralgraph\..*\._[A-Za-z].*"),  # private bases that show-inheritance names
]


def _lookup(path: str):
    """The object named by the dotted ``path`` (a module, then attributes), or None."""
    parts = path.split(".")
    for split in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:split]))
        except ImportError:
            continue
        try:
            for name in parts[split:]:
                obj = getattr(obj, name)
        except AttributeError:
            return None
        return obj
    return None


def _documented_name(domain, obj, fallback: str) -> str | None:
    """The name under which ``obj`` is documented: its defining module's path for classes and
    functions; for other objects (data), a documented name ending like ``fallback`` bound to it."""
    if inspect.isclass(obj) or inspect.isfunction(obj) or inspect.ismethod(obj):
        name = f"{obj.__module__}.{obj.__qualname__}"
        if name in domain.objects:
            return name
    last = fallback.rsplit(".", 1)[-1]
    for name in domain.objects:
        if name.rsplit(".", 1)[-1] == last and _lookup(name) is obj:
            return name
    return None


def resolve_reexport(app, env, node, contnode):
    """Resolve a Python reference through the import path a user writes.

    ``neuralgraph.nn.METANETS`` or, inside ``neuralgraph.nn.registry``, ``Metanet``, names an object
    that is documented once, in the module that defines it (``neuralgraph.nn.registry.METANETS``,
    ``neuralgraph.nn.base.Metanet``): the reference is looked up as Python would, relative to the
    current class and module, and linked to that documentation.
    """
    if node.get("refdomain") != "py":
        return None
    target = node["reftarget"].lstrip("~.")
    module, cls = node.get("py:module"), node.get("py:class")
    candidates = [target]
    if module:
        candidates[:0] = [f"{module}.{target}"] + ([f"{module}.{cls}.{target}"] if cls else [])
    domain = env.get_domain("py")
    for candidate in candidates:
        obj = _lookup(candidate)
        if obj is None:
            continue
        name = _documented_name(domain, obj, candidate)
        if name is not None:
            entry = domain.objects[name]
            return make_refnode(app.builder, node["refdoc"], entry.docname, entry.node_id, contnode, name)
    owned = next((candidate for candidate in candidates if _is_public_object_of_package(candidate)), None)
    # nitpick_ignore_regex lets bare names pass (int, Tensor): one naming an object of the package must resolve
    # all the same; a dotted neuralgraph name is not ignored, and Sphinx warns of it itself.
    if owned is not None and not target.startswith("neuralgraph."):
        LOGGER.warning(f"py:{node.get('reftype')} reference target not documented: {node['reftarget']} "
                       f"({owned} has no docstring or is not a public name)", location=node, type="ref",
                       subtype="neuralgraph")
    return None


def _is_public_object_of_package(path: str) -> bool:
    """Whether ``path`` names a class, function or module-level constant that a public module of the
    package defines (not an import of another library's object, not a private name)."""
    obj = _lookup(path)
    if obj is None or inspect.ismodule(obj):
        return False
    if inspect.isclass(obj) or inspect.isfunction(obj):
        return obj.__module__ in PUBLIC_MODULES and not any(part.startswith("_") for part in obj.__qualname__.split("."))
    name = path.rsplit(".", 1)[-1]
    if name.startswith("_"):
        return False
    return any(vars(sys.modules[module]).get(name) is obj and defined_in(sys.modules[module], name)
               for module in PUBLIC_MODULES if module in sys.modules)


class RepositoryFileLinks(SphinxTransform):
    """A Markdown guide's link to a repository file outside ``docs/`` (``../benchmarks/results/x.md``)
    becomes a download of that file, which the build copies into the site; a link to a folder there
    points at the folder in the checkout, relative to the built page."""

    default_priority = 800

    def apply(self, **kwargs) -> None:
        source = Path(self.env.srcdir)
        for node in list(self.document.findall(addnodes.pending_xref)):
            if node.get("reftype") != "myst":
                continue
            target = node["reftarget"].split("#", 1)[0]
            if not target or target in self.env.found_docs or "://" in target:
                continue
            folder = source / Path(self.env.docname).parent
            path = next((p for p in ((folder / (target + suffix)).resolve() for suffix in ("", ".md"))
                         if p.exists()), None)
            if path is None or source in path.parents or ROOT not in path.parents:
                continue
            if path.is_file():
                link = addnodes.download_reference("", "", refdomain=None, reftype="download", refexplicit=True,
                                                   reftarget=os.path.relpath(path, folder), refdoc=self.env.docname)
            else:
                page = Path(self.app.outdir) / (self.env.docname + ".html")
                link = nodes.reference("", "", internal=False, refuri=os.path.relpath(path, page.parent) + "/")
            link += node.children
            node.replace_self(link)


def skip_tuple_fields(app, what, name, obj, skip, options):
    """NamedTuple fields are described by their class's ``Attributes:`` section, not as the generated
    "Alias for field number N" members."""
    if (getattr(obj, "__doc__", None) or "").startswith("Alias for field number"):
        return True
    return None


def setup(app):
    app.connect("autodoc-skip-member", skip_tuple_fields)
    app.add_transform(RepositoryFileLinks)
    app.connect("missing-reference", resolve_reexport)
