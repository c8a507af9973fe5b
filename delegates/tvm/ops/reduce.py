"""ReduceFusion, and Softmax / LogSoftmax over a set of axes."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tvm import relax

from lite.delegates.tvm.ops.common import Node, emitter
from lite.kernel import Kernel


def _summed(before, after):
    """A reduction that sums ``before(x)`` and applies ``after`` to the sum."""
    def reduce(x, axis, keepdims):
        total = relax.op.sum(x if before is None else before(x), axis=axis, keepdims=keepdims)
        return total if after is None else after(total)

    return reduce


def _log_sum_exp(x, axis, keepdims):
    """log(sum(exp(x - max))) + max, which does not overflow."""
    shift = relax.op.max(x, axis=axis, keepdims=True)
    total = relax.op.add(relax.op.log(relax.op.sum(relax.op.exp(relax.op.subtract(x, shift)), axis=axis,
                                                   keepdims=True)), shift)
    return total if keepdims else relax.op.squeeze(total, axis)


REDUCTIONS = {"MEAN": relax.op.mean, "MAX": relax.op.max, "MIN": relax.op.min, "SUM": relax.op.sum,
              "PROD": relax.op.prod, "L1": _summed(relax.op.abs, None), "L2": _summed(relax.op.square, relax.op.sqrt),
              "SUM_SQUARE": _summed(relax.op.square, None), "LOG_SUM": _summed(None, relax.op.log),
              "LOG_SUM_EXP": _log_sum_exp}


def axes_of(values, rank: int) -> list[int]:
    return sorted(int(a) % rank for a in values)


def check_reduce(kernel: Kernel, attrs: Mapping[str, Any]) -> str | None:
    if attrs["reduce_mode"] not in REDUCTIONS:
        return f"ReduceFusion {attrs['reduce_mode']}: unknown reduce mode"
    if len(kernel.inputs) > 1 and kernel.inputs[1] is not None:
        return "ReduceFusion: its axes arrive as a tensor; this delegate compiles them from the attribute"
    if 0 in kernel.inputs[0].shape:
        return "ReduceFusion of an empty tensor: not compiled"
    return None


@emitter("ReduceFusion", check=check_reduce)
def reduce(node: Node) -> relax.Expr:
    """reduce_mode over ``axes`` (empty: every axis, or none with noop_with_empty_axes)."""
    attrs, rank = node.attrs, len(node.shape(0))
    if not attrs["axes"] and attrs["noop_with_empty_axes"]:
        return node.x(0)
    axes = axes_of(attrs["axes"], rank) if attrs["axes"] else list(range(rank))
    return REDUCTIONS[attrs["reduce_mode"]](node.x(0), axis=axes, keepdims=bool(attrs["keep_dims"]))


def check_normalization(kernel: Kernel, attrs: Mapping[str, Any]) -> str | None:
    if 0 in kernel.inputs[0].shape:
        return f"{kernel.type} of an empty tensor: not compiled"
    return None


@emitter("Softmax", "LogSoftmax", check=check_normalization)
def softmax(node: Node) -> relax.Expr:
    """One axis: Relax's (log_)softmax; several: shifted by the max, normalised over all of them."""
    x, rank = node.x(0), len(node.shape(0))
    axes = axes_of(node.attrs["axis"], rank)
    log = node.kernel.type == "LogSoftmax"
    if len(axes) == 1:
        return (relax.op.nn.log_softmax if log else relax.op.nn.softmax)(x, axis=axes[0])
    shifted = node.g.bb.emit(relax.op.subtract(x, relax.op.max(x, axis=axes, keepdims=True)))
    exps = relax.op.exp(shifted)
    total = relax.op.sum(exps, axis=axes, keepdims=True)
    return relax.op.subtract(shifted, relax.op.log(total)) if log else relax.op.divide(exps, total)
