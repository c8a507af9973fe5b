"""The compiled depthwise convolution against the numpy kernel it stands in for, and the oracle."""

from __future__ import annotations

import numpy as np
import pytest

from lite.kernels import fast
from lite.kernels.fast import depthwise, flat
from tests.support.conv import EPILOGUE_ACTIVATIONS, onnx_attrs, onnx_reference
from tests.support.kernel_harness import run_kernel

pytestmark = pytest.mark.skipif(fast.numba_module() is None, reason="numba is not importable here")

# (x shape, weight shape, Conv2DFusion attrs): strides, dilations, pads, multipliers, batches, dtypes
CASES = [
    ((1, 8, 20, 20), (8, 1, 3, 3), {"pad_list": (1, 1, 1, 1)}),
    ((2, 6, 21, 19), (6, 1, 3, 3), {"stride": (2, 2), "pad_list": (1, 1, 1, 1)}),
    ((1, 4, 21, 23), (4, 1, 3, 3), {"stride": (2, 2), "pad_list": (0, 1, 0, 1)}),
    ((1, 5, 45, 29), (5, 1, 5, 5), {"stride": (3, 2), "pad_list": (2, 2, 1, 3)}),
    ((1, 4, 24, 24), (4, 1, 3, 3), {"dilation": (2, 3), "pad_list": (2, 3, 2, 3)}),
    ((1, 3, 16, 16), (6, 1, 3, 3), {"pad_list": (1, 1, 1, 1)}),  # channel multiplier 2
    ((1, 3, 12, 12), (9, 1, 3, 3), {"pad_list": (1, 1, 1, 1)}),  # multiplier 3
    ((2, 16, 10, 10), (16, 1, 3, 3), {"pad_list": (1, 1, 1, 1), "activation_type": "RELU6"}),
    ((1, 8, 15, 15), (8, 1, 7, 7), {"pad_mode": "SAME_UPPER", "activation_type": "RELU"}),
    ((1, 8, 12, 80), (8, 1, 1, 5), {"stride": (1, 4), "pad_list": (0, 0, 2, 2)}),
    ((3, 2, 1, 200), (2, 1, 1, 3), {"pad_list": (0, 0, 1, 1)}),
    ((1, 16, 7, 7), (16, 1, 3, 3), {"pad_list": (1, 1, 1, 1), "activation_type": "RELU6"}),  # small planes too
    ((2, 8, 3, 3), (8, 1, 5, 5), {"pad_list": (2, 2, 2, 2)}),  # a kernel larger than the plane
    ((1, 6, 9, 11), (6, 1, 4, 2), {"stride": (2, 1), "pad_list": (1, 2, 0, 1)}),  # even kernel sizes
    ((1, 3, 9, 1), (3, 1, 3, 1), {"stride": (2, 2), "pad_list": (1, 0, 1, 0)}),  # stride 2 on a one-column row
    ((1, 4, 17, 17), (4, 1, 5, 5), {"stride": (2, 2), "pad_list": (2, 2, 2, 2)}),  # EfficientNet's 5x5 stride 2
    ((2, 6, 14, 14), (6, 1, 5, 5), {"pad_list": (2, 2, 2, 2), "activation_type": "RELU6"}),  # and stride 1
    ((1, 5, 9, 10), (5, 1, 3, 3), {"pad_list": (0, 2, 2, 0)}),  # pads on one side only, the width kept
    ((1, 4, 8, 9), (4, 1, 2, 4), {"pad_list": (1, 1, 0, 2)}),  # even kernel sizes, the width kept
    ((1, 5, 9, 9), (5, 1, 3, 3), {}),  # no pads: narrower output rows
]


def conv(x, w, b, attrs):
    return run_kernel("Conv2DFusion", {"group": x.shape[1], **attrs}, [x, w, b])[0]


