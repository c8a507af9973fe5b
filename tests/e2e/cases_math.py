"""E2E cases: unary maths, logic, bitwise ops and activations added for transformers."""

from __future__ import annotations
