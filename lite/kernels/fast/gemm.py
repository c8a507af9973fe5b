"""Products with a constant right operand packed once: y = clip(a @ b + bias, lo, hi), float32.

A transformer's linear layers multiply activations a (M, K) by a constant weight b (K, N). BLAS
packs b into its own panels on every call (the whole weight copied per product) and adds the bias
in a second pass. Here b is packed once, at build, into panels of ``WIDTH``
columns (each panel K rows of WIDTH contiguous floats, the last one zero-padded), and
``lite.kernels.fast.tile``'s register tile reads ``ROWS`` rows of a in place (no copy of a) and
one panel; each panel's columns get the bias and the clip while they are in cache. The panels
are independent, so threads take ranges of them (the crew's jobs; each reads all of a).

(Measured on a BERT-style encoder: docs/performance.md, linear layers.)
"""

from __future__ import annotations

import functools

import numpy as np
from numba import carray, types
from numba import uint64 as _u  # NOTE: unsigned indices skip the negative-index check, so the loops vectorize
from numba.extending import intrinsic

from lite.kernels.fast import compiled, jit
from lite.kernels.fast.activation import CLIP_CODE, activate_run
from lite.kernels.fast.crew import as_pointer
from lite.kernels.fast.tile import FLOAT, ROWS, UNROLL, WIDTH, emit_tile

ONE = np.float32(1)
MIN_ROWS = ROWS
"""The rows of a whole tile: a product of fewer rows (a decode step's) runs ``row_tile`` per row."""


@intrinsic
def tile(typingctx, a, a_stride, panel, terms, out, out_stride):
    """out[r, j] = sum over k < terms of a[r * a_stride + k] * panel[k * WIDTH + j], for ROWS rows r
    (``out_stride`` floats apart) and WIDTH columns j; every argument an address or a count."""
    def codegen(context, builder, signature, args):
        a_at, a_step, panel_at, count, out_at, out_step = args
        floats = FLOAT.as_pointer()
        a_p, panel_p, out_p = (builder.inttoptr(at, floats) for at in (a_at, panel_at, out_at))
        rows = [builder.gep(a_p, [builder.mul(a_step, a_step.type(r))]) for r in range(ROWS)]
        emit_tile(builder, lambda k, r: builder.gep(rows[r], [k]),
                  lambda k: builder.gep(panel_p, [builder.mul(k, k.type(WIDTH))]), count, out_p, out_step,
                  unroll=UNROLL)
        return context.get_dummy_value()
    return types.void(*(types.int64,) * 6), codegen


@intrinsic
def row_tile(typingctx, a, panel, terms, out):
    """out[j] = sum over k < terms of a[k] * panel[k * WIDTH + j] for WIDTH columns j: one row of a
    (a GEMV's panel, bound by how fast the panel streams in); every argument an address or a count."""
    def codegen(context, builder, signature, args):
        a_at, panel_at, count, out_at = args
        floats = FLOAT.as_pointer()
        a_p, panel_p, out_p = (builder.inttoptr(at, floats) for at in (a_at, panel_at, out_at))
        emit_tile(builder, lambda k, r: builder.gep(a_p, [k]),
                  lambda k: builder.gep(panel_p, [builder.mul(k, k.type(WIDTH))]), count, out_p, count.type(0), rows=1)
        return context.get_dummy_value()
    return types.void(*(types.int64,) * 4), codegen


def pack(b: np.ndarray) -> np.ndarray:
    """b (K, N) as ``product`` reads it: (panels, K, WIDTH) float32, zero columns past N."""
    panels = np.empty((panel_count(b.shape[1]), b.shape[0], WIDTH), np.float32)
    pack_into(np.ascontiguousarray(b, np.float32), panels)
    return panels