# NOTE: float64 compiles kernels of its own: the slow suite
@pytest.mark.parametrize("dtype", [np.float32, pytest.param(np.float64, marks=pytest.mark.slow)])
@pytest.mark.parametrize(("x_shape", "w_shape", "attrs"), CASES)
def test_compiled_matches_the_numpy_kernel(monkeypatch, x_shape, w_shape, attrs, dtype):
    rng = np.random.default_rng([len(x_shape), *x_shape, *w_shape])
    x, w = rng.standard_normal(x_shape).astype(dtype), rng.standard_normal(w_shape).astype(dtype)
    b = rng.standard_normal(w_shape[0]).astype(dtype)
    monkeypatch.setenv("DELITE_FAST_KERNELS", "0")
    reference = conv(x, w, b, attrs)
    monkeypatch.setenv("DELITE_FAST_KERNELS", "1")
    got = conv(x, w, b, attrs)
    assert got.dtype == reference.dtype and got.shape == reference.shape
    np.testing.assert_allclose(got, reference, rtol=1e-4, atol=1e-5 if dtype == np.float32 else 1e-12)


def test_every_case_runs_the_compiled_kernel(monkeypatch):
    depthwise._warm(depthwise.DepthwisePlan, "float32")  # compiled (and cached) before the kernels become probes
    depthwise._warm(flat.FlatPlan, "float32")
    calls = []
    monkeypatch.setattr(depthwise, "by_plane", lambda *args: calls.append(("phases", args[0].shape)))
    monkeypatch.setattr(flat, "flat_planes", lambda *args: calls.append(("flat", args[0].shape)))
    for x_shape, w_shape, attrs in CASES:
        run_kernel("Conv2DFusion", {"group": x_shape[1], **attrs},
                   [np.zeros(x_shape, np.float32), np.zeros(w_shape, np.float32)])
    assert [shape for _, shape in calls] == [x_shape for x_shape, _, _ in CASES]
    assert [kind for kind, _ in calls].count("flat") == 11  # stride 1 with the rows' width kept


def test_matches_onnxruntime_on_a_mobilenet_layer():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((1, 32, 56, 56)).astype(np.float32)
    w, b = rng.standard_normal((32, 1, 3, 3)).astype(np.float32), rng.standard_normal(32).astype(np.float32)
    got = conv(x, w, b, {"stride": (2, 2), "pad_list": (1, 1, 1, 1), "activation_type": "RELU6"})
    expected = np.clip(onnx_reference("Conv", x, {"w": w, "b": b}, group=32, strides=[2, 2], pads=[1, 1, 1, 1]), 0, 6)
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)




