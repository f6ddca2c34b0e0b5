"""Theory made executable: general position, quantization, canonical forms (up to permutations, and sign
flips or positive rescalings), WL and equivariant spaces."""
from neuralgraph.theory.canonical import CanonicalForm, CanonicalizationError, canonical_features, canonicalize
from neuralgraph.theory.gp import SEPARATORS, GPAudit, audit_gp, tie_matrices
from neuralgraph.theory.quantize import GRANULARITIES, quantize, quantize_mlp
from neuralgraph.theory.scaling import CanonicalScaling, canonical_scaling
from neuralgraph.theory.wl import cycle_pair, wl_colors, wl_equivalent

__all__ = [
    "GRANULARITIES",
    "SEPARATORS",
    "CanonicalForm",
    "CanonicalScaling",
    "CanonicalizationError",
    "GPAudit",
    "audit_gp",
    "canonical_features",
    "canonical_scaling",
    "canonicalize",
    "cycle_pair",
    "quantize",
    "quantize_mlp",
    "tie_matrices",
    "wl_colors",
    "wl_equivalent",
]
