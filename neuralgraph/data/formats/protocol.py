"""What a dataset format is: the attributes an importer, the ``import-dataset`` command and a
folder's reader take from it, and the check that a format has them.

A format is a module (or any object) with

* ``NAME``: its name on the command line (``dws-inrs``);
* ``KIND``: what its import writes, one of :data:`KINDS`: the importer
  (:func:`~neuralgraph.data.importing.import_dataset`) is chosen by the kind alone;
* ``OPTIONS``: its :class:`Option` s, the keywords of its ``scan`` (with the same defaults), from
  which ``neuralgraph import-dataset`` builds its flags;
* ``scan(src, **options)``: what the source folder holds, split by split;
* ``read``: the weights of what ``scan`` listed, checked;

and what its kind needs besides (:data:`KIND_ATTRIBUTES`):

* ``"inr"``: ``scan`` returns ``{split: [InrEntry, ...]}``; ``read(entry, layout=None)`` returns
  ``(weights, biases, label)`` in ``nn.Linear`` layout; ``CONVENTION`` is the
  :class:`~neuralgraph.inr.SirenConvention` of its INRs as a dict (without ``layout``). The folder
  is an :class:`~neuralgraph.data.inr_dataset.InrDataset`'s.
* ``"cnn-zoo"``: ``scan`` returns a source whose ``splits`` maps each split to its entries (a
  sequence that slices); ``read(source, entries, advance)`` returns one shard's tensors (every
  layer of :data:`neuralgraph.data.cnn_zoo.LAYERS` as ``<layer>.weight`` and ``<layer>.bias``,
  ``test_accuracy``, ``epoch``, ``network``, ``activation``), calling ``advance(n)`` as it reads
  ``n`` entries; ``folder_settings(source)`` returns the manifest's fields that describe the
  networks. The folder is a :class:`~neuralgraph.data.cnn_zoo.CnnZooDataset`'s.
* ``"mixed-cnn-zoo"``: as ``"cnn-zoo"``, for networks of many layouts whose shards only the format
  reads: ``check_shard(tensors, path)`` checks a shard as the folder's reader loads it, and
  ``networks(tensors)`` gives each network's graph (its ``graph(k)``, and ``len``).

docs/datasets.md ("Adding a dataset format") builds one from scratch.
"""
from __future__ import annotations

import inspect
import re
from dataclasses import dataclass
from typing import Any, Callable, Optional, Sequence, Union

#: What a format's import writes, by kind.
KINDS = {"inr": "an INR set (InrDataset)", "cnn-zoo": "a CNN zoo of one layout (CnnZooDataset)",
         "mixed-cnn-zoo": "a CNN zoo of mixed layouts (CnnZooDataset, mixed_layouts)"}
#: What every format defines.
ATTRIBUTES = ("NAME", "KIND", "OPTIONS", "scan", "read")
#: What a format of each kind defines besides :data:`ATTRIBUTES`.
KIND_ATTRIBUTES = {"inr": ("CONVENTION",), "cnn-zoo": ("folder_settings",),
                   "mixed-cnn-zoo": ("folder_settings", "check_shard", "networks")}
NAME_PATTERN = re.compile(r"^[a-z][a-z0-9]*(-[a-z0-9]+)*$")
#: What :func:`~neuralgraph.data.importing.import_dataset` and its command take themselves: no option's name.
RESERVED = ("fmt", "format", "src", "out", "limit", "images", "shard_size", "progress", "distributed", "merge",
            "worker_index", "num_workers")


