"""Quantized Add, Sub and Mul of two 8-bit tensors of one shape, in one pass; one-input ops on
8-bit tensors by a table of their 256 values (``lookup``).

Each element is what ``lite.ops.quantized_arithmetic`` says, with its operations in its order:
Add and Mul as onnxruntime's QLinearAdd and QLinearMul compute them (scale ratios, Add's
fused multiply-adds), Sub as ``quantize(dequantize(a) - dequantize(b))``. These kernels are
compiled without fast-math (unlike the package's others), so a division stays a division and no
multiply-add is contracted but the ones written (``fused_multiply_add``): every result is
bit-identical to the numpy path.

Large tensors are cut into chunks of ``CHUNK`` elements that the model's threads share (on the
crew where both inputs and the output are all int8 or all uint8): run on the caller's thread
alone, a residual Add did not get faster with the second thread while the convolutions around it
did (docs/performance.md, the int8 section).
"""

from __future__ import annotations

import functools

import numpy as np
from numba import carray, types
from numba import uint64 as _u  # NOTE: unsigned indices skip the negative-index check, so loops vectorize
from numba.extending import intrinsic

from lite.kernels.fast import compiled, exact_jit, jit
from lite.kernels.fast.crew import as_pointer
from lite.kernels.fast.int8 import byte_bits
from lite.ops.quantized_softmax import SUM_LANES

OPS = {"AddFusion": 0, "SubFusion": 1, "MulFusion": 2}
CHUNK = 1 << 14
"""Elements a piece of a shared loop takes at least."""


@intrinsic
def fused_multiply_add(typingctx, x, y, z):
    """``x * y + z`` of float32 values rounded once (LLVM's fma: one instruction where the CPU has FMA)."""
    def codegen(context, builder, signature, args):
        return builder.fma(*args)
    return types.float32(types.float32, types.float32, types.float32), codegen


@exact_jit
def arithmetic(op, a, a_scale, a_zero, b, b_scale, b_zero, y_scale, y_zero, lo, hi, out):
    """out = requantized (a op b) elementwise over flat arrays of one size (``op``: 0 add, 1 sub,
    2 mul; scales, zero points and bounds float32), as ``lite.ops.quantized_arithmetic`` computes it."""
    if op == 0:
        a_ratio, b_ratio = a_scale / y_scale, b_scale / y_scale
        fixed = y_zero - fused_multiply_add(a_ratio, a_zero, b_ratio * b_zero)
        for i in range(out.size):
            total = fused_multiply_add(np.float32(a[i]), a_ratio, fused_multiply_add(np.float32(b[i]), b_ratio, fixed))
            out[i] = byte_bits(min(max(np.rint(total), lo), hi))
    elif op == 1:
        for i in range(out.size):
            real = (np.float32(a[i]) - a_zero) * a_scale - (np.float32(b[i]) - b_zero) * b_scale
            out[i] = byte_bits(min(max(np.rint(real / y_scale) + y_zero, lo), hi))
    else:
        ratio = (a_scale * b_scale) / y_scale
        for i in range(out.size):
            product = np.float32((np.float32(a[i]) - a_zero) * (np.float32(b[i]) - b_zero))
            out[i] = byte_bits(min(max(np.rint(product * ratio + y_zero), lo), hi))


@exact_jit
def arithmetic_chunks(op, a, a_scale, a_zero, b, b_scale, b_zero, y_scale, y_zero, lo, hi, out, first, last):
    """``arithmetic`` of the chunks ``first`` to ``last - 1`` (``CHUNK`` elements each, the last
    one shorter) of the flat arrays."""
    start, end = first * CHUNK, min(last * CHUNK, out.size)
    arithmetic(op, a[start:end], a_scale, a_zero, b[start:end], b_scale, b_zero, y_scale, y_zero, lo, hi,
               out[start:end])


