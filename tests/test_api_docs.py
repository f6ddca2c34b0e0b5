"""The API reference's rules, checked on the package itself (``make docs`` builds the site from them).

* Every public class and function of a public module has a docstring whose ``Args:`` section names
  each argument it takes (a class: its constructor's), with a ``Returns:`` (``Yields:``) section
  when it returns (yields) a value. Public: a module without a leading underscore in its path
  (``neuralgraph.configs`` holds config files, not an API), a name without one that the module
  defines. Methods are not checked.
* Every architecture of the registry documents each constructor argument in its class docstring,
  including the keyword options its ``**options`` pass on to ``Metanet``, which its signature
  (``inspect.signature``, ``help()``) lists and its constructor accepts.
"""
from __future__ import annotations

import ast
import enum
import importlib
import inspect
import pydoc
import re
import textwrap
from pathlib import Path

import pytest

import neuralgraph
from neuralgraph.nn import BASELINES, METANETS, Metanet

PACKAGE = Path(neuralgraph.__file__).resolve().parent

SECTION = re.compile(r"^(Args|Arguments|Parameters|Keyword Args|Keyword Arguments|Other Parameters|Attributes|"
                     r"Returns|Return|Yields|Yield|Raises|Shapes|Example|Examples|Note|Notes|Warning|Warns|"
                     r"See Also|References|Todo|Methods):\s*$")
MARKUP = re.compile(r"``.+?``|:\w+:`[^`]+`|`[^`]+`")  # literals and roles, whose colons napoleon skips
ENTRY = re.compile(r"^\**([A-Za-z_]\w*(?:\s*,\s*\**[A-Za-z_]\w*)*)\s*(?:\([^)]*\))?\s*:")


def public_modules() -> list[str]:
    """Every module of the package but private ones and the config folder, by its import name."""
    names = []
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        if not any(part.startswith("_") for part in parts) and parts[:2] != ("neuralgraph", "configs"):
            names.append(".".join(parts))
    return names


def sections(doc: str) -> dict[str, list[str]]:
    """The Google-style sections of ``doc``: title -> the section's lines, dedented by one level."""
    found: dict[str, list[str]] = {}
    current = None
    for line in inspect.cleandoc(doc).splitlines():
        if SECTION.match(line):
            current = found.setdefault(SECTION.match(line).group(1), [])
        elif current is not None and line.strip() and not line.startswith((" ", "\t")):
            current = None
        elif current is not None:
            current.append(line)
    return {title: textwrap.dedent("\n".join(lines)).splitlines() for title, lines in found.items()}


def documented_arguments(doc: str) -> tuple[set[str], str]:
    """The names the ``Args:`` (and ``Attributes:``, ``Keyword Args:``) entries of ``doc`` describe, and their text."""
    found = sections(doc)
    lines = [line for title in ("Args", "Arguments", "Parameters", "Keyword Args", "Keyword Arguments",
                                "Other Parameters", "Attributes") for line in found.get(title, [])]
    names = set()
    for line in lines:
        match = ENTRY.match(line)  # entries start unindented after dedent; descriptions continue indented
        if match:
            names.update(name.strip().lstrip("*") for name in match.group(1).split(","))
    return names, "\n".join(lines)


def returns_value(function) -> tuple[bool, bool]:
    """Whether ``function``'s own body returns a value other than None, and whether it yields."""
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(function))).body[0]
    except (OSError, TypeError, SyntaxError):
        return False, False
    returns = yields = False
    stack = list(ast.iter_child_nodes(tree))
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            continue
        if isinstance(node, ast.Return) and node.value is not None and not (
                isinstance(node.value, ast.Constant) and node.value.value is None):
            returns = True
        yields = yields or isinstance(node, (ast.Yield, ast.YieldFrom))
        stack.extend(ast.iter_child_nodes(node))
    return returns, yields


def constructor_owner(cls: type):
    """The class whose constructor ``cls(...)`` runs, when the package defines it (None for a library's, an
    enum's, a protocol's, which is never constructed): its docstring documents the arguments."""
    if issubclass(cls, enum.Enum) or getattr(cls, "_is_protocol", False):
        return None
    definers = [c for c in cls.__mro__[:-1] if {"__init__", "__new__"} & set(vars(c))]
    if not definers or not definers[0].__module__.startswith("neuralgraph"):
        return None
    return definers[0]


def own_parameters(function) -> set[str]:
    try:
        return set(inspect.signature(function).parameters) - {"self", "cls"}
    except (TypeError, ValueError):
        return set()