@dataclass(frozen=True)
class Option:
    """One option of a format: a keyword of its ``scan`` and a flag of ``neuralgraph import-dataset``.

    Each argument is kept as the field of the same name.

    Args:
        name: the keyword of ``scan`` and of :func:`~neuralgraph.data.importing.import_dataset`.
        type: converts one command-line value (``int``, ``str``, ``pathlib.Path``).
        default: the value ``scan`` takes when the option is not given (its keyword's default).
        help: what the option does, for ``--help``.
        choices: the values allowed, or None for any.
        nargs: values per flag as argparse counts them (``2``, ``"+"``), or None for one.
        metavar: the values' names in ``--help``, or None.
        flag: the command-line flag, or None for ``--`` and the name with ``-`` for ``_``.
    """

    name: str
    type: Callable[[str], Any]
    default: Any
    help: str
    choices: Optional[Sequence] = None
    nargs: Union[int, str, None] = None
    metavar: Union[str, tuple, None] = None
    flag: Optional[str] = None

    @property
    def option_string(self) -> str:
        """The command-line flag (``--split-points``)."""
        return self.flag or "--" + self.name.replace("_", "-")

    def parser_arguments(self) -> dict:
        """What ``argparse.ArgumentParser.add_argument`` takes for this option, besides flag, help and default."""
        arguments = {"dest": self.name, "type": self.type}
        for key in ("choices", "nargs", "metavar"):
            if getattr(self, key) is not None:
                arguments[key] = getattr(self, key)
        return arguments


def check_format(fmt) -> None:
    """Checks that ``fmt`` follows the protocol of this module.

    Args:
        fmt: a format (a module or any object with its attributes).

    Raises:
        ValueError: an attribute is missing or wrong, or ``scan``'s keywords are not ``OPTIONS``;
            one line naming the format and the attribute.
    """
    name = getattr(fmt, "NAME", None)
    label = f"format {name!r}" if isinstance(name, str) else f"format {getattr(fmt, '__name__', fmt)!r}"
    kind = getattr(fmt, "KIND", None)
    for attribute in ATTRIBUTES + KIND_ATTRIBUTES.get(kind, ()):
        if not hasattr(fmt, attribute):
            raise ValueError(f"{label}: no {attribute} (a format defines {', '.join(ATTRIBUTES)}; "
                             "neuralgraph/data/formats/protocol.py)")
    if not isinstance(name, str) or not NAME_PATTERN.match(name):
        raise ValueError(f"{label}: NAME must be lowercase words joined by '-' (dws-inrs), got {name!r}")
    if kind not in KINDS:
        raise ValueError(f"{label}: KIND is {kind!r}, expected one of {sorted(KINDS)}")
    if kind == "inr" and not isinstance(fmt.CONVENTION, dict):
        raise ValueError(f"{label}: CONVENTION holds a {type(fmt.CONVENTION).__name__}, expected a dict of "
                         "SirenConvention fields")
    for attribute in ("scan", "read") + tuple(a for a in KIND_ATTRIBUTES[kind] if a.islower()):
        if not callable(getattr(fmt, attribute)):
            raise ValueError(f"{label}: {attribute} is not callable")
    options = fmt.OPTIONS
    if not isinstance(options, (tuple, list)) or not all(isinstance(o, Option) for o in options):
        raise ValueError(f"{label}: OPTIONS must be a tuple of neuralgraph.data.formats.Option")
    names = [option.name for option in options]
    if len(set(names)) != len(names):
        raise ValueError(f"{label}: OPTIONS names {sorted({n for n in names if names.count(n) > 1})} twice")
    taken = sorted(set(names) & set(RESERVED))
    if taken:
        raise ValueError(f"{label}: option {taken[0]!r} is a name the import itself takes ({', '.join(RESERVED)})")
    _check_scan(label, fmt.scan, options)


def _check_scan(label: str, scan: Callable, options: Sequence[Option]) -> None:
    """``scan(src, **options)``: the source, then exactly the options, as keywords with their defaults."""
    parameters = list(inspect.signature(scan).parameters.values())
    if not parameters or parameters[0].kind not in (inspect.Parameter.POSITIONAL_ONLY,
                                                    inspect.Parameter.POSITIONAL_OR_KEYWORD):
        raise ValueError(f"{label}: scan must take the source folder first")
    keywords = {p.name: p for p in parameters[1:]}
    extra = sorted(set(keywords) - {option.name for option in options})
    if extra:
        raise ValueError(f"{label}: scan takes {extra[0]!r}, which OPTIONS does not declare")
    for option in options:
        parameter = keywords.get(option.name)
        if parameter is None:
            raise ValueError(f"{label}: OPTIONS declares {option.name!r}, which scan does not take")
        if parameter.default != option.default:
            raise ValueError(f"{label}: option {option.name!r} defaults to {option.default!r} in OPTIONS but to "
                             f"{parameter.default!r} in scan")
