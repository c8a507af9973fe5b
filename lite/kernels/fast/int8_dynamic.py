"""DynamicQuantizeLinear's two passes, compiled and shared out among the model's threads.

The first pass finds the range of a float32 tensor: its least and greatest values, 0 included as
ONNX defines the range. It reads the values' int32 bits as order keys: non-negative values keep
their bits, negative ones have all but the sign flipped, so keys order as the values do (-0.0
just below +0.0) and NaNs lie beyond the infinities. The least and greatest are then integer
minima and maxima, which vectorize without fast-math and see a NaN instead of skipping it. Each
piece writes its own pair of keys; ``range_terms`` combines them into the scale and zero point.
The second pass is ``int8_elementwise.quantize_floats`` on each piece, those terms read from a
small array.

Both passes work in chunks of ``CHUNK`` elements, on the crew where it runs (``dynamic_job``).
"""

from __future__ import annotations

import numpy as np
from numba import carray
from numba import uint64 as _u  # NOTE: unsigned indices skip the negative-index check, so loops vectorize

from lite.kernels.fast import compiled, exact_jit, jit
from lite.kernels.fast.crew import as_pointer
from lite.kernels.fast.int8_elementwise import CHUNK, quantize_floats

_MAGNITUDE = 0x7FFFFFFF
_POSITIVE_INFINITY_KEY = 0x7F800000  # a greater key is a NaN's
_NEGATIVE_INFINITY_KEY = -0x7F800001  # a lesser key is a NaN's


@jit
def range_chunks(bits, ranges, slot, first, last):
    """ranges[slot] = the least and greatest order keys of chunks ``first`` to ``last - 1`` of the
    flat int32 view ``bits`` of a float32 tensor, 0 (+0.0's key) included."""
    start, end = first * CHUNK, min(last * CHUNK, bits.size)
    low, high, shift, magnitude = np.int32(0), np.int32(0), np.int32(31), np.int32(_MAGNITUDE)
    for i in range(start, end):
        value = bits[_u(i)]
        key = np.int32(value ^ ((value >> shift) & magnitude))  # NOTE: its own inverse: keys back to bits
        low, high = min(low, key), max(high, key)
    ranges[slot, 0], ranges[slot, 1] = low, high


@exact_jit
def range_terms(ranges, keys, values, terms):
    """terms = (y_scale, y_zero_point, 0, 255) of the range the pieces' ``ranges`` (int32 keys, a
    pair a piece) hold, as ``lite.ops.integer.range_terms`` computes them (float32 steps), and
    True; False, terms untouched, where the range holds a NaN or an infinity or gives a scale
    that is not finite and positive (numpy's path gives those IEEE results). ``keys`` (int32,
    2) and ``values`` (its float32 view) are scratch."""
    low, high = ranges[0, 0], ranges[0, 1]
    for piece in range(1, ranges.shape[0]):
        low, high = min(low, ranges[piece, 0]), max(high, ranges[piece, 1])
    if low <= _NEGATIVE_INFINITY_KEY or high >= _POSITIVE_INFINITY_KEY:
        return False
    shift, magnitude = np.int32(31), np.int32(_MAGNITUDE)
    keys[0], keys[1] = low ^ ((low >> shift) & magnitude), high ^ ((high >> shift) & magnitude)
    least, greatest = values[0], values[1]
    span = np.float32(1.0) if greatest == least else greatest - least
    scale = np.float32(span / np.float32(255.0))
    if not (np.float32(0.0) < scale < np.float32(np.inf)):
        return False
    terms[0], terms[2], terms[3] = scale, np.float32(0.0), np.float32(255.0)
    terms[1] = np.rint(min(max(np.float32(0.0) - least / scale, np.float32(0.0)), np.float32(255.0)))
    return True


@exact_jit
def quantize_chunks(x, terms, out, first, last):
    """``quantize_floats`` of chunks ``first`` to ``last - 1`` of flat float32 ``x`` into ``out``
    (bytes), with ``terms`` (float32: scale, zero point, lo, hi)."""
    start, end = first * CHUNK, min(last * CHUNK, x.size)
    quantize_floats(x[start:end], terms[0], terms[1], terms[2], terms[3], out[start:end])


def warm() -> None:
    """Compiles both passes for uint8 outputs now, at build."""
    f32 = np.float32
    keys = np.zeros(2, np.int32)
    compiled(range_chunks, keys, np.zeros((1, 2), np.int32), 0, 0, 1)
    compiled(range_terms, np.zeros((1, 2), np.int32), keys, keys.view(f32), np.zeros(4, f32))
    compiled(quantize_chunks, np.zeros(1, f32), np.array([1, 0, 0, 255], f32), np.zeros(1, np.uint8), 0, 1)


# The block of either pass on the crew (``lite.kernels.fast.crew.Jobs``): which pass (0 range,
# 1 quantize), the addresses of x, the output bytes, the ranges (int32, two a piece) and the
# terms (float32), x's size and the number of range slots; then per piece (first, last) chunks:
_PASS, _X, _OUT, _RANGES, _TERMS, _SIZE, _SLOTS = range(7)
HEADER = 7


def crew_jobs(quantizing: bool, x: np.ndarray, out: np.ndarray, ranges: np.ndarray, terms: np.ndarray,
              bounds: list[tuple[int, int]]):
    """One pass's chunks as jobs for the crew (x float32 and out uint8, both flat)."""
    from lite.kernels.fast.crew import Jobs, pieces_block

    block = pieces_block(HEADER, bounds)
    block[:HEADER] = (int(quantizing), x.ctypes.data, out.ctypes.data, ranges.ctypes.data, terms.ctypes.data, x.size,
                      ranges.shape[0])
    return Jobs(dynamic_job, block, len(bounds), (x, out, ranges, terms))


def dynamic_job(index, data, extra):
    """A crew job: piece ``index`` of the pass the block at ``data`` describes."""
    block = carray(data, (HEADER + 2 * (index + 1),), np.int64)
    first, last, size = block[HEADER + 2 * index], block[HEADER + 2 * index + 1], block[_SIZE]
    if block[_PASS]:
        quantize_chunks(carray(as_pointer(block[_X]), (size,), np.float32),
                        carray(as_pointer(block[_TERMS]), (4,), np.float32),
                        carray(as_pointer(block[_OUT]), (size,), np.uint8), first, last)
    else:
        range_chunks(carray(as_pointer(block[_X]), (size,), np.int32),
                     carray(as_pointer(block[_RANGES]), (block[_SLOTS], 2), np.int32), index, first, last)