@jit
def panel_count(n):
    """How many panels a right operand of ``n`` columns packs into."""
    return -(-n // WIDTH)


@jit
def pack_into(b, panels):
    """b (K, N) into ``panels`` (``panel_count(N)``, K, WIDTH), zero columns past N."""
    k, n = b.shape
    for panel in range(panels.shape[0]):
        column = panel * WIDTH
        count = min(WIDTH, n - column)
        for row in range(k):
            for j in range(count):
                panels[panel, row, j] = b[row, column + j]
            for j in range(count, WIDTH):
                panels[panel, row, j] = 0


@jit
def product(a, packed, bias, lo, hi, out, first, last, code, alpha):
    """Columns of panels ``first`` to ``last - 1`` of out (M, N) = clip(a (M, K) @ b + bias, lo, hi),
    b packed by ``pack``, then the activation of ``code`` (``lite.kernels.fast.activation.EPILOGUE_CODES``)
    with ``alpha``; a and out C-contiguous (fewer rows than ROWS: ``_thin_panel``)."""
    m, k = a.shape
    n = out.shape[1]
    spare = np.empty((ROWS, WIDTH), np.float32)
    for panel in range(first, last):
        column = panel * WIDTH
        count = min(WIDTH, n - column)
        if m < ROWS:
            _thin_panel(a, packed[panel], out, column, count, spare)
        else:
            _tiles(a, packed[panel], out, column, count, spare)
        _finish(out, bias, lo, hi, column, count, code, alpha)


@jit
def _tiles(a, panel, out, column, count, spare):
    """One panel's columns of a product of ROWS rows or more: the register tile on each ROWS rows."""
    m, k = a.shape
    n = out.shape[1]
    for row in range(0, m, ROWS):
        top = min(row, m - ROWS)  # NOTE: the last block overlaps the one before rather than run short
        if count == WIDTH:
            tile(a.ctypes.data + top * k * 4, k, panel.ctypes.data, k, out.ctypes.data + (top * n + column) * 4, n)
        else:
            tile(a.ctypes.data + top * k * 4, k, panel.ctypes.data, k, spare.ctypes.data, WIDTH)
            for r in range(ROWS):
                for j in range(count):
                    out[top + r, column + j] = spare[r, j]


@jit
def _thin_panel(a, panel, out, column, count, spare):
    """One panel's columns of a product of fewer rows than a tile: ``row_tile`` row by row (the panel
    streams in from memory for the first row and is in cache for the others)."""
    m, k = a.shape
    n = out.shape[1]
    for r in range(m):
        if count == WIDTH:
            row_tile(a.ctypes.data + r * k * 4, panel.ctypes.data, k, out.ctypes.data + (r * n + column) * 4)
        else:
            row_tile(a.ctypes.data + r * k * 4, panel.ctypes.data, k, spare.ctypes.data)
            for j in range(count):
                out[r, column + j] = spare[0, j]


@jit
def _finish(out, bias, lo, hi, column, count, code, alpha):
    """out[:, column:column + count] = clip(out + bias, lo, hi) and the activation of ``code``, the
    panel's columns in cache."""
    m, n = out.shape
    flat = out.reshape(m * n)
    for r in range(m):
        for j in range(count):
            out[r, _u(column + j)] = min(max(out[r, _u(column + j)] + bias[_u(column + j)], lo), hi)
        if code != CLIP_CODE:
            activate_run(flat, r * n + column, count, flat.dtype.type(0), code, alpha)


@functools.cache
def warm() -> None:
    """Compiles ``pack`` and ``product`` now (at build), not in the first predict."""
    a, out = np.zeros((ROWS, 2), np.float32), np.zeros((ROWS, 3), np.float32)
    panels = np.zeros((1, 2, WIDTH), np.float32)
    compiled(pack_into, np.zeros((2, 3), np.float32), panels)
    compiled(panel_count, 3)
    compiled(product, a, panels, np.zeros(3, np.float32), np.float32(-np.inf), np.float32(np.inf), out, 0, 1,
             CLIP_CODE, ONE)


# The block of a product on the crew (``lite.kernels.fast.crew.Jobs``), then (first, last) a piece:
_A, _M, _K, _PACKED, _PANELS, _BIAS, _OUT, _N, _CODE, _LO, _HI, _ALPHA = range(12)
_HEADER = 12


def crew_jobs(a: np.ndarray, packed: np.ndarray, bias: np.ndarray, lo: np.float32, hi: np.float32, out: np.ndarray,
              bounds: list[tuple[int, int]], code: int, alpha: np.float32):
    """The product's panels as jobs for the crew, one per piece of ``bounds`` (``product``'s
    arguments otherwise)."""
    from lite.kernels.fast.crew import Jobs, pieces_block

    block = pieces_block(_HEADER, bounds)
    block[[_A, _M, _K, _PACKED, _PANELS]] = a.ctypes.data, *a.shape, packed.ctypes.data, packed.shape[0]
    block[[_BIAS, _OUT, _N, _CODE]] = bias.ctypes.data, out.ctypes.data, out.shape[1], code
    block[_LO:_HEADER].view(np.float64)[:] = lo, hi, alpha
    return Jobs(product_job, block, len(bounds), (a, packed, bias, out))


def product_job(index, data, extra):
    """Piece ``index`` of the product that the block at ``data`` describes."""
    block = carray(data, (_HEADER + 2 * (index + 1),), np.int64)
    floats = carray(data, (_HEADER,), np.float64)
    m, k, n = block[_M], block[_K], block[_N]
    a = carray(as_pointer(block[_A]), (m, k), np.float32)
    packed = carray(as_pointer(block[_PACKED]), (block[_PANELS], k, WIDTH), np.float32)
    bias = carray(as_pointer(block[_BIAS]), (n,), np.float32)
    out = carray(as_pointer(block[_OUT]), (m, n), np.float32)
    piece = _HEADER + 2 * index
    product(a, packed, bias, np.float32(floats[_LO]), np.float32(floats[_HI]), out, block[piece], block[piece + 1],
            block[_CODE], np.float32(floats[_ALPHA]))