def problems(obj) -> list[str]:
    """What ``obj``'s docstring lacks under the rule (empty when it follows it).

    A class's arguments are those of ``inspect.signature(cls)``, documented by the class that defines
    the constructor; an argument that constructor does not take itself (a keyword option its
    ``**options`` forward) may be named in a description, as ````name````.
    """
    doc = obj.__doc__ if not inspect.isclass(obj) else vars(obj).get("__doc__")
    if not doc or not doc.strip():
        return ["no docstring"]
    if inspect.isclass(obj):
        owner = constructor_owner(obj)
        if owner is None:
            return []
        try:
            parameters = [p for p in inspect.signature(obj).parameters.values() if p.name not in ("self", "cls")]
        except (TypeError, ValueError):
            return []
        own = own_parameters(vars(owner).get("__init__") or vars(owner).get("__new__"))
        doc = vars(owner).get("__doc__") or ""
    else:
        parameters = [p for p in inspect.signature(obj).parameters.values() if p.name not in ("self", "cls")]
        own = {p.name for p in parameters}
    issues = []
    names, text = documented_arguments(doc)
    missing = [p.name for p in parameters if p.name not in names and (p.name in own or f"``{p.name}``" not in text)]
    if missing:
        issues.append(f"Args does not name {missing}")
    if not inspect.isclass(obj):
        found = sections(doc)
        returns, yields = returns_value(obj)
        if returns and not {"Returns", "Return"} & set(found):
            issues.append("no Returns section")
        if yields and not {"Yields", "Yield"} & set(found):
            issues.append("no Yields section")
        for title in ("Returns", "Return", "Yields", "Yield"):
            first = found.get(title, [""])[0] if found.get(title) else ""
            if ":" in MARKUP.sub("", first):  # napoleon reads "text: more" as a return type "text"
                issues.append(f"{title} starts with a colon-separated type: {first.strip()!r}")
    return issues


def public_objects(module_name: str) -> dict[str, object]:
    """The public classes and functions that ``module_name`` defines."""
    module = importlib.import_module(module_name)
    objects = {}
    for name, obj in vars(module).items():
        target = inspect.unwrap(obj) if callable(obj) else obj
        if name.startswith("_") or not (inspect.isclass(target) or inspect.isfunction(target)):
            continue
        if getattr(target, "__module__", None) == module_name:
            objects[name] = target
    return objects


@pytest.mark.parametrize("module_name", public_modules())
def test_public_docstrings_follow_the_rule(module_name):
    found = {name: issues for name, obj in public_objects(module_name).items() if (issues := problems(obj))}
    assert not found, f"{module_name}: " + "; ".join(f"{name}: {', '.join(issues)}" for name, issues in sorted(found.items()))


ARCHITECTURES = {**METANETS, **BASELINES}
# The smallest arguments each architecture is built with below, besides the defaults of its signature.
REQUIRED = {"statnn": {"weight_layers": 3}, "ng_gnn": {"degree_histogram": [0, 2, 1]}}


@pytest.mark.parametrize("name", sorted(ARCHITECTURES))
def test_architecture_documents_every_argument(name):
    cls = ARCHITECTURES[name]
    doc = vars(cls).get("__doc__") or ""
    names, text = documented_arguments(doc)
    own = set(inspect.signature(cls.__init__).parameters) - {"self"}
    for parameter in inspect.signature(cls).parameters.values():
        if parameter.name in own:
            assert parameter.name in names, f"{name}: Args has no entry for {parameter.name!r}"
        else:  # forwarded through **options: named where the options entry says where they go
            assert f"``{parameter.name}``" in text, f"{name}: Args does not mention the option {parameter.name!r}"
    for parameter in inspect.signature(cls.__init__).parameters.values():
        if parameter.kind is parameter.VAR_KEYWORD:
            assert parameter.name in names and "Metanet" in text, f"{name}: **{parameter.name} not documented"


@pytest.mark.parametrize("name", sorted(ARCHITECTURES))
def test_architecture_signature_is_what_the_constructor_takes(name):
    cls = ARCHITECTURES[name]
    signature = inspect.signature(cls)
    assert not any(p.kind is p.VAR_KEYWORD for p in signature.parameters.values()), signature
    if cls.chunked:
        assert {"checkpoint", "edge_chunk", "edge_dtype"} <= set(signature.parameters)
    arguments = {p.name: p.default for p in signature.parameters.values() if p.default is not p.empty}
    arguments.update(hidden_dim=8, num_layers=1, **REQUIRED.get(name, {}))
    model = cls(**arguments)  # every listed keyword reaches a constructor that takes it
    assert isinstance(model, Metanet)
    with pytest.raises(TypeError):
        cls(hidden_dim=8, num_layers=1, not_an_option=1, **REQUIRED.get(name, {}))


def test_help_shows_the_forwarded_options():
    text = pydoc.render_doc(METANETS["gmn"], renderer=pydoc.plaintext)
    header = next(line for line in text.splitlines() if line.lstrip(" |").startswith("GMN("))
    for option in ("hidden_dim", "dropout", "edge_features", "checkpoint", "edge_chunk"):
        assert option in header, header
    assert "**options" not in header
    assert "num_heads" in str(inspect.signature(METANETS["ng_t"]))
    assert "num_weight_layers" in str(inspect.signature(METANETS["dws"]))


def test_an_undocumented_argument_is_found():
    def documented(a, b):
        """Add.

        Args:
            a: first.
            b: second.

        Returns:
            The sum.
        """
        return a + b

    def undocumented(a, b):
        """Add.

        Args:
            a: first.
        """
        return a + b

    def typed_return(a):
        """Double.

        Args:
            a: a number.

        Returns:
            The double: ``2 * a``.
        """
        return 2 * a

    assert problems(documented) == []
    assert problems(undocumented) == ["Args does not name ['b']", "no Returns section"]
    assert problems(typed_return) == ["Returns starts with a colon-separated type: 'The double: ``2 * a``.'"]
