"""Envelopes: Docker json-file, CRI and compose wrappers peeled off a stream's raw lines (``unwrap``),
by the shapes each kind has (``kinds``)."""
