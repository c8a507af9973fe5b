"""Conv2DFusion's algorithm table (``lite.kernels.conv_plans.ALGORITHMS``): the algorithm every
convolution of the zoo's models runs, recorded in ``conv_algorithms.json`` (made with the if/elif
chain the table replaced, so the table chooses as it did), and how the table is read."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import lite
from lite.kernels import fast
from lite.kernels.conv_plans import ALGORITHMS, ConvLayer
from lite.kernels.plans import first_fit
from lite.tools import zoo

EXPECTED = json.loads((Path(__file__).parent / "conv_algorithms.json").read_text())
"""variant -> model -> each Conv2DFusion's algorithm in the scheduler's order, "+residual" where it
adds a fused residual (``lite.fusion.ConvResidual``)."""
MODELS = ["resnet18", "mobilenet_v2", "squeezenet", "inception_block", "efficientnet_b0"]
WIDE = {"compiled, 512-bit registers": True, "compiled, 256-bit registers": False,
        "compiled, 512-bit registers, BLAS on AVX2 kernels": True}
"""Whether the variant's compiled kernels compute in 512-bit registers (``fast.wide_registers``)."""
BLAS = {"compiled, 512-bit registers, BLAS on AVX2 kernels": "haswell"}
"""The kernels the variant's BLAS runs (``lite.threads.blas_architectures``); others: its AVX-512 ones."""


def chosen(name: str) -> list[str]:
    model = lite.Model()
    model.build(zoo.MODELS[name]().SerializeToString(), lite.ModelType.ONNX, lite.Context(thread_num=1))
    return [first_fit(ALGORITHMS, k.layer()).name + ("+residual" if k.epilogue.residual is not None else "")
            for k in model._engine.shape_kernels if k.type == "Conv2DFusion"]  # NOTE: a chain's members plan no table


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("variant", list(EXPECTED))
def test_every_zoo_convolution_runs_the_recorded_algorithm(monkeypatch, variant, model):
    """The 256-bit variant runs as recorded on both kinds of cores: with 512-bit registers, once
    Winograd's rule for 256-bit ones (``winograd.DIRECT_FIRST`` off) stands in. The BLAS kernels are
    set per variant: AVX2 ones send large 1x1 layers on small planes to ``blocked_pointwise``."""
    from lite.kernels import conv_plans

    monkeypatch.setattr(conv_plans, "blas_architectures", lambda: frozenset({BLAS.get(variant, "skylakex")}))
    if variant == "numpy":
        monkeypatch.setenv("DELITE_FAST_KERNELS", "0")
    elif not fast.enabled():
        pytest.skip("compiled kernels do not run here (numba, DELITE_FAST_KERNELS)")
    elif WIDE[variant] and not fast.wide_registers():
        pytest.skip("recorded on 512-bit registers; this core computes in 256-bit ones")
    elif not WIDE[variant] and fast.wide_registers():
        from lite.kernels.fast import winograd

        monkeypatch.setattr(winograd, "DIRECT_FIRST", False)
        monkeypatch.setattr(winograd, "MIN_CHANNELS", 64)
    assert chosen(model) == EXPECTED[variant][model]


def test_the_table_names_each_algorithm_once_and_its_last_entry_takes_every_layer():
    names = [entry.name for entry in ALGORITHMS]
    assert len(set(names)) == len(names) and names[-1] == "im2col"
    odd = ConvLayer((1, 6, 5), (4, 3, 2), 2, (3,), (2,), (1,), (0,), (1,), np.dtype("float64"), False)
    assert first_fit(ALGORITHMS, odd).name == "im2col"


def test_the_choice_is_read_without_making_a_plan(monkeypatch):
    """``first_fit`` on a kernel's ``layer()`` names what its resize ran, compiling nothing."""
    from lite import blocking

    monkeypatch.setattr(blocking, "MIN_MEMBERS", 10**6)  # NOTE: a blocked chain's members plan no table
    model = lite.Model()
    model.build(zoo.mobilenet_v2().SerializeToString(), lite.ModelType.ONNX, lite.Context(thread_num=1))
    convolutions = [k for k in model._engine.shape_kernels if k.type == "Conv2DFusion"]
    assert [first_fit(ALGORITHMS, k.layer()).name for k in convolutions] == [k.algorithm for k in convolutions]
    assert all(k.plan.takes_prologue == (k.algorithm in ("flat_depthwise", "compiled_depthwise"))
               for k in convolutions)


def test_compiled_plans_pack_their_weight_at_build_and_keep_it_across_resizes():
    """The first predict packs nothing (that cost ResNet-50's first predict about 150 ms), and a resize to
    another batch reuses the packed weights instead of packing them again."""
    if not fast.enabled():
        pytest.skip("compiled kernels do not run here (numba, DELITE_FAST_KERNELS)")
    model = lite.Model()
    model.build(zoo.MODELS["squeezenet"](image_size=64).SerializeToString(), lite.ModelType.ONNX,
                lite.Context(thread_num=1))
    convs = [k for k in model._engine.shape_kernels if k.type == "Conv2DFusion"]

    def packed() -> dict:
        return {(k, name): made for k in convs for name, (_, made) in k.derived.made.items()
                if name.startswith("arranged")}

    at_build = packed()
    assert len(at_build) >= len(convs) // 2  # most of SqueezeNet's run compiled plans
    [x] = model.get_inputs()
    model.predict([np.zeros(x.shape, np.float32)])
    model.resize(model.get_inputs(), [[2, *x.shape[1:]]])
    model.predict([np.zeros((2, *x.shape[1:]), np.float32)])
    after = packed()
    assert all(after[key] is made for key, made in at_build.items())
