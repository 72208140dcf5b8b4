"""Benchmarks that print figures (they never assert): sampler, grammars, engine, peers."""
