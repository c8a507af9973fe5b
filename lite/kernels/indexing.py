"""Indexing ops: gathers and scatters, cumulative sums, ranges, tiling, top-k and friends."""