@functools.cache
def warm(a: np.dtype, b: np.dtype, out: np.dtype) -> None:
    """Compiles ``arithmetic_chunks`` for these input and output types now, at build."""
    f32 = np.float32
    compiled(arithmetic_chunks, 0, np.zeros(1, a), f32(1), f32(0), np.zeros(1, b), f32(1), f32(0), f32(1), f32(0),
             f32(-128), f32(127), np.zeros(1, out), 0, 1)


# The block of an Add, Sub or Mul on the crew (``lite.kernels.fast.crew.Jobs``): the op, the
# addresses, the size, whether the bytes are int8, then the eight float terms as float64 bits;
# then per piece (first, last) chunks:
_OP, _A, _B, _OUT, _SIZE, _SIGNED, _TERMS = range(7)
HEADER = _TERMS + 8


def crew_jobs(op: int, a: np.ndarray, b: np.ndarray, out: np.ndarray, terms: tuple, bounds: list[tuple[int, int]]):
    """The chunks of ``arithmetic_chunks`` as jobs for the crew (a, b and out flat, all of one byte
    type); ``terms``: (a_scale, a_zero, b_scale, b_zero, y_scale, y_zero, lo, hi)."""
    from lite.kernels.fast.crew import Jobs, pieces_block

    block = pieces_block(HEADER, bounds)
    block[:_TERMS] = (op, a.ctypes.data, b.ctypes.data, out.ctypes.data, out.size, out.dtype == np.int8)
    block[_TERMS:HEADER].view(np.float64)[:] = [float(t) for t in terms]
    return Jobs(arithmetic_job, block, len(bounds), (a, b, out))


@exact_jit
def _job_piece(index, data, a, b, out):
    """Piece ``index`` of the block at ``data``, the arrays already typed."""
    block = carray(data, (HEADER + 2 * (index + 1),), np.int64)
    t = carray(data, (HEADER,), np.float64)[_TERMS:]
    f32 = np.float32
    arithmetic_chunks(block[_OP], a, f32(t[0]), f32(t[1]), b, f32(t[2]), f32(t[3]), f32(t[4]), f32(t[5]), f32(t[6]),
                      f32(t[7]), out, block[HEADER + 2 * index], block[HEADER + 2 * index + 1])


def arithmetic_job(index, data, extra):
    """A crew job: piece ``index`` of the op the block at ``data`` describes."""
    block = carray(data, (HEADER,), np.int64)
    size = block[_SIZE]
    if block[_SIGNED]:
        _job_piece(index, data, carray(as_pointer(block[_A]), (size,), np.int8),
                   carray(as_pointer(block[_B]), (size,), np.int8), carray(as_pointer(block[_OUT]), (size,), np.int8))
    else:
        _job_piece(index, data, carray(as_pointer(block[_A]), (size,), np.uint8),
                   carray(as_pointer(block[_B]), (size,), np.uint8),
                   carray(as_pointer(block[_OUT]), (size,), np.uint8))


@exact_jit
def quantize_floats(x, scale, zero_point, lo, hi, out):
    """out = clip(rint(x / scale) + zero_point, lo, hi) over flat arrays of one size: float32 in,
    bytes out, per-tensor float32 terms (``lite.ops.quant.quantize``'s operations, in its order)."""
    for i in range(out.size):
        out[i] = byte_bits(min(max(np.rint(x[i] / scale) + zero_point, lo), hi))


@exact_jit
def global_average(x, x_zero_point, x_scale, inverse_count, y_scale, y_zero_point, lo, hi, out):
    """out[r] = the requantized mean of row r of x (rows, count) bytes: the row's integer sum minus
    count zero points, times x_scale, times inverse_count (1 / count), then ``rint(mean / y_scale)
    + y_zero_point`` clipped; float64 terms. The sum of ``(q - zero_point) * scale`` is exact in
    float64 (multiples of the scale's last bit, fewer than 2 ** 53 of them), so this is the
    float64 reference's value bit for bit."""
    rows, count = x.shape
    for r in range(rows):
        total = 0
        for i in range(count):
            total += x[r, i]
        mean = np.float64(total - count * x_zero_point) * x_scale * inverse_count
        out[r] = byte_bits(min(max(np.rint(mean / y_scale) + y_zero_point, lo), hi))


