"""Sliding windows (convolutions, pools): pad modes, pads, output sizes, average-pool divisors.

Pads follow ONNX: ``pad_list`` is [begin of each spatial axis..., end of each...] (for 2-D
[top, left, bottom, right]); SAME_UPPER / SAME_LOWER are ONNX's auto_pad, computed from the
input size so that a window op's output size is ceil(input / stride), and a transposed
convolution's is input * stride.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

PAD_MODES = ("PAD", "SAME_UPPER", "SAME_LOWER", "VALID")
SAME_MODES = ("SAME_UPPER", "SAME_LOWER")
ROUND_MODES = ("FLOOR", "CEIL")

Pads = tuple[tuple[int, ...], tuple[int, ...]]  # (begins, ends), one of each per spatial axis


def per_axis(values: Iterable[int] | None, rank: int = 2) -> tuple[int, ...]:
    """A per-spatial-axis attribute (stride, dilation, kernel size); empty means 1 on every axis."""
    values = tuple(int(v) for v in values or ())
    return values or (1,) * rank


def effective(kernel_size: int, dilation: int) -> int:
    """The extent of a dilated kernel."""
    return (kernel_size - 1) * dilation + 1


def split_total(total: int, pad_mode: str) -> tuple[int, int]:
    """(begin, end) sharing a total pad: SAME_UPPER puts the odd unit at the end, others at the begin."""
    begin = total // 2 if pad_mode == "SAME_UPPER" else total - total // 2
    return begin, total - begin


def split_totals(totals: Iterable[int], pad_mode: str) -> Pads:
    """(begins, ends) sharing each axis's total pad as ``split_total`` does."""
    pairs = [split_total(total, pad_mode) for total in totals]
    return tuple(b for b, _ in pairs), tuple(e for _, e in pairs)


def explicit_pads(pad_mode: str, pad_list: Sequence[int] | None, rank: int) -> Pads:
    """(begins, ends) of PAD (``pad_list``, empty means none) or VALID (none)."""
    pads = tuple(int(p) for p in pad_list or ()) if pad_mode == "PAD" else ()
    pads = pads or (0,) * (2 * rank)
    return pads[:rank], pads[rank:]


def window_pads(pad_mode: str, pad_list: Sequence[int] | None, sizes: Sequence[int], kernel_size: Sequence[int],
                strides: Sequence[int], dilations: Sequence[int]) -> Pads:
    """(begins, ends): the pads of every spatial axis of a convolution or pool for ``pad_mode``."""
    if pad_mode not in SAME_MODES:
        return explicit_pads(pad_mode, pad_list, len(sizes))
    totals = [max(0, (-(-size // s) - 1) * s + effective(k, d) - size)
              for size, k, s, d in zip(sizes, kernel_size, strides, dilations, strict=True)]
    return split_totals(totals, pad_mode)


def output_size(size: int, kernel_size: int, stride: int, dilation: int, begin: int, end: int,
                ceil: bool = False) -> int:
    """Number of window positions along one axis (ONNX; ``ceil`` drops a window starting in the end pad)."""
    span = size + begin + end - effective(kernel_size, dilation)
    if span < 0:
        return 0
    if not ceil:
        return span // stride + 1
    count = -(-span // stride) + 1
    return count - 1 if (count - 1) * stride >= size + begin else count


def ceil_rounds(round_mode: str, pad_mode: str) -> bool:
    """Whether a pool's output size rounds up: CEIL, with explicit or VALID pads (SAME pads
    already give ceil(input / stride) outputs; ONNX)."""
    return round_mode == "CEIL" and pad_mode in ("PAD", "VALID")


def transposed_extent(size: int, kernel_size: int, stride: int, dilation: int, output_padding: int) -> int:
    """How far a transposed convolution's taps reach along one axis, before pads crop it."""
    return stride * (size - 1) + output_padding + effective(kernel_size, dilation)


def transposed_pads(pad_mode: str, pad_list: Sequence[int] | None, sizes: Sequence[int], kernel_size: Sequence[int],
                    strides: Sequence[int], dilations: Sequence[int], output_paddings: Sequence[int]) -> Pads:
    """(begins, ends) of a transposed convolution; SAME pads make the output input * stride (ONNX)."""
    if pad_mode not in SAME_MODES:
        return explicit_pads(pad_mode, pad_list, len(sizes))
    totals = [max(0, transposed_extent(size, k, s, d, p) - size * s)
              for size, k, s, d, p in zip(sizes, kernel_size, strides, dilations, output_paddings, strict=True)]
    return split_totals(totals, pad_mode)


def window_counts(size: int, outputs: int, kernel_size: int, stride: int, begin: int, end: int,
                  count_include_pad: bool, dilation: int = 1) -> np.ndarray:
    """Average pooling's divisor along one axis, per output position: the window's taps inside
    the input, plus those in the pads when ``count_include_pad`` (never those a CEIL window
    reaches past the end pad)."""
    starts = np.arange(outputs) * stride - begin
    low, high = (-begin, size + end) if count_include_pad else (0, size)
    if dilation == 1:
        return np.minimum(starts + kernel_size, high) - np.maximum(starts, low)
    taps = starts[:, None] + np.arange(kernel_size) * dilation
    return ((taps >= low) & (taps < high)).sum(axis=1)
