"""Theory made executable: general position, quantization, canonical forms, WL and equivariant spaces."""
