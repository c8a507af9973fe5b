"""E2E cases: indexing ops (gathers, scatters, CumSum, Range, Tile, TopK, ...)."""

from __future__ import annotations
