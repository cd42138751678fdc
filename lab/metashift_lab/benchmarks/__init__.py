"""Benchmarks run by ``metashift bench``: they print figures; tests never time anything."""
