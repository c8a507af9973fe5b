"""Registers the op family case modules (``tests/e2e/cases_<family>.py``) with the e2e table."""

from tests.e2e import cases_indexing, cases_math, cases_norm, cases_spatial  # noqa: F401
