"""Winograd F(4x4, 3x3) and F(2x2, 3x3) on the channel-blocked layout (NCHW16c), float32: 3x3
stride-1 layers inside a blocked chain (``lite.blocking``).

The same algorithm as ``lite.kernels.fast.winograd`` (the transforms ``B``, ``G``, ``A`` of Lavin
and Gray), laid out for the blocks: each 6 x 6 tile of the input is transformed sixteen channels
at a time (a vector), into 36 planes ``v[e]`` of (CB, tiles, LANES), each of them the blocked
image of a 1x1 convolution over the tiles. The 36 products are then 1x1 convolutions
(``lite.kernels.fast.blocks.pointwise``: its register tile, its packed panels) by the 36
transformed weights, into ``m[e]`` (KB, tiles, LANES); the output transform takes each tile's 36
vectors back to a 4 x 4 block of output positions, adding the bias and a residual and applying
the clip and the activation as it writes them.

Against the blocked direct kernel, whose 3x3 layer is nine products of the same size, the
products here are 36 for 16 output positions instead of 144 (four times fewer multiplies; a
plane that is not a multiple of four wastes the part of its last tiles past the edge), plus the
transforms. The transformed weights are four times the 3x3 weight (36 values for 9); layers of
many channels (``WIDE_WEIGHTS``) take F(2x2, 3x3) instead: 4 x 4 input tiles, 16 products for
2 x 2 outputs (2.25 times fewer multiplies than direct), weights 16/9 of the 3x3 weight."""

from __future__ import annotations

import functools
import math

import numpy as np
from llvmlite import ir
from numba import carray, types
from numba.extending import intrinsic

from lite.kernels.fast import compiled, jit
from lite.kernels.fast.activation import CLIP_CODE, activate_run
from lite.kernels.fast.blocks import LANES, NO_RESIDUAL, ONE, blocks, group_blocks, pointwise, units
from lite.kernels.fast.crew import as_pointer
from lite.kernels.fast.tile import (
    FLOAT,
    INDEX,
    ROWS,
    VECTOR,
    VECTORS,
    WIDTH,
    emit_loop,
    select_clip,
    splat,
    vector_call,
)
from lite.kernels.fast.winograd import TILE, WINDOW, G

LOWEST, HIGHEST = np.float32(-np.inf), np.float32(np.inf)
SMALL_WINDOW = 4
"""F(2x2, 3x3)'s tile of input positions (2 x 2 outputs from 4 x 4 inputs, 16 products)."""
G_SMALL = np.array([[1, 0, 0], [1 / 2, 1 / 2, 1 / 2], [1 / 2, -1 / 2, 1 / 2], [0, 0, 1]])
WIDE_WEIGHTS = 1 << 16
"""Output times input channels from which a layer takes F(2x2, 3x3): its transformed weight is 16/9
of the 3x3 weight, not 4 times. ResNet-50's five 256-channel layers on 14 x 14 held 53 MB of
F(4x4) weights, 41 MB more than the direct kernel's, and took the model's peak memory to
onnxruntime's; F(2x2) multiplies 1.36x more there (16 products of 49 tiles against 36 of 16)."""


def window_for(channels: int, out_channels: int) -> int:
    """The input tile (WINDOW: F(4x4, 3x3); SMALL_WINDOW: F(2x2, 3x3)) of a layer's channels."""
    return SMALL_WINDOW if channels * out_channels >= WIDE_WEIGHTS else WINDOW


