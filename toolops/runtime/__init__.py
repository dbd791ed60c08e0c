"""The pure core, first layer: strict parse, schema validation bound to its dialect, deterministic
normalization, the canonical digest and the state table. Imports no Django (tests/test_runtime_purity.py)."""
