"""specgate's sampler: pure torch math for grammar-masked speculative sampling.

No I/O, no logging; never imports `grammars`, `engine` or `gateway`. Shares only the packed
int32 bitmask format with `grammars`.
"""