@pytest.mark.parametrize(("activation", "function"), EPILOGUE_ACTIVATIONS)
@pytest.mark.parametrize(("x_shape", "w_shape", "attrs"), [CASES[0], CASES[1], CASES[5], CASES[11], CASES[15]])
def test_an_activation_replaces_the_clip(monkeypatch, activation, function, x_shape, w_shape, attrs):
    from lite.kernels.fast.activation import EPILOGUE_CODES
    from lite.kernels.window import Geometry

    rng = np.random.default_rng([*x_shape, *w_shape])
    x, w = rng.standard_normal(x_shape).astype(np.float32), rng.standard_normal(w_shape).astype(np.float32)
    b = rng.standard_normal(w_shape[0]).astype(np.float32)
    plain = {k: v for k, v in attrs.items() if k != "activation_type"}
    monkeypatch.setenv("DELITE_FAST_KERNELS", "0")
    linear = conv(x, w, b, plain)
    strides, dilations = plain.get("stride", (1, 1)), plain.get("dilation", (1, 1))
    top, left, bottom, right = plain["pad_list"]
    plan = depthwise.DepthwisePlan(Geometry(x_shape, w_shape[2:], strides, dilations, (top, left), (bottom, right),
                                            linear.shape[2:]))
    got = np.full(linear.shape, np.nan, np.float32)
    lo, hi = np.float32(-np.inf), np.float32(np.inf)
    plan.run(x, plan.arrange(w), b, lo, hi, got, [np.zeros(s, np.float32) for s in plan.scratch],
             code=EPILOGUE_CODES[activation], alpha=np.float32(1.5))
    np.testing.assert_allclose(got, function(linear, 1.5), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(("x_shape", "w_shape", "attrs"), CASES)
def test_planes_on_the_crew_match_the_numpy_kernel(monkeypatch, crew_runs, x_shape, w_shape, attrs):
    threads, runs = crew_runs
    rng = np.random.default_rng([7, *x_shape, *w_shape])
    x, w = rng.standard_normal(x_shape).astype(np.float32), rng.standard_normal(w_shape).astype(np.float32)
    b = rng.standard_normal(w_shape[0]).astype(np.float32)
    monkeypatch.setenv("DELITE_FAST_KERNELS", "0")
    reference = conv(x, w, b, attrs)
    monkeypatch.setenv("DELITE_FAST_KERNELS", "1")
    got = run_kernel("Conv2DFusion", {"group": x.shape[1], **attrs}, [x, w, b], threads=threads)[0]
    np.testing.assert_allclose(got, reference, rtol=1e-4, atol=1e-5)
    assert len(runs) == 1  # the planes ran on the crew


@pytest.mark.parametrize(("x_shape", "w_shape", "attrs"), CASES)
def test_scratch_holds_the_rounded_plane(x_shape, w_shape, attrs):
    """The taps run over the wide plane rounded up to ``ROUND`` positions: both scratch arrays of
    the kernel's plan hold every position they read or write."""
    from tests.support.conv import build

    kernel = build("Conv2DFusion", {"group": x_shape[1], **attrs},
                   [np.zeros(x_shape, np.float32), np.zeros(w_shape, np.float32)])
    kernel.prepare()
    kernel.resize()
    plan = kernel.plan.compiled
    if isinstance(plan, flat.FlatPlan):
        (padded,), (wide,) = plan.scratch
        assert wide == plan.count >= plan.geometry.out[0] * x_shape[3] and wide % depthwise.ROUND == 0
        assert padded >= int(plan.taps.max()) + plan.count and padded >= plan.margin + x_shape[2] * x_shape[3]
        return
    rounded = -(-plan.geometry.out[0] * plan.wq // depthwise.ROUND) * depthwise.ROUND
    (phases,), (wide,) = plan.scratch
    assert wide >= rounded and phases >= int(plan.taps.max()) + rounded


@pytest.mark.parametrize(("x_shape", "w_shape", "attrs"), [CASES[0], CASES[7], CASES[12], CASES[16]])
def test_a_range_of_planes_writes_only_its_planes(x_shape, w_shape, attrs):
    """Planes before the range's last are written rounded up past their end (the next plane is
    written right after); nothing outside ``first`` to ``last - 1`` changes."""
    from lite.kernels.window import Geometry

    rng = np.random.default_rng([5, *x_shape])
    x, w = rng.standard_normal(x_shape).astype(np.float32), rng.standard_normal(w_shape).astype(np.float32)
    b = rng.standard_normal(w_shape[0]).astype(np.float32)
    full = conv(x, w, b, attrs)
    top, left, bottom, right = attrs["pad_list"]
    plan = flat.FlatPlan(Geometry(x_shape, w_shape[2:], (1, 1), (1, 1), (top, left), (bottom, right), full.shape[2:]))
    lo, hi = (np.float32(0), np.float32(6)) if attrs.get("activation_type") == "RELU6" else \
        (np.float32(-np.inf), np.float32(np.inf))
    planes = full.shape[0] * full.shape[1]
    got = np.full(full.shape, np.nan, np.float32)
    plan.run(x, plan.arrange(w), b, lo, hi, got, [np.zeros(s, np.float32) for s in plan.scratch], 1, planes - 2)
    inside = got.reshape(planes, -1)[1:planes - 2]
    np.testing.assert_allclose(inside, full.reshape(planes, -1)[1:planes - 2], rtol=1e-5, atol=1e-5)
    assert np.isnan(got.reshape(planes, -1)[[0, planes - 2, planes - 1]]).all()


def test_an_infinite_input_reaches_only_the_outputs_whose_taps_read_it(monkeypatch):
    """Taps that would wrap into the next or previous row are masked, not multiplied by zero: an
    infinity at the end of a row stays out of the next row's first output (0 * inf is NaN)."""
    x = np.random.default_rng(9).standard_normal((1, 2, 6, 6)).astype(np.float32)
    x[0, 0, 2, 5] = np.inf
    w = np.abs(np.random.default_rng(10).standard_normal((2, 1, 3, 3))).astype(np.float32)
    attrs = {"pad_list": (1, 1, 1, 1)}
    monkeypatch.setenv("DELITE_FAST_KERNELS", "0")
    reference = conv(x, w, np.zeros(2, np.float32), attrs)
    monkeypatch.setenv("DELITE_FAST_KERNELS", "1")
    got = conv(x, w, np.zeros(2, np.float32), attrs)
    assert np.isinf(reference).sum() == 6 and not np.isnan(reference).any()
    np.testing.assert_array_equal(np.isinf(got), np.isinf(reference))
    np.testing.assert_allclose(got[np.isfinite(reference)], reference[np.isfinite(reference)], rtol=1e-5, atol=1e-5)


PROLOGUES = [  # (name, clip bounds or None, EPILOGUE_CODES activation or None): a producer's epilogue
    ("relu6", (0.0, 6.0), None), ("bias only", None, None), ("swish", None, "SWISH"),
    ("hard swish", None, "HARD_SWISH")]


def producer_epilogue(x: np.ndarray, shift: np.ndarray, bounds, activation) -> np.ndarray:
    """What the producing convolution's own epilogue makes of its sums x, in float64."""
    value = x.astype(np.float64) + shift.reshape(1, -1, 1, 1)
    if bounds is not None:
        value = np.clip(value, *bounds)
    return value if activation is None else dict(EPILOGUE_ACTIVATIONS)[activation](value, 1.25)


def prologue_terms(shift: np.ndarray, bounds, activation) -> tuple:
    from lite.kernels.fast.activation import CLIP_CODE, EPILOGUE_CODES

    lo, hi = bounds or (-np.inf, np.inf)
    code = CLIP_CODE if activation is None else EPILOGUE_CODES[activation]
    return shift, np.float32(lo), np.float32(hi), code, np.float32(1.25)


@pytest.mark.parametrize(("name", "bounds", "activation"), PROLOGUES)
@pytest.mark.parametrize(("x_shape", "w_shape", "attrs"), [CASES[0], CASES[1], CASES[5], CASES[13], CASES[16],
                                                           CASES[19]])
@pytest.mark.parametrize("on_crew", [False, True])
def test_the_producers_epilogue_is_applied_as_each_plane_is_copied_in(request, name, bounds, activation, x_shape,
                                                                     w_shape, attrs, on_crew):
    """The input planes get the producing convolution's bias and clip or activation; the padding
    stays zero (the reference pads the finished input), on both plans (flat, stride phases) and
    on the crew; a multiplier reads each input channel's shift."""
    from tests.support.conv import build

    rng = np.random.default_rng([9, *x_shape, *w_shape, len(name)])
    raw, w = rng.standard_normal(x_shape).astype(np.float32) * 3, rng.standard_normal(w_shape).astype(np.float32)
    b, shift = rng.standard_normal(w_shape[0]).astype(np.float32), rng.standard_normal(x_shape[1]).astype(np.float32)
    finished = producer_epilogue(raw, shift, bounds, activation)
    expected = onnx_reference("Conv", finished.astype(np.float32), {"w": w, "b": b},
                              **onnx_attrs({"group": x_shape[1], **attrs}))
    kernel = build("Conv2DFusion", {"group": x_shape[1], **attrs}, [raw, w, b])
    kernel.prepare()
    kernel.resize()
    plan, out = kernel.plan.compiled, np.full(expected.shape, np.nan, np.float32)
    scratch = [[np.zeros(s, np.float32) for s in plan.scratch] for _ in range(2)]
    prologue = prologue_terms(shift, bounds, activation)
    inf = np.float32(np.inf)
    if on_crew:
        threads, runs = request.getfixturevalue("crew_runs")
        module = flat if isinstance(plan, flat.FlatPlan) else depthwise
        planes = out.shape[0] * out.shape[1]
        bounds_ = [(0, planes // 3), (planes // 3, planes)]
        threads.crew_step(module.crew_jobs(plan, raw, plan.arrange(w), b, -inf, inf, out, scratch, bounds_, 0,
                                           np.float32(1), prologue), None)()
        assert len(runs) == 1
    else:
        plan.run(raw, plan.arrange(w), b, -inf, inf, out, scratch[0], prologue=prologue)
    np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-4)

