"""Readers of the field's released weight datasets, exactly as their public loaders read them.

Each format module lists what a source folder holds (``scan``) and reads its weights (``read``),
checking keys, shapes and values; :mod:`neuralgraph.data.importing` writes what they read into
the package's own verified shard format, choosing the importer by the format's ``KIND`` alone, and
``neuralgraph import-dataset`` builds its flags from each format's ``OPTIONS``
(:mod:`~neuralgraph.data.formats.protocol` says what a format defines). docs/datasets.md
describes every format, and how to add one.

=================  ===========================================================  ======================
format             source                                                       kind
=================  ===========================================================  ======================
``dws-inrs``       DWSNets' MNIST / FashionMNIST SIRENs (``model_final.pth``)   INR
``nfn-sirens``     NFN's SIREN sets (``randinit_smaller_{label}s/net{i}.pth``)  INR
``small-cnn-zoo``  Unterthiner et al.'s Small CNN Zoo (``weights.npy``)         CNN zoo
``cnn-wild-park``  neural-graphs' CNN Wild Park (``checkpoint.pt`` per run)     CNN zoo, mixed layouts
=================  ===========================================================  ======================
"""
from pathlib import Path

from neuralgraph.data.formats import cnn_wild_park, dws_inrs, nfn_sirens, small_cnn_zoo
from neuralgraph.data.formats.protocol import KINDS, Option, check_format
from neuralgraph.data.formats.source import InrEntry, SourceError, load_tensors
from neuralgraph.data.shards import DatasetError

#: The package's format modules, in the order of the table above.
MODULES = (dws_inrs, nfn_sirens, small_cnn_zoo, cnn_wild_park)
#: The formats by name, those of :data:`MODULES` and those :func:`register_format` adds.
FORMATS: dict = {}


def register_format(fmt):
    """Adds a format to :data:`FORMATS`, after checking it (:func:`~neuralgraph.data.formats.protocol.check_format`).

    Args:
        fmt: the format, a module (or any object) defining what
            :mod:`~neuralgraph.data.formats.protocol` lists.

    Returns:
        ``fmt``, so that this works as a class decorator too.

    Raises:
        ValueError: ``fmt`` does not follow the protocol, or another format has its name.
    """
    check_format(fmt)
    if FORMATS.get(fmt.NAME, fmt) is not fmt:
        raise ValueError(f"format {fmt.NAME!r}: another format of that name is registered ({FORMATS[fmt.NAME]!r})")
    FORMATS[fmt.NAME] = fmt
    return fmt


def imported_format(manifest: dict, path: Path):
    """The format a folder was imported from, as its manifest records it (``imported.source_format``).

    Args:
        manifest: the folder's manifest.
        path: the manifest file, for errors.

    Returns:
        The format.

    Raises:
        ~neuralgraph.data.shards.DatasetError: the manifest names no registered format.
    """
    name = (manifest.get("imported") or {}).get("source_format")
    if name not in FORMATS:
        raise DatasetError(f"{path}: imported.source_format is {name!r}, none of the registered formats "
                           f"({', '.join(FORMATS)})")
    return FORMATS[name]


for _module in MODULES:
    register_format(_module)

__all__ = ["FORMATS", "KINDS", "MODULES", "InrEntry", "Option", "SourceError", "imported_format", "load_tensors",
           "register_format"]
