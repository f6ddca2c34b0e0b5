"""Metanetworks by name: ``@register_metanet("gmn")`` on a class, ``build_metanet("gmn", **cfg)``."""
from __future__ import annotations

from typing import Callable, Optional

from neuralgraph.graph.spec import GraphSpec
from neuralgraph.nn.base import Metanet

#: The registered metanetworks by name (``@register_metanet``), which ``build_metanet`` and the configs'
#: ``metanet`` field select from.
METANETS: dict[str, type[Metanet]] = {}
#: Baselines built by name like the metanetworks (``metanet: statnn`` in a config) but kept out of
#: :data:`METANETS`, so that suites and benchmarks over the message-passing architectures leave them out.
BASELINES: dict[str, type[Metanet]] = {}


def register_metanet(name: str) -> Callable[[type[Metanet]], type[Metanet]]:
    """Class decorator adding a :class:`Metanet` subclass to :data:`METANETS` under ``name``.

    Args:
        name: the registry name (``metanet: name`` in a config); taken names are refused.

    Returns:
        The decorator, which sets ``cls.name`` and returns ``cls`` unchanged.
    """

    def decorator(cls: type[Metanet]) -> type[Metanet]:
        if not (isinstance(cls, type) and issubclass(cls, Metanet)):
            raise TypeError(f"@register_metanet({name!r}) decorates {cls!r}, which is not a Metanet subclass")
        if name in METANETS and METANETS[name] is not cls:
            raise ValueError(f"metanet name {name!r} is already taken by {METANETS[name].__qualname__}")
        cls.name = name
        METANETS[name] = cls
        return cls

    return decorator


def register_baseline(name: str) -> Callable[[type[Metanet]], type[Metanet]]:
    """Class decorator adding a :class:`Metanet` subclass to :data:`BASELINES` under ``name``.

    Args:
        name: the registry name; names of :data:`METANETS` and taken baseline names are refused.

    Returns:
        The decorator, which sets ``cls.name`` and returns ``cls`` unchanged.
    """

    def decorator(cls: type[Metanet]) -> type[Metanet]:
        if not (isinstance(cls, type) and issubclass(cls, Metanet)):
            raise TypeError(f"@register_baseline({name!r}) decorates {cls!r}, which is not a Metanet subclass")
        if name in METANETS or (name in BASELINES and BASELINES[name] is not cls):
            raise ValueError(f"baseline name {name!r} is already taken")
        cls.name = name
        BASELINES[name] = cls
        return cls

    return decorator


def metanet_class(name: str) -> type[Metanet]:
    """The class registered as ``name`` (a metanetwork or a baseline); ValueError listing the known names otherwise.

    Args:
        name: a key of :data:`METANETS` or :data:`BASELINES`.

    Returns:
        The registered class.
    """
    if name in METANETS:
        return METANETS[name]
    if name in BASELINES:
        return BASELINES[name]
    raise ValueError(f"unknown metanet {name!r}; known: {sorted(METANETS)}, baselines: {sorted(BASELINES)}")


def build_metanet(name: str, spec: Optional[GraphSpec] = None, **cfg) -> Metanet:
    """Instantiate the metanetwork registered as ``name`` with constructor arguments ``cfg``.

    With ``spec`` (the data's :class:`~neuralgraph.graph.spec.GraphSpec`) the arguments it
    determines (``Metanet.spec_arguments``) are filled in; ``cfg`` restating one of them with
    another value is a ValueError naming it.

    Args:
        name: the registry name (:func:`metanet_class`).
        spec: the data's graph facts, or ``None`` to take ``cfg`` as it is.
        **cfg: constructor arguments of the architecture (its class docstring lists them).

    Returns:
        The new metanetwork.
    """
    cls = metanet_class(name)
    if spec is None:
        return cls(**cfg)
    facts = cls.spec_arguments(spec)
    for key, value in facts.items():
        if key in cfg and cfg[key] != value:
            raise ValueError(f"{name}: {key}={cfg[key]!r} in the config, but the data's GraphSpec gives {value!r}")
    return cls(**{**cfg, **facts})
