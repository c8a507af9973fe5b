"""Fixtures of the pipeline tests: no worker thread outlives a test; a few small built stages."""

from __future__ import annotations

import numpy as np
import pytest

from tests.support.pipeline import add_model, pipeline_threads, relu_model


@pytest.fixture(autouse=True)
def no_threads_left():
    yield
    assert pipeline_threads() == []


@pytest.fixture(scope="module")
def stages():
    return {"relu": relu_model(), "add": add_model(), "add5": add_model((1, 5)),
            "add64": add_model(dtype=np.float64)}
