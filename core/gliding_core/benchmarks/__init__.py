"""Benchmarks run by `gliding-horse bench`; each module measures one layer and returns figures."""
