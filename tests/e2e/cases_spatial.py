"""E2E cases: 1-D and 3-D convolution and pooling, Resize modes."""

from __future__ import annotations
