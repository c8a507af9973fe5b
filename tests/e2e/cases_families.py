"""Registers the op family case modules (``tests/e2e/cases_<family>.py``) with the e2e table, in this order."""

from tests.e2e import cases_indexing, cases_math, cases_norm, cases_quant, cases_spatial  # noqa: F401, I001
from tests.e2e import cases_core  # noqa: F401  (after the others: the order the table had when it lived in test_ops.py)
