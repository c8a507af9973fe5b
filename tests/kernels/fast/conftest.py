"""Fixtures of the compiled kernels' tests."""

from __future__ import annotations

import pytest


@pytest.fixture
def crew_runs(monkeypatch):
    """(two-thread KernelThreads, the crew Jobs run so far): skips where there is no crew."""
    from lite.kernels.fast.crew import Jobs
    from lite.kernels.parallel import KernelThreads

    threads = KernelThreads(2)
    if threads.crew() is None:
        pytest.skip("no crew here")
    runs, crew_run = [], Jobs.__call__
    monkeypatch.setattr(Jobs, "__call__", lambda self: runs.append(self) or crew_run(self))
    return threads, runs