@functools.cache
def warm_quantize(out: np.dtype) -> None:
    """Compiles ``quantize_floats`` for ``out`` bytes now, at build."""
    f32 = np.float32
    compiled(quantize_floats, np.zeros(1, f32), f32(1), f32(0), f32(-128), f32(127), np.zeros(1, out))


@exact_jit
def scaled_sums(sums, scale, bias, out):
    """out (M, N) float32 = float32(sums) * scale[n], plus bias[n] where ``bias`` is not empty: a
    MatMulInteger's int32 sums (M, N) through its Cast, Mul and Add, each step rounded to float32
    as those kernels round it, the product and the sum not fused (a dynamically quantized linear
    layer's output)."""
    m, n = sums.shape
    if bias.size:
        for i in range(m):
            for j in range(n):
                out[i, _u(j)] = np.float32(np.float32(sums[i, _u(j)]) * scale[_u(j)]) + bias[_u(j)]
        return
    for i in range(m):
        for j in range(n):
            out[i, _u(j)] = np.float32(sums[i, _u(j)]) * scale[_u(j)]


@exact_jit
def scaled_rows(sums, scale, bias, lo, hi, out):
    """``scaled_sums`` with ``scale[r]`` and ``bias[r]`` per row r of (R, C), then clipped to [lo,
    hi] as ``np.clip`` does (a NaN stays NaN): a ConvInteger's sums as rows of (image, channel),
    through its Cast, Mul and an Add with a fused activation."""
    m, n = sums.shape
    with_bias = bias.size > 0
    for i in range(m):
        factor, offset = scale[i], bias[i] if with_bias else np.float32(0)
        for j in range(n):
            value = np.float32(sums[i, _u(j)]) * factor
            if with_bias:
                value = value + offset
            value = lo if value < lo else value
            out[i, _u(j)] = hi if value > hi else value


@functools.cache
def warm_scaled_sums() -> None:
    """Compiles ``scaled_sums`` and ``scaled_rows`` now, at build."""
    f32 = np.float32
    compiled(scaled_sums, np.zeros((1, 1), np.int32), np.ones(1, f32), np.zeros(0, f32), np.zeros((1, 1), f32))
    compiled(scaled_rows, np.zeros((1, 1), np.int32), np.ones(1, f32), np.zeros(0, f32), f32(-np.inf), f32(np.inf),
             np.zeros((1, 1), f32))


@jit
def lookup(table, x, out):
    """out[i] = table[x[i]] for bytes x (flat), a table of 256 values and out (flat) of its type."""
    for i in range(x.size):
        out[_u(i)] = table[x[_u(i)]]


@exact_jit
def softmax_rows(x, width, flip, table, multiplier, zero_point, lo, hi, out, exps, first, last):
    """Rows ``first`` to ``last - 1`` of x (flat bytes, rows of ``width``) into out (flat bytes), as
    ``lite.ops.quantized_softmax`` computes them: e = table[d], d each value's offset below its
    row's largest (``x ^ flip`` orders int8 bytes as unsigned ones), the row's sum in
    SUM_LANES running float32 sums, then ``clip(rint(e * multiplier / sum) + zero_point, lo,
    hi)`` (``exps``: width + SUM_LANES float32 of scratch)."""
    lanes = exps[width:]
    for row in range(first, last):
        base = row * width
        top = np.int64(0)
        for i in range(width):
            top = max(top, np.int64(x[_u(base + i)] ^ flip))
        lanes[:] = 0
        whole = width - width % SUM_LANES
        for i in range(width):
            exps[_u(i)] = table[_u(top - np.int64(x[_u(base + i)] ^ flip))]
        for j in range(0, whole, SUM_LANES):
            for lane in range(SUM_LANES):
                lanes[_u(lane)] += exps[_u(j + lane)]
        total = np.float32(0)
        for lane in range(SUM_LANES):
            total += lanes[_u(lane)]
        for i in range(whole, width):
            total += exps[_u(i)]
        for i in range(width):
            out[_u(base + i)] = byte_bits(min(max(np.rint(exps[_u(i)] * multiplier / total) + zero_point, lo), hi))


