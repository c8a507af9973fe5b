"""Ordering for checks that read what the other delegate cases exercised."""

from __future__ import annotations

import pytest

TVM_CASES_DESELECTED = pytest.StashKey[bool]()  # a fast case of test_tvm*.py was left out of this run


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Moves tests marked ``after_others`` to the end of the run."""
    last = [item for item in items if item.get_closest_marker("after_others")]
    items[:] = [item for item in items if item not in last] + last
    config.stash.setdefault(TVM_CASES_DESELECTED, False)


def pytest_deselected(items: list[pytest.Item]) -> None:
    """Notes when a fast TVM case is deselected (slow ones need not run for the coverage check)."""
    for item in items:
        if item.path.name.startswith("test_tvm") and not item.get_closest_marker("slow"):
            item.config.stash[TVM_CASES_DESELECTED] = True