def arrange(weight: np.ndarray, window: int = WINDOW) -> np.ndarray:
    """The transformed 3x3 weight (K, C, 3, 3) as the products read it: (window ** 2 products, groups
    of output blocks, C, WIDTH), each product's panels as ``blocks.pack_pointwise`` packs
    a 1x1 weight. ``U = G g G^T`` in float64, all the products of one group of output blocks in one
    matrix product (``g`` by the Kronecker product of G with itself); a whole float64 ``U`` beside the
    panels had raised ResNet-50's peak memory."""
    out_c, channels = weight.shape[:2]
    transform = G if window == WINDOW else G_SMALL
    both = np.kron(transform, transform).T  # NOTE: (9, window ** 2): [i * 3 + j, a * window + b] = G[a, i] G[b, j]
    out_blocks = blocks(out_c)
    panels = np.zeros((window * window, -(-out_blocks // VECTORS), channels, WIDTH), np.float32)
    for group in range(panels.shape[1]):
        first, count = group_blocks(group, out_blocks)
        rows = np.asarray(weight[first * LANES:(first + count) * LANES], np.float64)
        u = (rows.reshape(-1, 9) @ both).reshape(rows.shape[0], channels, window * window)
        panels[:, group, :, :rows.shape[0]] = u.transpose(2, 1, 0)
    return panels


@jit
def plane_floats(vectors):
    """Floats a product's plane of ``vectors`` vectors takes in the scratch: an odd number of
    64-byte lines, so that the 36 planes do not start a multiple of 4 KiB apart (the transforms
    store and load one vector in each: at 16 KiB apart, ResNet-50's 256 channels on 14 x 14, the
    36 lines fell in one set of the L1 cache, and its input transform ran 6x slower a tile)."""
    return (vectors | 1) * LANES


class BlockedWinogradPlan:
    """The tiles and scratch of one layer: input (CB, H * W, LANES) on an H x W plane, ``pads``
    (top, left), output (KB, OH * OW, LANES) on ``out`` (OH, OW); ``window``: the input tile (6:
    F(4x4, 3x3), 4: F(2x2, 3x3); default ``window_for`` the channels)."""

    def __init__(self, channels: int, plane: tuple[int, int], out_channels: int, pads: tuple[int, int],
                 out: tuple[int, int], window: int | None = None):
        self.plane, self.pads, self.out = plane, pads, out
        self.window = window_for(channels, out_channels) if window is None else window
        self.area, tile = self.window * self.window, self.window - 2
        self.tiles_h, self.tiles_w = -(-out[0] // tile), -(-out[1] // tile)
        self.tiles = self.tiles_h * self.tiles_w
        if self.tiles < ROWS:  # NOTE: blocks.pointwise writes whole register tiles of positions
            raise ValueError(f"{self.tiles} output tiles, fewer than a register tile of {ROWS}")
        self.in_blocks, self.out_blocks = blocks(channels), blocks(out_channels)
        self.block_scratch = ((self.area, plane_floats(self.in_blocks * self.tiles)),
                              (self.area, plane_floats(self.out_blocks * self.tiles)))
        self.zeros = np.zeros((self.out_blocks, LANES), np.float32)
        """The products' bias: none (the output transform adds the layer's)."""

    @property
    def input_units(self) -> int:
        """Pieces of the input transform: a row of tiles of one input block."""
        return self.in_blocks * self.tiles_h

    @property
    def product_units(self) -> int:
        """Pieces of the products (36 or 16): ``blocks.units`` of each."""
        return self.area * units(self.tiles, self.out_blocks)

    @property
    def output_units(self) -> int:
        """Pieces of the output transform: a row of tiles of one output block."""
        return self.out_blocks * self.tiles_h

    def input_terms(self, x: np.ndarray, v: np.ndarray) -> tuple:
        return (x, *self.plane, *self.pads, self.tiles_h, self.tiles_w, self.window, v)

    def product_terms(self, v: np.ndarray, panels: np.ndarray, m: np.ndarray) -> tuple:
        return (v, self.in_blocks, self.tiles, panels, self.zeros, m, self.out_blocks)

    def output_terms(self, m: np.ndarray, bias: np.ndarray, residual: np.ndarray, lo, hi, code: int, alpha,
                     out: np.ndarray) -> tuple:
        return (m, bias, residual, *self.out, self.tiles_h, self.tiles_w, self.window, lo, hi, code, alpha, out)


def fits(kernel: tuple[int, int], strides: tuple[int, int], dilations: tuple[int, int],
         pads: tuple[int, int], out: tuple[int, int]) -> bool:
    """Whether a layer is one this kernel runs: 3x3, stride 1, no dilation, pads within the tile's
    reach, and at least one register tile of output tiles (``blocks.pointwise``'s fewest positions)."""
    tile_count = math.ceil(out[0] / TILE) * math.ceil(out[1] / TILE)
    return (tuple(kernel) == (3, 3) and tuple(strides) == (1, 1) and tuple(dilations) == (1, 1)
            and all(0 <= p <= 2 for p in pads) and tile_count >= ROWS)


def _transform(matrix: tuple[tuple[int, ...], ...]):
    """An intrinsic ``(source, step, first, last, target, target_step)`` applying ``matrix`` (rows
    of coefficients for six inputs) to vectors: target row i (at target + i * target_step) = the
    sum over j of matrix[i][j] times input j, where input j is the vector at source + (j - first)
    * step for first <= j < last (first < last) and zero for the others (a tile's rows past the
    plane: not read); addresses and steps in bytes, all int64. In vectors of LANES floats: the
    loops over lanes did not vectorize (the compiler could not tell the arrays apart)."""
    @intrinsic
    def transform(typingctx, source, step, first, last, target, target_step):
        def codegen(context, builder, signature, args):
            source_at, step_, first_, last_, target_at, target_step_ = args
            pointer = VECTOR.as_pointer()
            zero = ir.Constant(VECTOR, [0.0] * LANES)

            def load(j):
                inside = builder.and_(builder.icmp_signed(">=", INDEX(j), first_),
                                      builder.icmp_signed("<", INDEX(j), last_))
                row = builder.select(inside, INDEX(j), first_)  # NOTE: an address that exists, not loaded from
                at = builder.add(source_at, builder.mul(builder.sub(row, first_), step_))
                return builder.select(inside, builder.load(builder.inttoptr(at, pointer), align=4), zero)

            values = [load(j) for j in range(len(matrix[0]))]
            for i, row in enumerate(matrix):
                total = None
                for value, weight in zip(values, row, strict=True):
                    if weight == 0:
                        continue
                    if total is None:
                        total = value if weight == 1 else builder.fmul(splat(builder, FLOAT(weight)), value)
                    elif weight in (1, -1):
                        total = (builder.fadd if weight == 1 else builder.fsub)(total, value)
                    else:
                        total = vector_call(builder, "fma", splat(builder, FLOAT(weight)), value, total)
                at = builder.add(target_at, builder.mul(target_step_, INDEX(i)))
                builder.store(total, builder.inttoptr(at, pointer), align=4)
            return context.get_dummy_value()
        return types.void(*(types.int64,) * 6), codegen
    return transform


B_T = ((4, 0, -5, 0, 1, 0), (0, -4, -4, 1, 1, 0), (0, 4, -4, -1, 1, 0), (0, -2, -1, 2, 1, 0), (0, 2, -1, -2, 1, 0),
       (0, 4, 0, -5, 0, 1))
A_T = ((1, 1, 1, 1, 1, 0), (0, 1, -1, 2, -2, 0), (0, 1, 1, 4, 4, 0), (0, 1, -1, 8, -8, 1))
B_T_SMALL = ((1, 0, -1, 0), (0, 1, 1, 0), (0, -1, 1, 0), (0, 1, 0, -1))
A_T_SMALL = ((1, 1, 1, 0), (0, 1, -1, -1))
_in, _out, _in_small, _out_small = _transform(B_T), _transform(A_T), _transform(B_T_SMALL), _transform(A_T_SMALL)
VECTOR_BYTES = LANES * 4


def _finishing(added: bool):
    """An intrinsic ``(source, bias, added, target, count, lo, hi)``: for k < count, the vector
    target[k] = clip(source[k] + bias (+ added[k] where ``added``), lo, hi); addresses and the
    count in int64, lo and hi float32."""
    @intrinsic
    def finish(typingctx, source, bias, residual, target, count, lo, hi):
        def codegen(context, builder, signature, args):
            source_at, bias_at, added_at, target_at, count_, low, high = args
            pointer = VECTOR.as_pointer()
            source_p, added_p, target_p = (builder.inttoptr(a, pointer) for a in (source_at, added_at, target_at))
            shift = builder.load(builder.inttoptr(bias_at, pointer), align=4)
            low, high = splat(builder, low), splat(builder, high)

            def one(k, _):
                total = builder.fadd(builder.load(builder.gep(source_p, [k]), align=4), shift)
                if added:
                    total = builder.fadd(total, builder.load(builder.gep(added_p, [k]), align=4))
                builder.store(select_clip(builder, total, low, high), builder.gep(target_p, [k]), align=4)
                return []

            emit_loop(builder, count_, [], one)
            return context.get_dummy_value()
        return types.void(*(types.int64,) * 5, types.float32, types.float32), codegen
    return finish


_finish, _finish_added = _finishing(False), _finishing(True)


@jit
def _forward(window, source, step, first, last, target, target_step):
    """``B^T`` of F(4x4, 3x3) (``window`` 6) or F(2x2, 3x3) (4) on one column of vectors (``_transform``)."""
    if window == WINDOW:
        _in(source, step, first, last, target, target_step)
    else:
        _in_small(source, step, first, last, target, target_step)


@jit
def _backward(window, source, step, target, target_step):
    """``A^T`` of F(4x4, 3x3) (``window`` 6) or F(2x2, 3x3) (4) on one column of vectors."""
    if window == WINDOW:
        _out(source, step, 0, window, target, target_step)
    else:
        _out_small(source, step, 0, window, target, target_step)


@jit
def input_transform(x, h, w, pt, pl, th, tw, window, v, first, last):
    """``v[:, block, tile] = B^T d B`` for the tiles ``d`` (window x window positions of one block,
    zero past the plane; ``window`` 6: F(4x4, 3x3), 4: F(2x2, 3x3)) of the rows of tiles ``first``
    to ``last - 1`` (of CB * th: unit u is row u % th of block u // th)."""
    t = np.empty((WINDOW, WINDOW, LANES), np.float32)
    zeros = np.zeros(LANES, np.float32)
    x_at, v_at = x.ctypes.data, v.ctypes.data
    plane_bytes, row_bytes, t_row = h * w * VECTOR_BYTES, w * VECTOR_BYTES, window * VECTOR_BYTES
    product_bytes, step = v.shape[1] * 4, window - 2
    for unit in range(first, last):
        t_at, zeros_at = t.ctypes.data, zeros.ctypes.data  # NOTE: in the loop: see ``output_transform``
        block, ty = unit // th, unit % th
        top = ty * step - pt
        rows_from, rows_to = max(0, -top), min(window, h - top)  # NOTE: the window's rows on the plane
        for tx in range(tw):
            left = tx * step - pl
            for j in range(window):
                q = left + j
                source, stride, low, high = zeros_at, 0, 0, window
                if 0 <= q < w and rows_from < rows_to:
                    source = x_at + block * plane_bytes + ((top + rows_from) * w + q) * VECTOR_BYTES
                    stride, low, high = row_bytes, rows_from, rows_to
                _forward(window, source, stride, low, high, t_at + j * VECTOR_BYTES, t_row)
            at = v_at + (block * th * tw + ty * tw + tx) * VECTOR_BYTES
            for a in range(window):
                _forward(window, t_at + a * t_row, VECTOR_BYTES, 0, window, at + a * window * product_bytes,
                         product_bytes)


@jit
def products(v, in_blocks, count, panels, bias, m, out_blocks, first, last):
    """Units ``first`` to ``last - 1`` of the products ``m[e] = v[e]`` by ``panels[e]`` (each
    ``blocks.units`` of the ``count`` tiles by the output blocks, product after product), each of
    v's and m's rows the blocks (in_blocks or out_blocks, count, LANES) of one product; ``bias``:
    zeros."""
    per = units(count, out_blocks)
    in_floats, out_floats = in_blocks * count * LANES, out_blocks * count * LANES
    for e in range(first // per, (last - 1) // per + 1):
        start, end = max(first, e * per) - e * per, min(last, (e + 1) * per) - e * per
        # NOTE: every lane of m counted as a channel: the plan keeps no channel count, so the products take whole tiles
        pointwise(v[e, :in_floats].reshape((in_blocks, count, LANES)), panels[e], bias, LOWEST, HIGHEST, CLIP_CODE,
                  ONE, NO_RESIDUAL, m[e, :out_floats].reshape((out_blocks, count, LANES)), out_blocks * LANES, start,
                  end)


@jit
def output_transform(m, bias, residual, oh, ow, th, tw, window, lo, hi, code, alpha, out, first, last):
    """For the rows of tiles ``first`` to ``last - 1`` (of KB * th: unit u is row u % th of block
    u // th): out = act(clip(A^T m A + bias (+ residual, out's shape; empty for none), lo, hi),
    alpha), each tile's block of (window - 2) x (window - 2) outputs cropped to the OH x OW plane."""
    s = np.empty((TILE, WINDOW, LANES), np.float32)
    o = np.empty((TILE, LANES), np.float32)
    m_at, bias_at, out_at = m.ctypes.data, bias.ctypes.data, out.ctypes.data
    added = residual.ctypes.data if residual.size else 0
    flat = out.reshape(out.size)
    positions, step = oh * ow, window - 2
    product_bytes, s_row = m.shape[1] * 4, window * VECTOR_BYTES
    for unit in range(first, last):
        # NOTE: the scratch's addresses read in the loop, so that the loop uses the arrays: numba frees
        # an array after the block that last uses it, and with the addresses read before the loop,
        # the scratch was freed as the loop began. Another thread's allocation from the same malloc
        # arena then took its memory while this one still wrote there (wrong results under dynamic
        # chunks, late in a long process, and a corrupted heap: ``test_blocked_winograd``).
        s_at, o_at = s.ctypes.data, o.ctypes.data
        block, ty = unit // th, unit % th
        shift_at = bias_at + block * VECTOR_BYTES
        rows = min(step, oh - ty * step)
        for tx in range(tw):
            source = m_at + (block * th * tw + ty * tw + tx) * VECTOR_BYTES
            for j in range(window):
                _backward(window, source + j * product_bytes, window * product_bytes, s_at + j * VECTOR_BYTES, s_row)
            columns = min(step, ow - tx * step)
            for r in range(rows):
                _backward(window, s_at + r * s_row, VECTOR_BYTES, o_at, VECTOR_BYTES)
                at = (block * positions + (ty * step + r) * ow + tx * step) * VECTOR_BYTES
                if added:
                    _finish_added(o_at, shift_at, added + at, out_at + at, columns, lo, hi)
                else:
                    _finish(o_at, shift_at, 0, out_at + at, columns, lo, hi)
        if code != CLIP_CODE:
            activate_run(flat, (block * positions + ty * step * ow) * LANES, rows * ow * LANES, flat.dtype.type(0),
                         code, alpha)


@functools.cache
def warm() -> None:
    """Compiles the kernels now (at build), not in the first predict."""
    side = 2 * ROWS  # NOTE: enough tiles for one register tile of them
    plan = BlockedWinogradPlan(3, (side, side), 3, (1, 1), (side, side))
    x, out = np.zeros((1, side * side, LANES), np.float32), np.zeros((1, side * side, LANES), np.float32)
    v, m = (np.zeros(shape, np.float32) for shape in plan.block_scratch)
    compiled(input_transform, *plan.input_terms(x, v), 0, 1)
    compiled(products, *plan.product_terms(v, arrange(np.zeros((3, 3, 3, 3), np.float32)), m), 0, 1)
    for residual in (NO_RESIDUAL, out.copy()):
        compiled(output_transform, *plan.output_terms(m, np.zeros((1, LANES), np.float32), residual, LOWEST,
                                                      HIGHEST, CLIP_CODE, ONE, out), 0, 1)


# The blocks of the three steps on the crew (``lite.kernels.fast.crew.Jobs``), then (first, last) a piece:
_X, _IN_BLOCKS, _H, _W, _PT, _PL, _TH, _TW, _WINDOW, _V = range(10)
_IN_HEADER = 10
_PANELS, _GROUPS, _TERMS, _OUT_BLOCKS, _BIAS, _M, _TILES = range(10, 17)
_PRODUCT_HEADER = 17
_RESIDUAL, _OH, _OW, _OUT, _CODE, _LO, _HI, _ALPHA = range(17, 25)
_OUT_HEADER = 25


def _layer_block(header: int, bounds: list[tuple[int, int]], plan: BlockedWinogradPlan, x: np.ndarray,
                 v: np.ndarray, panels: np.ndarray, bias: np.ndarray, m: np.ndarray) -> np.ndarray:
    from lite.kernels.fast.crew import pieces_block

    block = pieces_block(header, bounds)
    block[:_IN_HEADER] = (x.ctypes.data, plan.in_blocks, *plan.plane, *plan.pads, plan.tiles_h, plan.tiles_w,
                          plan.window, v.ctypes.data)
    if header > _IN_HEADER:
        block[_IN_HEADER:_PRODUCT_HEADER] = (panels.ctypes.data, panels.shape[1], panels.shape[2], plan.out_blocks,
                                             bias.ctypes.data, m.ctypes.data, plan.tiles)
    return block


def crew_jobs(plan: BlockedWinogradPlan, x: np.ndarray, v: np.ndarray, panels: np.ndarray, bias: np.ndarray,
              m: np.ndarray, residual: np.ndarray, lo, hi, code: int, alpha, out: np.ndarray, step: int,
              bounds: list[tuple[int, int]]):
    """Step ``step`` (0: the input transform, 1: the products, 2: the output transform) in the
    pieces ``bounds`` as jobs for the crew."""
    from lite.kernels.fast.crew import Jobs

    arrays = (x, v, panels, bias, m, residual, out, plan.zeros)
    if step == 0:
        return Jobs(input_job, _layer_block(_IN_HEADER, bounds, plan, x, v, panels, plan.zeros, m), len(bounds), arrays)
    if step == 1:
        return Jobs(products_job, _layer_block(_PRODUCT_HEADER, bounds, plan, x, v, panels, plan.zeros, m), len(bounds),
                    arrays)
    block = _layer_block(_OUT_HEADER, bounds, plan, x, v, panels, bias, m)
    block[[_RESIDUAL, _OH, _OW, _OUT, _CODE]] = (residual.ctypes.data if residual.size else 0, *plan.out,
                                                 out.ctypes.data, code)
    block[_LO:_OUT_HEADER].view(np.float64)[:] = lo, hi, alpha
    return Jobs(output_job, block, len(bounds), arrays)


def input_job(index, data, extra):
    """Piece ``index`` of the input transform the block at ``data`` describes."""
    block = carray(data, (_IN_HEADER + 2 * (index + 1),), np.int64)
    h, w, th, tw = block[_H], block[_W], block[_TH], block[_TW]
    x = carray(as_pointer(block[_X]), (block[_IN_BLOCKS], h * w, LANES), np.float32)
    area = block[_WINDOW] * block[_WINDOW]
    v = carray(as_pointer(block[_V]), (area, plane_floats(block[_IN_BLOCKS] * th * tw)), np.float32)
    piece = _IN_HEADER + 2 * index
    input_transform(x, h, w, block[_PT], block[_PL], th, tw, block[_WINDOW], v, block[piece], block[piece + 1])


def products_job(index, data, extra):
    """Piece ``index`` of the products the block at ``data`` describes."""
    block = carray(data, (_PRODUCT_HEADER + 2 * (index + 1),), np.int64)
    count, out_blocks, area = block[_TILES], block[_OUT_BLOCKS], block[_WINDOW] * block[_WINDOW]
    v = carray(as_pointer(block[_V]), (area, plane_floats(block[_IN_BLOCKS] * count)), np.float32)
    panels = carray(as_pointer(block[_PANELS]), (area, block[_GROUPS], block[_TERMS], WIDTH), np.float32)
    bias = carray(as_pointer(block[_BIAS]), (out_blocks, LANES), np.float32)
    m = carray(as_pointer(block[_M]), (area, plane_floats(out_blocks * count)), np.float32)
    piece = _PRODUCT_HEADER + 2 * index
    products(v, block[_IN_BLOCKS], count, panels, bias, m, out_blocks, block[piece], block[piece + 1])


def output_job(index, data, extra):
    """Piece ``index`` of the output transform the block at ``data`` describes."""
    block = carray(data, (_OUT_HEADER + 2 * (index + 1),), np.int64)
    floats = carray(data, (_OUT_HEADER,), np.float64)
    count, out_blocks, oh, ow = block[_TILES], block[_OUT_BLOCKS], block[_OH], block[_OW]
    m = carray(as_pointer(block[_M]), (block[_WINDOW] * block[_WINDOW], plane_floats(out_blocks * count)), np.float32)
    bias = carray(as_pointer(block[_BIAS]), (out_blocks, LANES), np.float32)
    out = carray(as_pointer(block[_OUT]), (out_blocks, oh * ow, LANES), np.float32)
    residual = carray(as_pointer(block[_RESIDUAL]), (out_blocks if block[_RESIDUAL] else 0, oh * ow, LANES),
                      np.float32)
    piece = _OUT_HEADER + 2 * index
    output_transform(m, bias, residual, oh, ow, block[_TH], block[_TW], block[_WINDOW], np.float32(floats[_LO]),
                     np.float32(floats[_HI]), block[_CODE], np.float32(floats[_ALPHA]), out, block[piece],
                     block[piece + 1])
