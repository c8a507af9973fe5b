"""The e2e tests' checks: build a native model from .lite bytes, run it on numpy feeds, and compare its
outputs with onnxruntime's at the acceptance tolerances."""

from __future__ import annotations

import numpy as np

import lite
from tests.support.oracle import relative_l2

RTOL, ATOL = 1e-4, 1e-5  # fp32 element-wise tolerance
REL_L2 = 1e-4  # fp32 tolerance for large tensors (and whole models)
LARGE = 4096  # float outputs with at least this many elements are compared by relative L2


def build_lite(data: bytes, thread_num: int = 1) -> lite.Model:
    """A native ``lite.Model`` built from .lite bytes."""
    model = lite.Model()
    model.build(data, lite.ModelType.LITE, lite.Context(thread_num=thread_num))
    return model


def predict(model: lite.Model, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    """Feeds the inputs by name (in the model's input order) and returns every output as numpy."""
    names = [t.name for t in model.get_inputs()]
    assert sorted(names) == sorted(feeds), f"model inputs {names}, feeds {sorted(feeds)}"
    return [t.get_data_to_numpy() for t in model.predict([feeds[n] for n in names])]


def assert_matches(actual: list[np.ndarray], expected: list[np.ndarray], what: str = "") -> None:
    """Same count, shapes and dtypes; fp32 within RTOL/ATOL (relative L2 for large tensors), the rest exact."""
    assert len(actual) == len(expected), f"{what}: {len(actual)} outputs, onnxruntime gives {len(expected)}"
    for k, (a, e) in enumerate(zip(actual, expected, strict=True)):
        e = np.asarray(e)
        where = f"{what} output {k}"
        assert a is not None, f"{where}: no data"
        assert a.shape == e.shape, f"{where}: shape {a.shape}, onnxruntime {e.shape}"
        assert a.dtype == e.dtype, f"{where}: dtype {a.dtype}, onnxruntime {e.dtype}"
        if e.dtype in (np.float32, np.float64):
            if e.size >= LARGE:
                assert relative_l2(a, e) <= REL_L2, f"{where}: relative L2 {relative_l2(a, e):.3g}"
            else:
                np.testing.assert_allclose(a, e, rtol=RTOL, atol=ATOL, err_msg=where)
        else:
            np.testing.assert_array_equal(a, e, err_msg=where)
