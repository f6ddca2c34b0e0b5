"""Readers of the field's released weight datasets, exactly as their public loaders read them.

Each format module lists what a source folder holds (``scan``) and reads one entry's weights,
checking keys, shapes and values; :mod:`neuralgraph.data.importing` writes what they read into
the package's own verified shard format. docs/datasets.md describes every format.

=================  ===========================================================  ======================
format             source                                                       kind
=================  ===========================================================  ======================
``dws-inrs``       DWSNets' MNIST / FashionMNIST SIRENs (``model_final.pth``)   INR
``nfn-sirens``     NFN's SIREN sets (``randinit_smaller_{label}s/net{i}.pth``)  INR
``small-cnn-zoo``  Unterthiner et al.'s Small CNN Zoo (``weights.npy``)         CNN zoo
``cnn-wild-park``  neural-graphs' CNN Wild Park (``checkpoint.pt`` per run)     CNN zoo, mixed layouts
=================  ===========================================================  ======================
"""
from neuralgraph.data.formats import cnn_wild_park, dws_inrs, nfn_sirens, small_cnn_zoo
from neuralgraph.data.formats.source import InrEntry, SourceError, load_tensors

#: The format modules by name (the table above).
FORMATS = {"dws-inrs": dws_inrs, "nfn-sirens": nfn_sirens, "small-cnn-zoo": small_cnn_zoo,
           "cnn-wild-park": cnn_wild_park}

__all__ = ["FORMATS", "InrEntry", "SourceError", "load_tensors"]