# The block of a quantized softmax on the crew: the addresses, the row width and count, the flip,
# then the four float terms as float64 bits; then per piece (first, last, exps):
_SX, _STABLE, _SOUT, _SWIDTH, _SROWS, _SFLIP, _SSCALE = range(7)
_SOFTMAX_HEADER = _SSCALE + 4


def softmax_crew_jobs(x: np.ndarray, table: np.ndarray, out: np.ndarray, width: int, flip, terms: tuple,
                      exps: list[np.ndarray], bounds: list[tuple[int, int]]):
    """``softmax_rows``' rows as jobs for the crew (x and out flat bytes; ``terms``: multiplier, zero
    point, lo, hi; ``exps``: each piece's scratch)."""
    from lite.kernels.fast.crew import Jobs, pieces_block

    block = pieces_block(_SOFTMAX_HEADER, bounds, [[e] for e in exps])
    block[:_SSCALE] = (x.ctypes.data, table.ctypes.data, out.ctypes.data, width, x.size // width, int(flip))
    block[_SSCALE:_SOFTMAX_HEADER].view(np.float64)[:] = [float(t) for t in terms]
    return Jobs(softmax_job, block, len(bounds), (x, table, out, *exps[:len(bounds)]))


@exact_jit
def _softmax_piece(index, data):
    block = carray(data, (_SOFTMAX_HEADER + 3 * (index + 1),), np.int64)
    t = carray(data, (_SOFTMAX_HEADER,), np.float64)[_SSCALE:]
    size, width = block[_SROWS] * block[_SWIDTH], block[_SWIDTH]
    piece = _SOFTMAX_HEADER + 3 * index
    f32 = np.float32
    softmax_rows(carray(as_pointer(block[_SX]), (size,), np.uint8), width, np.uint8(block[_SFLIP]),
                 carray(as_pointer(block[_STABLE]), (256,), np.float32), f32(t[0]), f32(t[1]), f32(t[2]), f32(t[3]),
                 carray(as_pointer(block[_SOUT]), (size,), np.uint8),
                 carray(as_pointer(block[piece + 2]), (width + SUM_LANES,), np.float32), block[piece],
                 block[piece + 1])


def softmax_job(index, data, extra):
    """A crew job: piece ``index`` of the quantized softmax the block at ``data`` describes."""
    _softmax_piece(index, data)


@jit
def layer_norm_rows(x, table, scale, bias, epsilon, y_scale, y_zero, lo, hi, out, row, first, last):
    """Rows ``first`` to ``last - 1`` of x (rows, D) bytes into out (rows, D) bytes: each row
    dequantized by ``table`` (the float32 value of each byte) into ``row`` (D float32), normalized
    as ``lite.kernels.fast.norm.layer_norm`` does, then ``clip(rint(v / y_scale) + y_zero, lo, hi)``."""
    width = x.shape[1]
    for r in range(first, last):
        total = np.float32(0)
        for i in range(width):
            value = table[x[r, _u(i)]]
            row[_u(i)] = value
            total += value
        mean = total / width
        spread = np.float32(0)
        for i in range(width):
            centered = row[_u(i)] - mean
            spread += centered * centered
        inverse = np.float32(1) / np.sqrt(spread / width + epsilon)
        for i in range(width):
            value = (row[_u(i)] - mean) * inverse * scale[_u(i)] + bias[_u(i)]
            out[r, _u(i)] = byte_bits(min(max(np.rint(value / y_scale) + y_zero, lo), hi))


# The block of a quantized layer norm on the crew: the addresses, the rows and their width, then
# the five float terms as float64 bits; then per piece (first, last, row):
_LX, _LTABLE, _LSCALE, _LBIAS, _LOUT, _LROWS, _LWIDTH, _LEPSILON = range(8)
_NORM_HEADER = _LEPSILON + 5


def layer_norm_crew_jobs(x: np.ndarray, table: np.ndarray, scale: np.ndarray, bias: np.ndarray, terms: tuple,
                         out: np.ndarray, rows: list[np.ndarray], bounds: list[tuple[int, int]]):
    """``layer_norm_rows``' rows as jobs for the crew (x and out (rows, D) bytes; ``terms``: epsilon,
    y_scale, y_zero, lo, hi; ``rows``: each piece's scratch)."""
    from lite.kernels.fast.crew import Jobs, pieces_block

    block = pieces_block(_NORM_HEADER, bounds, [[row] for row in rows])
    block[:_LEPSILON] = (x.ctypes.data, table.ctypes.data, scale.ctypes.data, bias.ctypes.data, out.ctypes.data,
                         *x.shape)
    block[_LEPSILON:_NORM_HEADER].view(np.float64)[:] = [float(t) for t in terms]
    return Jobs(layer_norm_job, block, len(bounds), (x, table, scale, bias, out, *rows[:len(bounds)]))


@jit
def _layer_norm_piece(index, data):
    block = carray(data, (_NORM_HEADER + 3 * (index + 1),), np.int64)
    t = carray(data, (_NORM_HEADER,), np.float64)[_LEPSILON:]
    shape, width = (block[_LROWS], block[_LWIDTH]), block[_LWIDTH]
    piece = _NORM_HEADER + 3 * index
    f32 = np.float32
    layer_norm_rows(carray(as_pointer(block[_LX]), shape, np.uint8), carray(as_pointer(block[_LTABLE]), (256,), f32),
                    carray(as_pointer(block[_LSCALE]), (width,), f32), carray(as_pointer(block[_LBIAS]), (width,), f32),
                    f32(t[0]), f32(t[1]), f32(t[2]), f32(t[3]), f32(t[4]),
                    carray(as_pointer(block[_LOUT]), shape, np.uint8),
                    carray(as_pointer(block[piece + 2]), (width,), f32), block[piece], block[piece + 1])


def layer_norm_job(index, data, extra):
    """A crew job: piece ``index`` of the quantized layer norm the block at ``data`` describes."""
    _layer_norm_piece(index, data)


@functools.cache
def warm_layer_norm() -> None:
    """Compiles ``layer_norm_rows`` now, at build (bytes in and out)."""
    f32 = np.float32
    compiled(layer_norm_rows, np.zeros((1, 4), np.uint8), np.zeros(256, f32), np.ones(4, f32), np.zeros(4, f32),
             f32(1e-5), f32(1), f32(0), f32(0), f32(255), np.zeros((1, 4), np.uint8), np.zeros(4, f32), 0, 1)


@functools.cache
def warm_softmax(out: np.dtype) -> None:
    """Compiles ``softmax_rows`` for ``out`` bytes now, at build."""
    f32 = np.float32
    compiled(softmax_rows, np.zeros(1, np.uint8), 1, np.uint8(0), np.ones(256, f32), f32(1), f32(0), f32(0),
             f32(255), np.zeros(1, out), np.zeros(1 + SUM_LANES, f32), 0, 1)


@functools.cache
def warm_lookup(values: type = np.uint8) -> None:
    """Compiles ``lookup`` of a table of ``values`` (bytes, or float32) now, at build."""
    compiled(lookup, np.zeros(256, values), np.zeros(1, np.uint8), np.zeros(1, values))


@functools.cache
def warm_average(x: np.dtype, out: np.dtype) -> None:
    """Compiles ``global_average`` for these byte types now, at build."""
    compiled(global_average, np.zeros((1, 1), x), 0.0, 1.0, 1.0, 1.0, 0.0, -128.0, 127.0, np.zeros(1, out))
