"""Activations fused into a producer (Conv2DFusion, MatMulFusion, AddFusion, ...): clips whose
bounds ``lite.ops.activation.FUSED_CLIPS`` gives; and a producer's whole epilogue (bias, a
residual, the activation), compiled into one pass where ``lite.kernels.fast`` runs."""

from __future__ import annotations

import math
from functools import partial

import numpy as np

from lite.kernels import fast
from lite.kernels.base import NativeKernel, Step, copy_step
from lite.ops.activation import FUSED_ACTIVATIONS, FUSED_CLIPS

try:  # NOTE: the ufunc np.clip dispatches to; calling it skips np.clip's three Python wrapper layers
    from numpy._core.umath import clip as clip_ufunc
except ImportError:  # numpy < 2
    clip_ufunc = np.clip


def fused_activation(kernel: NativeKernel) -> str:
    """The kernel's ``activation_type``; fails unless it is one a producer can fuse."""
    activation = kernel.attrs["activation_type"]
    if activation not in FUSED_ACTIVATIONS:
        kernel.fail(f"activation_type {activation!r} cannot be fused; expected one of {FUSED_ACTIVATIONS}")
    return activation


def apply_fused_activation(out: np.ndarray, activation_type: str) -> None:
    """Applies a fused activation to ``out`` in place."""
    step = activation_step(out, activation_type)
    if step is not None:
        step()


def activation_step(out: np.ndarray, activation_type: str, source: np.ndarray | None = None) -> Step | None:
    """A call writing the fused activation of ``source`` (default: ``out`` itself) into ``out``.

    None for NO_ACTIVATION in place (nothing to do); with another source, a plain copy.
    """
    # NOTE: ReLU as a clip runs faster than np.maximum(x, 0)
    bounds = clip_bounds(activation_type, out.dtype)
    if bounds is not None:
        return partial(clip_ufunc, out if source is None else source, *bounds, out=out)
    return None if source is None else copy_step(out, source)


def clip_bounds(activation_type: str, dtype: np.dtype) -> tuple | None:
    """The clip bounds of a fused activation (None: none) as ``dtype`` can hold them: an integer
    type's range stands in for an infinite bound."""
    bounds = FUSED_CLIPS.get(activation_type)
    if bounds is None or dtype.kind == "f":
        return bounds
    info = np.iinfo(dtype)
    return tuple(dtype.type(min(max(bound, info.min), info.max)) for bound in bounds)


def epilogue_steps(out: np.ndarray, bias: np.ndarray | None, residual: np.ndarray | None,
                   activation_type: str) -> list[Step]:
    """Calls computing ``activation(out + bias + residual)`` in place on ``out`` (N, C, ...), the
    bias per channel (axis 1) and the residual of out's shape; None leaves a term out.

    One compiled pass where it pays (a bias or residual beside a clip, or a residual) and the
    arrays suit the compiled code; numpy passes otherwise, with the same results.
    """
    bounds = clip_bounds(activation_type, out.dtype)
    rows = out.reshape(*out.shape[:2], math.prod(out.shape[2:]))
    if (residual is not None or (bias is not None and bounds is not None)) and compilable(out, residual):
        from lite.kernels.fast import epilogue  # NOTE: imports the compiler: only when used

        epilogue.warm(out.dtype.name)
        shift, lo, hi = compiled_terms(bias, out.shape[1], activation_type, out.dtype)
        if residual is None:
            return [partial(epilogue.bias_clip, rows, shift, lo, hi)]
        return [partial(epilogue.bias_residual_clip, rows, shift, residual.reshape(rows.shape), lo, hi)]
    steps: list[Step] = []
    if bias is not None:
        steps.append(partial(np.add, rows, bias.reshape(-1, 1), out=rows))
    if residual is not None:
        steps.append(partial(np.add, out, residual, out=out))
    activation = activation_step(out, activation_type)
    return steps if activation is None else [*steps, activation]


def activation_epilogue_step(out: np.ndarray, bias: np.ndarray | None, activation_type: str, alpha: float) -> Step:
    """A call computing ``activation(out + bias)`` in place on float32 ``out`` (N, C, ...), in one
    compiled pass, for an activation of ``lite.kernels.fast.activation.EPILOGUE_CODES``."""
    from lite.kernels.fast import epilogue  # NOTE: imports the compiler: only when used

    epilogue.warm_activation()
    rows = out.reshape(*out.shape[:2], math.prod(out.shape[2:]))
    code, alpha = activation_code((activation_type, alpha), out.dtype)
    return partial(epilogue.bias_activation, rows, compiled_terms(bias, out.shape[1], "NO_ACTIVATION", out.dtype)[0],
                   code, alpha)


def activation_code(activation: tuple[str, float] | None, dtype: np.dtype) -> tuple[int, np.generic]:
    """(code, alpha) of an epilogue activation as compiled loops take them: CLIP_CODE for None."""
    from lite.kernels.fast.activation import CLIP_CODE, EPILOGUE_CODES

    if activation is None:
        return CLIP_CODE, dtype.type(1)
    return EPILOGUE_CODES[activation[0]], dtype.type(activation[1])


def compilable(out: np.ndarray, residual: np.ndarray | None) -> bool:
    """Whether compiled epilogues take these arrays (writable, C-contiguous, one float dtype)."""
    arrays = [out] if residual is None else [out, residual]
    return (fast.enabled() and out.dtype.name in fast.FAST_DTYPES and fast.takes(*arrays)
            and all(a.dtype == out.dtype for a in arrays) and (residual is None or residual.shape == out.shape))


def compiled_terms(bias: np.ndarray | None, channels: int, activation_type: str,
                   dtype: np.dtype) -> tuple[np.ndarray, np.generic, np.generic]:
    """(bias, lo, hi) as compiled epilogues take them: the bias as a writable ``dtype`` array (zeros
    for None) and the activation's clip bounds as ``dtype`` scalars (infinite where it has none)."""
    shift = np.zeros(channels, dtype) if bias is None else np.array(bias, dtype, copy=True)
    lo, hi = clip_bounds(activation_type, dtype) or (-np.inf, np.inf)
    return shift, dtype.type(lo), dtype.type(hi)
