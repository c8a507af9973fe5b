"""Fixtures shared by test directories."""

from __future__ import annotations

import os

import numpy as np
import pytest

import lite
from tests.support.custom_op import scaled_tanh


def pytest_configure(config):
    """No conversion cache in the suite (its children inherit this): tests that patch the converter
    or rebuild the same file must convert every time; tests/test_conversion.py names its folders."""
    os.environ["DELITE_CONVERSION_CACHE"] = "off"


@pytest.fixture
def native_runs():
    """Registers a numpy ScaledTanh kernel for the test; yields the list its ``execute`` appends to."""
    runs: list[str] = []

    @lite.register_custom_kernel("ScaledTanh", dtypes=[np.float32])
    class ScaledTanh(lite.NativeKernel):
        def infer_shapes(self):
            return [self.inputs[0].shape]

        def execute(self):
            runs.append(self.name)
            self.outputs[0].data[...] = scaled_tanh(self.inputs[0].data, self.attrs["attrs"])

    yield runs
    lite.unregister_custom_kernel("ScaledTanh")
