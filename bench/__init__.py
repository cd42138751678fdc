"""Benchmarks: they print figures; tests never time anything."""
