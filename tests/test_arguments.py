"""Bad calls to the public API: each raises the LiteError subclass that says what was expected, and
the model keeps predicting correctly afterwards."""

from __future__ import annotations

import numpy as np
import pytest

import lite
from lite.arguments import bool_from_text
from lite.tools import zoo
from lite.tools.converter import convert
from tests.support.oracle import run_onnxruntime

DATA = convert(zoo.add_chain(3))


def runner() -> lite.ModelParallelRunner:
    return lite.ModelParallelRunner(DATA, lite.Context(thread_num=1), workers=1)


@pytest.fixture(scope="module")
def model():
    built = lite.Model()
    built.build(DATA, lite.ModelType.LITE, lite.Context(thread_num=1))
    return built


def x_like(model: lite.Model, dtype=np.float32) -> np.ndarray:
    return np.random.default_rng(0).standard_normal(model.get_inputs()[0].shape).astype(dtype)


CALLS = {  # name: (call(model), error, message fragment)
    "predict(42)": (lambda m: m.predict(42), lite.InputError, "list or tuple, got int"),
    "predict(object())": (lambda m: m.predict(object()), lite.InputError, "list or tuple, got object"),
    "predict(generator)": (lambda m: m.predict(a for a in [x_like(m)]), lite.InputError, "got generator"),
    "predict(array)": (lambda m: m.predict(x_like(m)), lite.InputError, "wrap it in a list"),
    "predict(two inputs)": (lambda m: m.predict([x_like(m), x_like(m)]), lite.InputError, "predict got 2"),
    "predict(profile=[])": (lambda m: m.predict([x_like(m)], profile=[]), lite.InputError, "profile must be a dict"),
    "predict(big-endian)": (lambda m: m.predict([x_like(m, ">f4")]), lite.InputError, "another byte order"),
    "predict(float64)": (lambda m: m.predict([x_like(m, np.float64)]), lite.InputError, "got float64"),
    "resize(inputs, None)": (lambda m: m.resize(m.get_inputs(), None), lite.InputError, "got NoneType"),
    "resize(None, shapes)": (lambda m: m.resize(None, [[1, 16]]), lite.InputError, "got NoneType"),
    "resize(2.7)": (lambda m: m.resize(m.get_inputs(), [[2.7, 16]]), lite.InputError, "must be ints"),
    "resize(True)": (lambda m: m.resize(m.get_inputs(), [[True, 16]]), lite.InputError, "must be ints"),
    "resize(0 dim)": (lambda m: m.resize(m.get_inputs(), [[0, 16]]), lite.InputError, "positive"),
    "build again": (lambda m: m.build(DATA), lite.InputError, "already built"),
}
BUILDS = {  # name: (call, error, message fragment)
    "build(None)": (lambda: lite.Model().build(None), lite.InputError, "as bytes, got NoneType"),
    "build(str)": (lambda: lite.Model().build("m.lite"), lite.InputError, "use build_from_file"),
    "build(list)": (lambda: lite.Model().build([1, 2]), lite.InputError, "got list"),
    "build(context='x')": (lambda: lite.Model().build(DATA, lite.ModelType.LITE, "x"), lite.InputError,
                           "lite.Context, got str"),
    "build_from_file(None)": (lambda: lite.Model().build_from_file(None), lite.InputError, "got NoneType"),
    "build_from_file(context=1)": (lambda: lite.Model().build_from_file("x.lite", context=1), lite.InputError,
                                   "lite.Context, got int"),
    "Context(delegates=1)": (lambda: lite.Context(delegates=1), lite.InputError, "list or tuple, got int"),
    "Context(delegates=[class])": (lambda: lite.Context(delegates=[lite.Delegate]), lite.DelegateError,
                                   "pass an instance: Delegate()"),
    "Context(delegates=['x'])": (lambda: lite.Context(delegates=["x"]), lite.DelegateError, "got str"),
    "Context(thread_num=2**70)": (lambda: lite.Context(thread_num=2**70), lite.InputError, "at most 1024"),
    "Context(thread_num=0)": (lambda: lite.Context(thread_num=0), lite.InputError, "positive int"),
    "Context(memory_limit='x')": (lambda: lite.Context(memory_limit="x"), lite.InputError, "memory_limit"),
    "Context(fallback='false')": (lambda: lite.Context(fallback="false"), lite.InputError,
                                  "Context fallback must be True or False, got str 'false'"),
    "Context(fallback=0)": (lambda: lite.Context(fallback=0), lite.InputError, "fallback must be True or False"),
    "runner.predict(None)": (lambda: runner().predict(None), lite.InputError, "got NoneType"),
}


@pytest.mark.parametrize("name", list(CALLS))
def test_a_bad_call_on_a_built_model_is_refused_and_the_model_still_works(model, name):
    call, error, fragment = CALLS[name]
    with pytest.raises(error, match=fragment.replace("(", r"\(").replace(")", r"\)")):
        call(model)
    if list(model.get_inputs()[0].shape) != [1, 16]:
        model.resize(model.get_inputs(), [[1, 16]])
    x = x_like(model)
    [y] = model.predict([x])
    np.testing.assert_allclose(y.get_data_to_numpy(), reference(x), rtol=1e-5)


@pytest.mark.parametrize("name", list(BUILDS))
def test_a_bad_build_or_context_argument_is_refused(name):
    call, error, fragment = BUILDS[name]
    with pytest.raises(error, match=fragment.replace("(", r"\(").replace(")", r"\)")):
        call()


def test_keyboard_interrupt_propagates_untouched(model, monkeypatch):
    kernel = model._engine.kernels[0]

    def interrupt():
        raise KeyboardInterrupt

    monkeypatch.setattr(kernel, "execute", interrupt)
    with pytest.raises(KeyboardInterrupt):
        model.predict([x_like(model)])


def reference(x: np.ndarray) -> np.ndarray:
    return run_onnxruntime(zoo.add_chain(3), {"x": x})[0]


@pytest.mark.parametrize(("text", "value"), [("true", True), ("1", True), ("yes", True), ("ON", True), (1, True),
                                             ("False", False), ("0", False), ("no", False), ("off", False),
                                             (0, False), (np.bool_(False), False)])
def test_booleans_given_as_text_take_eight_spellings(text, value):
    assert bool_from_text(text, "option 'x'") is value


@pytest.mark.parametrize("text", ["nope", "", "2", 2, 1.0, None, "t", [True]])
def test_any_other_boolean_text_is_refused_naming_the_option(text):
    with pytest.raises(lite.InputError, match="option 'x' is a boolean: give one of true/1/yes/on or false/0/no/off"):
        bool_from_text(text, "option 'x'")
