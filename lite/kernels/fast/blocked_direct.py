"""Direct convolution on channel blocks, for layers with too many input terms for
``lite.kernels.fast.direct`` (ResNet's 3x3 convolutions on 256 and 512 channels).

Those ran im2col + BLAS: a 256-channel 3x3 layer copied its input nine times into a column
matrix before the product. Here the input goes once into channel
blocks (``LANES`` channels a position), padded (and, strided, split into its stride phases, a
plane each), and every output position reads its taps in place: with the rows of a plane ``wq``
positions wide, output position p = y * wq + x (a "wide" plane whose last columns of each row
are dropped) reads position p + (dy // sh) * wq + dx // sw of tap (dy, dx)'s phase.
``lite.kernels.fast.tile``'s register tile computes ROWS wide positions by ``VECTORS`` blocks
of output channels (the packed weight's panel row for each term), the terms in chunks of
``CHUNK_TERMS`` whose panel rows stay in L1 across the tiles, the sums carried in the wide
blocked output between chunks. The valid columns then go out to NCHW with the bias, residual,
clip and activation. The fill, the products and the write-out each run on the crew.

Its products alone run as fast as BLAS's alone, so what it saves is the im2col copy; ResNets run
faster on it than on im2col + BLAS, at one thread and two. A 6-position by 4-block tile (64 output
channels, no narrow last group on 256 channels) measured no faster than this 8 x 3 one
(measurements: docs/performance.md, kernel measurements).
"""

from __future__ import annotations

import functools

import numpy as np
from numba import carray, types
from numba import uint64 as _u  # NOTE: unsigned indices skip the negative-index check, so the loops vectorize
from numba.extending import intrinsic

from lite.kernels.fast import compiled, jit
from lite.kernels.fast.activation import CLIP_CODE, activate_run
from lite.kernels.fast.blocks import NO_RESIDUAL as NO_BLOCKS_RESIDUAL
from lite.kernels.fast.blocks import ROWS_AHEAD, ZEROS, group_blocks
from lite.kernels.fast.crew import as_pointer
from lite.kernels.fast.tile import (
    FLOAT,
    INDEX,
    LANES,
    ROWS,
    TILE_VECTORS,
    VECTOR,
    VECTORS,
    WIDTH,
    clip_finish,
    emit_loop,
    emit_tile,
)
from lite.kernels.window import Geometry

CHUNK_TERMS = 192
"""Terms a pass of the tiles takes: their panel rows (192 x WIDTH floats, 36 KB) stay in L1."""
ACTIVATION_TILES = 16
"""Whole tiles whose activation runs in one call, after their last terms (their outputs, 8 KB a
block, still in L1): a call a tile cost as much as the tile where the terms are few (a stem's)."""

NO_RESIDUAL = np.zeros(0, np.float32)
ONE = np.float32(1)


def blocks(channels: int) -> int:
    """How many blocks of LANES channels hold ``channels``."""
    return -(-channels // LANES)


def fits(geometry: Geometry, group: int) -> bool:
    """Whether this kernel runs a 2-D convolution: one group, no dilation, more than one tap."""
    return group == 1 and geometry.dilations == (1, 1) and geometry.kernel[0] * geometry.kernel[1] > 1


def _tile(vectors: int, accumulate: bool, finishing: bool = False, row: int = WIDTH):
    """The tile of ``vectors`` output blocks as an intrinsic ``(x, bases, offsets, panel, terms, out,
    out_plane, bias, added, added_step, lo, hi)``: for ROWS positions r, blocks j and lanes l,
    out[j * out_plane + r * LANES + l] (+)= sum over k < terms of x[bases[r] + offsets[k]] *
    panel[k * WIDTH + j * LANES + l]; bases (ROWS int64) place each position on its own, so they
    need not lie in one run (a chain's output positions, whose rows are narrower than the padded
    input's). ``finishing``: the tile of a unit's last terms stores clip(sum + bias (+ the residual
    at added, out's layout), lo, hi) instead (``tile.clip_finish``; added_step 0 and added one
    vector of zeros: no residual); the others ignore those arguments. ``row``: floats between the
    panel's rows (WIDTH; LANES for a grouped convolution's one-block panels). Addresses and counts
    in int64 (floats apart)."""
    @intrinsic
    def tile(typingctx, x, bases, offsets, panel, terms, out, out_plane, bias, added, added_step, lo, hi):
        def codegen(context, builder, signature, args):
            x_at, bases_at, offsets_at, panel_at, count, out_at, plane, bias_at, added_at, step, low, high = args
            floats = FLOAT.as_pointer()
            x_p, panel_p, out_p = (builder.inttoptr(at, floats) for at in (x_at, panel_at, out_at))
            offsets_p, bases_p = (builder.inttoptr(at, INDEX.as_pointer()) for at in (offsets_at, bases_at))
            starts = [builder.gep(x_p, [builder.load(builder.gep(bases_p, [INDEX(r)]))]) for r in range(ROWS)]
            finish = clip_finish(builder, builder.inttoptr(bias_at, floats), vectors, low, high, out_at, added_at,
                                 step) if finishing else None

            def scalar(k, r):
                return builder.gep(starts[r], [builder.load(builder.gep(offsets_p, [k]))])

            emit_tile(builder, scalar, lambda k: builder.gep(panel_p, [builder.mul(k, INDEX(row))]), count, out_p,
                      INDEX(LANES), vectors, accumulate, vector_stride=plane, finish=finish, rows_ahead=ROWS_AHEAD)
            return context.get_dummy_value()
        return types.void(*(types.int64,) * 10, types.float32, types.float32), codegen
    return tile


_one, _two, _three = (_tile(vectors, False) for vectors in TILE_VECTORS)
_add_one, _add_two, _add_three = (_tile(vectors, True) for vectors in TILE_VECTORS)
_end_one, _end_two, _end_three = (_tile(vectors, False, True) for vectors in TILE_VECTORS)
_add_end_one, _add_end_two, _add_end_three = (_tile(vectors, True, True) for vectors in TILE_VECTORS)
_lone, _lone_end, _lone_add, _lone_add_end = (_tile(1, add, end, LANES) for add in (False, True)
                                              for end in (False, True))


@jit
def _tile_of(vectors, add, ends, x, bases, offsets, panel, terms, out, plane, bias, added, step, lo, hi):
    """The tile of ``vectors`` (1 to VECTORS) blocks, adding to out's sums when ``add``; ``ends``:
    a unit's last terms, then ``tile.clip_finish``'s epilogue in registers (bias, added, step, lo,
    hi: its arguments; ignored otherwise)."""
    if vectors == VECTORS:
        if ends:
            if add:
                _add_end_three(x, bases, offsets, panel, terms, out, plane, bias, added, step, lo, hi)
            else:
                _end_three(x, bases, offsets, panel, terms, out, plane, bias, added, step, lo, hi)
        elif add:
            _add_three(x, bases, offsets, panel, terms, out, plane, bias, added, step, lo, hi)
        else:
            _three(x, bases, offsets, panel, terms, out, plane, bias, added, step, lo, hi)
    elif vectors == 2:
        if ends:
            if add:
                _add_end_two(x, bases, offsets, panel, terms, out, plane, bias, added, step, lo, hi)
            else:
                _end_two(x, bases, offsets, panel, terms, out, plane, bias, added, step, lo, hi)
        elif add:
            _add_two(x, bases, offsets, panel, terms, out, plane, bias, added, step, lo, hi)
        else:
            _two(x, bases, offsets, panel, terms, out, plane, bias, added, step, lo, hi)
    elif ends:
        if add:
            _add_end_one(x, bases, offsets, panel, terms, out, plane, bias, added, step, lo, hi)
        else:
            _end_one(x, bases, offsets, panel, terms, out, plane, bias, added, step, lo, hi)
    elif add:
        _add_one(x, bases, offsets, panel, terms, out, plane, bias, added, step, lo, hi)
    else:
        _one(x, bases, offsets, panel, terms, out, plane, bias, added, step, lo, hi)


@jit
def _lone_tile_of(add, ends, x, bases, offsets, panel, terms, out, plane, bias, added, step, lo, hi):
    """A grouped convolution's tile: one block, its panel's rows LANES floats apart (as ``_tile_of``,
    ``add`` and ``ends`` say)."""
    if ends:
        if add:
            _lone_add_end(x, bases, offsets, panel, terms, out, plane, bias, added, step, lo, hi)
        else:
            _lone_end(x, bases, offsets, panel, terms, out, plane, bias, added, step, lo, hi)
    elif add:
        _lone_add(x, bases, offsets, panel, terms, out, plane, bias, added, step, lo, hi)
    else:
        _lone(x, bases, offsets, panel, terms, out, plane, bias, added, step, lo, hi)


class BlockedDirectPlan:
    """The padded blocks, term offsets, tiles and scratch of one geometry: ``fill``, then
    ``products`` over the units (a unit: one tile of one group of output blocks, ``blocks.group_blocks``), then
    ``write_out``; or, into a chain's channel blocks, ``refill`` (``fill`` where ``narrow``), then
    ``block_products``.

    ``narrow``: the padded input holds each position's C channels alone (C floats a position, not
    whole blocks of LANES), so the terms are the C x KH x KW real ones: for a stem's 3 channels,
    whose blocks would be 13 lanes of zeros in 16; ``fill`` places an NCHW image there.

    ``width``: the channels of each group of a grouped convolution (as many in as out), a divisor
    or a multiple of LANES, so that no group straddles a block. Each output block then reads the
    ``span`` input blocks that hold its groups (its own block where groups are narrower than a
    block: the terms run over its LANES input channels, a block-diagonal panel zero across
    groups), and a unit is one tile of one output block."""

    def __init__(self, g: Geometry, out_channels: int, narrow: bool = False, width: int = 0) -> None:
        (_, channels, h, w), (kh, kw), (sh, sw) = g.x[:4], g.kernel, g.strides
        (top, left), (bottom, right) = g.begins, g.ends
        # NOTE: strided, the padded input goes into its stride phases, a plane each, where each
        # tap is a run of the wide plane's positions, its rows ``wq`` wide
        self.ow = g.out[1]
        self.wq, hq, phases = -(-(left + w + right) // sw), -(-(top + h + bottom) // sh), sh * sw
        self.tiles = -(-g.out[0] * self.wq // ROWS)
        out_blocks = blocks(out_channels)
        self.groups = -(-out_blocks // VECTORS)
        taps = [((dy % sh) * sw + dx % sw, (dy // sh) * self.wq + dx // sw) for dy in range(kh) for dx in range(kw)]
        # NOTE: the last tile's last tap reads up to tiles * ROWS - 1 past that tap's offset
        plane = max(hq * self.wq, self.tiles * ROWS + max(offset for _, offset in taps))
        self.lanes, self.in_blocks = (channels, 1) if narrow else (LANES, blocks(channels))
        """Floats a padded position holds, and the padded input's blocks."""
        self.width, self.span = width, max(width, LANES) // LANES if width else self.in_blocks
        """A grouped convolution's channels a group (0: one group), and the input blocks an output block reads."""
        self.offsets = np.array([((block * phases + phase) * plane + offset) * self.lanes + lane
                                 for block in range(self.span) for phase, offset in taps
                                 for lane in range(self.lanes)], np.int64)
        rows, columns = np.arange(h) + top, np.arange(w) + left
        self.row_at = ((rows % sh) * sw * plane + rows // sh * self.wq).astype(np.int64)
        self.column_at = ((columns % sw) * plane + columns // sw).astype(np.int64)
        self.units = self.groups * self.tiles
        # NOTE: into channel blocks (a chain's), a tile takes ROWS output positions of the plane, each
        # reading from its own base (the last tile's past the plane repeat its last position)
        positions = g.out[0] * g.out[1]
        self.block_tiles = -(-positions // ROWS)
        self.block_units = (out_blocks if width else self.groups) * self.block_tiles
        at = np.minimum(np.arange(self.block_tiles * ROWS), positions - 1)
        self.bases = ((at // self.ow * self.wq + at % self.ow) * self.lanes).astype(np.int64).reshape(-1, ROWS)
        self.layout = np.array([top, left, sh, sw, self.wq, hq, plane], np.int64)
        """What ``fill_rows`` needs of the geometry: pads before, strides, the phases' row width,
        rows and positions."""
        self.padded_rows = hq * sh
        """Rows of the padded input (pads and the last phases' rounding included): ``fill_rows``' pieces."""
        padded = (self.in_blocks, phases * plane, self.lanes)
        self.scratch = (padded, (out_blocks, self.tiles * ROWS, LANES))
        self.block_scratch = (padded, (self.groups, VECTORS, ROWS, LANES))
        """Into channel blocks: the padded input and each group's last tile (short of ROWS positions;
        a grouped convolution's output block b: [b // VECTORS, b % VECTORS])."""

    @property
    def grouped_span(self) -> int:
        """What ``block_products`` takes as ``span``: the input blocks a grouped convolution's output
        block reads, 0 for one group."""
        return self.span if self.width else 0

    def arrange(self, weight: np.ndarray) -> np.ndarray:
        """The weight (O, C, KH, KW) as the tiles read it: (groups, K, WIDTH), the terms in the
        offsets' order (block, tap, lane), zero past O and C; padded a group at a time (the
        transient copy is one group's, not the whole weight's: 9.4 MB on 512 channels)."""
        if self.width:
            return self._arrange_grouped(weight)
        out_c, channels, kh, kw = weight.shape
        in_blocks, lanes, taps = self.in_blocks, self.lanes, kh * kw
        panels = np.empty((self.groups, in_blocks * taps * lanes, WIDTH), np.float32)
        for group in range(self.groups):
            first, count = group_blocks(group, blocks(out_c))
            rows = weight[first * LANES:(first + count) * LANES].reshape(-1, channels, taps)
            padded = np.zeros((WIDTH, in_blocks * lanes, taps), np.float32)
            padded[:rows.shape[0], :channels] = rows
            panels[group] = padded.reshape(WIDTH, in_blocks, lanes, taps).transpose(1, 3, 2, 0).reshape(-1, WIDTH)
        return panels

    def _arrange_grouped(self, weight: np.ndarray) -> np.ndarray:
        """A grouped convolution's weight (O, width, KH, KW) as its tiles read it: (OB, K, LANES),
        for output block b the terms of its ``span`` input blocks in the offsets' order (block, tap,
        lane), each output channel's weights on its group's input lanes, zero elsewhere."""
        out_c, width, kh, kw = weight.shape
        out_blocks, taps, span = blocks(out_c), kh * kw, self.span
        dense = np.zeros((out_blocks * LANES, span * LANES, taps), np.float32)
        channel = np.arange(out_c)
        first = channel // width * width - channel // LANES // span * span * LANES  # NOTE: within the span
        dense[channel[:, None], first[:, None] + np.arange(width)] = weight.reshape(out_c, width, taps)
        blocked = dense.reshape(out_blocks, LANES, span, LANES, taps).transpose(0, 2, 4, 3, 1)
        return np.ascontiguousarray(blocked.reshape(out_blocks, span * taps * LANES, LANES))

    def fill(self, x: np.ndarray, image: int, padded: np.ndarray, first: int = 0, last: int | None = None) -> None:
        """Blocks ``first`` to ``last - 1`` (default all) of image ``image`` of x (N, C, H, W) into
        ``padded`` (scratch[0]), zero pads."""
        fill(x, image, padded, self.row_at, self.column_at, first, padded.shape[0] if last is None else last)

    def fill_rows(self, x: np.ndarray, image: int, padded: np.ndarray, first: int = 0, last: int | None = None) -> None:
        """As ``fill``, by rows ``first`` to ``last - 1`` (default all ``padded_rows``) of the padded
        input: each piece writes its rows whole, pads included, so no piece zeroes another's."""
        fill_rows(x, image, padded, self.layout, first, self.padded_rows if last is None else last)

    def products(self, weights: np.ndarray, padded: np.ndarray, wide: np.ndarray, first: int = 0,
                 last: int | None = None) -> None:
        """The sums of units ``first`` to ``last - 1`` (default all) into ``wide`` (scratch[1])."""
        products(padded, self.offsets, weights, wide, self.tiles, first, self.units if last is None else last)

    def write_out(self, wide: np.ndarray, out: np.ndarray, image: int, bias: np.ndarray, lo: np.float32,
                  hi: np.float32, code: int = CLIP_CODE, alpha: np.float32 = ONE, first: int = 0,
                  last: int | None = None, residual: np.ndarray | None = None) -> None:
        """Channels ``first`` to ``last - 1`` (default all) of out[image] from the wide sums, as
        clip(sum + bias (+ residual, out's shape), lo, hi), then the activation of ``code``."""
        added = NO_RESIDUAL if residual is None else residual.reshape(-1)
        write_out(wide, out, image, bias, lo, hi, code, alpha, self.wq, first,
                  out.shape[1] if last is None else last, added)

    def refill(self, x: np.ndarray, padded: np.ndarray, first: int = 0, last: int | None = None) -> None:
        """Blocks ``first`` to ``last - 1`` (default all) of x (CB, H * W, LANES), an image already in
        channel blocks, into ``padded`` (scratch[0]), zero pads."""
        refill(x, padded, self.row_at, self.column_at, first, padded.shape[0] if last is None else last)

    def block_products(self, weights: np.ndarray, padded: np.ndarray, out: np.ndarray, tail: np.ndarray,
                       bias: np.ndarray, lo: np.float32, hi: np.float32, code: int = CLIP_CODE,
                       alpha: np.float32 = ONE, first: int = 0, last: int | None = None,
                       residual: np.ndarray = NO_BLOCKS_RESIDUAL) -> None:
        """Units ``first`` to ``last - 1`` (default all ``block_units``) of out (OB, OH * OW, LANES), an
        image in channel blocks: the sums of the padded input, then clip(sum + bias (OB, LANES) (+
        residual, out's shape), lo, hi) and the activation of ``code``; ``tail``: block_scratch[1]."""
        block_products(padded, self.offsets, weights, out, self.bases, tail, self.block_tiles, first,
                       self.block_units if last is None else last, bias, lo, hi, code, alpha, residual,
                       self.grouped_span)

    def warm(self) -> None:
        """Compiles the NCHW form's kernels (``fill``, ``products``, ``write_out``) now (at build), not
        in the first predict."""
        _warm()

    def warm_blocks(self) -> None:
        """Compiles the channel-block form's kernels (``refill``, ``block_products``) now."""
        _warm_blocks()


def _warm_plan() -> tuple[BlockedDirectPlan, np.ndarray, np.ndarray, np.ndarray]:
    """A small plan, its packed weight and its scratch (padded, wide) to compile the kernels with."""
    plan = BlockedDirectPlan(Geometry((1, 2, 4, 4), (3, 3), (1, 1), (1, 1), (1, 1), (1, 1), (4, 4)), 2)
    padded, wide = (np.zeros(shape, np.float32) for shape in plan.scratch)
    return plan, plan.arrange(np.zeros((2, 2, 3, 3), np.float32)), padded, wide


@functools.cache
def _warm() -> None:
    plan, weights, padded, wide = _warm_plan()
    x, out = np.zeros((1, 2, 4, 4), np.float32), np.zeros((1, 2, 4, 4), np.float32)
    compiled(plan.fill, x, 0, padded)
    compiled(plan.products, weights, padded, wide)
    compiled(plan.write_out, wide, out, 0, np.zeros(2, np.float32), np.float32(-np.inf), np.float32(np.inf))


@functools.cache
def _warm_blocks() -> None:
    plan, weights, padded, _ = _warm_plan()
    image, bias = np.zeros((1, 16, LANES), np.float32), np.zeros((1, LANES), np.float32)
    compiled(plan.refill, image, padded)
    compiled(plan.fill_rows, np.zeros((1, 2, 4, 4), np.float32), 0, padded)
    tail = np.zeros(plan.block_scratch[1], np.float32)
    for residual in (NO_BLOCKS_RESIDUAL, image.copy()):
        compiled(plan.block_products, weights, padded, image, tail, bias, np.float32(-np.inf), np.float32(np.inf),
                 CLIP_CODE, ONE, 0, 1, residual)


@jit
def fill(x, image, padded, row_at, column_at, first, last):
    """Blocks ``first`` to ``last - 1`` of image ``image`` of x (N, C, H, W) into padded (CB,
    positions, lanes: LANES, or C in a plan's narrow form): x[., ., y, i] at position row_at[y] +
    column_at[i]; zero elsewhere."""
    channels, h, w, lanes = x.shape[1], x.shape[2], x.shape[3], padded.shape[2]
    padded[first:last] = 0
    flat = x.reshape(x.size)
    for block in range(first, last):
        for lane in range(min(lanes, channels - block * lanes)):
            base = (image * channels + block * lanes + lane) * h * w
            for y in range(h):
                at = row_at[y]
                for i in range(w):
                    padded[block, at + column_at[i], lane] = flat[_u(base + y * w + i)]


@jit
def fill_rows(x, image, padded, layout, first, last):
    """Rows ``first`` to ``last - 1`` of the padded input of image ``image`` of x (N, C, H, W) into
    padded (CB, phases * plane, lanes), as ``fill`` places them, zeros at the pads; the piece with
    the last row also zeroes each phase's positions past its rows. ``layout``: (top, left, sh, sw,
    wq, hq, plane), ``BlockedDirectPlan.layout``. A padded row r lies in phase row r % sh, at row
    r // sh of its planes; its columns of one phase, every sw-th, are one run of wq positions."""
    channels, h, w, lanes = x.shape[1], x.shape[2], x.shape[3], padded.shape[2]
    top, left, sh, sw, wq, hq, plane = layout[0], layout[1], layout[2], layout[3], layout[4], layout[5], layout[6]
    for block in range(padded.shape[0]):
        count = max(min(lanes, channels - block * lanes), 0)
        for r in range(first, last):
            y = r - top
            for px in range(sw):
                start = ((r % sh) * sw + px) * plane + r // sh * wq
                run = padded[block, start:start + wq]
                run[:] = 0
                if y < 0 or y >= h:
                    continue
                begin = max(-(-(left - px) // sw), 0)  # NOTE: the run's first column of the image
                end = min(-(-(left + w - px) // sw), wq)
                for lane in range(count):
                    source = x[image, block * lanes + lane, y]
                    for cq in range(begin, end):
                        run[_u(cq), _u(lane)] = source[_u(cq * sw + px - left)]
        if last == hq * sh:
            for phase in range(sh * sw):
                padded[block, phase * plane + hq * wq:(phase + 1) * plane] = 0


@jit
def products(padded, offsets, panels, wide, tiles, first, last):
    """Units ``first`` to ``last - 1`` (unit u: tile u % tiles of group u // tiles), a group's
    terms in chunks of CHUNK_TERMS over its tiles in the range; a tile's ROWS wide positions are
    one run."""
    terms, out_blocks, plane = offsets.size, wide.shape[0], wide.shape[1] * LANES
    run = np.arange(ROWS) * LANES
    for group in range(first // tiles, (last - 1) // tiles + 1):
        start, stop = max(first - group * tiles, 0), min(last - group * tiles, tiles)
        block, vectors = group_blocks(group, out_blocks)
        for chunk in range(0, terms, CHUNK_TERMS):
            count = min(CHUNK_TERMS, terms - chunk)
            offsets_at, panel_at = offsets[chunk:].ctypes.data, panels[group, chunk:].ctypes.data
            for tile in range(start, stop):
                _tile_of(vectors, chunk > 0, False, padded.ctypes.data + tile * ROWS * LANES * 4, run.ctypes.data,
                         offsets_at, panel_at, count, wide.ctypes.data + (block * plane + tile * ROWS * LANES) * 4,
                         plane, 0, 0, 0, ONE, ONE)


@jit
def write_out(wide, out, image, bias, lo, hi, code, alpha, wq, first, last, residual):
    """Channels ``first`` to ``last - 1`` of out[image] (N, O, OH, OW) from wide (OB, positions,
    LANES; rows ``wq`` wide): clip(sum + bias (+ residual, flat as out; empty for none), lo, hi),
    then the activation of ``code``."""
    channels, oh, ow = out.shape[1], out.shape[2], out.shape[3]
    flat = out.reshape(out.size)
    for channel in range(first, last):
        block, lane, shift = channel // LANES, channel % LANES, bias[channel]
        base = (image * channels + channel) * oh * ow
        for y in range(oh):
            at = base + y * ow
            if residual.size:
                for i in range(ow):
                    flat[_u(at + i)] = min(max(wide[block, y * wq + i, lane] + shift + residual[_u(at + i)], lo), hi)
            else:
                for i in range(ow):
                    flat[_u(at + i)] = min(max(wide[block, y * wq + i, lane] + shift, lo), hi)
        if code != CLIP_CODE:
            activate_run(flat, base, oh * ow, flat.dtype.type(0), code, alpha)


@intrinsic
def _place_row(typingctx, source, target, column_at, count):
    """An intrinsic ``(source, target, column_at, count)``: for i < count, the vector of LANES floats
    at source + i * LANES goes to target + column_at[i] * LANES (float addresses; column_at an int64
    pointer), one vector load and store each."""
    def codegen(context, builder, signature, args):
        source_at, target_at, columns_at, count_ = args
        pointer = VECTOR.as_pointer()
        source_p, target_p = (builder.inttoptr(at, pointer) for at in (source_at, target_at))
        columns_p = builder.inttoptr(columns_at, INDEX.as_pointer())

        def place(i, _):
            value = builder.load(builder.gep(source_p, [i]), align=4)
            builder.store(value, builder.gep(target_p, [builder.load(builder.gep(columns_p, [i]))]), align=4)
            return []

        emit_loop(builder, count_, [], place)
        return context.get_dummy_value()
    return types.void(*(types.int64,) * 4), codegen


@jit
def refill(x, padded, row_at, column_at, first, last):
    """Blocks ``first`` to ``last - 1`` of x (CB, H * W, LANES), an image already in channel blocks
    (a ``lite.blocking`` chain's), into padded (CB, positions, LANES) as ``fill`` places them:
    x[., y * W + i] at row_at[y] + column_at[i]; zero elsewhere. One vector a position
    (``_place_row``: the loop over lanes did not vectorize)."""
    h, w = row_at.size, column_at.size
    padded[first:last] = 0
    x_block, padded_block = x.shape[1] * LANES * 4, padded.shape[1] * LANES * 4
    for block in range(first, last):
        for y in range(h):
            _place_row(x.ctypes.data + block * x_block + y * w * LANES * 4,
                       padded.ctypes.data + block * padded_block + row_at[y] * LANES * 4, column_at.ctypes.data, w)


@jit
def block_products(padded, offsets, panels, out, bases, tail, tiles, first, last, bias, lo, hi, code, alpha,
                   residual, span):
    """Units ``first`` to ``last - 1`` (unit u: position tile u % tiles of group u // tiles) of out
    (OB, P, LANES) from the padded blocks, each tile's terms in chunks of CHUNK_TERMS; the tile of
    a unit's last chunk adds the bias and residual and clips in registers (then the activation runs
    on its positions, ACTIVATION_TILES at a time, while they are in cache). A last tile short of
    ROWS positions sums in ``tail[group]`` (VECTORS, ROWS, LANES), copies its positions out and
    finishes them there (``_finish``). ``span`` > 0: a grouped convolution's (``_grouped_units``)."""
    if span:
        _grouped_units(padded, offsets, panels, out, bases, tail, tiles, span, first, last, bias, lo, hi, code, alpha,
                       residual)
        return
    terms, out_blocks, positions = offsets.size, out.shape[0], out.shape[1]
    plane, short_rows = positions * LANES, positions - (tiles - 1) * ROWS
    added, step = (residual.ctypes.data, 1) if residual.size else (ZEROS.ctypes.data, 0)
    for group in range(first // tiles, (last - 1) // tiles + 1):
        start, stop = max(first - group * tiles, 0), min(last - group * tiles, tiles)
        block, vectors = group_blocks(group, out_blocks)
        x_at, bases_at, bias_at = padded.ctypes.data, bases.ctypes.data, bias[block:].ctypes.data
        last_whole = stop - 2 if stop == tiles and short_rows < ROWS else stop - 1
        for chunk in range(0, terms, CHUNK_TERMS):
            count = min(CHUNK_TERMS, terms - chunk)
            ends = chunk + count == terms
            offsets_at, panel_at = offsets[chunk:].ctypes.data, panels[group, chunk:].ctypes.data
            pending = start  # NOTE: the first whole tile whose activation has not run
            for tile in range(start, stop):
                offset = (block * plane + tile * ROWS * LANES) * 4
                short = tile == tiles - 1 and short_rows < ROWS
                target, stride = (tail[group].ctypes.data, ROWS * LANES) if short else (out.ctypes.data + offset, plane)
                _tile_of(vectors, chunk > 0, ends and not short, x_at, bases_at + tile * ROWS * 8, offsets_at,
                         panel_at, count, target, stride, bias_at, added + offset * step, step, lo, hi)
                if ends and short:
                    _close_tile(out, tail[group, :vectors], block, tile * ROWS, True, bias, lo, hi, code, alpha,
                                residual)
                elif ends and code != CLIP_CODE and (tile == last_whole or tile + 1 - pending == ACTIVATION_TILES):
                    _activate_tiles(out, block, vectors, pending * ROWS, (tile + 1 - pending) * ROWS, code, alpha)
                    pending = tile + 1


@jit
def _grouped_units(padded, offsets, panels, out, bases, tail, tiles, span, first, last, bias, lo, hi, code, alpha,
                   residual):
    """``block_products`` for a grouped convolution: unit u is position tile u % tiles of output
    block u // tiles, which reads the ``span`` input blocks from (u // tiles) // span * span of
    padded (its panel panels[block], (K, LANES))."""
    terms, positions = offsets.size, out.shape[1]
    plane, short_rows, block_floats = positions * LANES, positions - (tiles - 1) * ROWS, padded.shape[1] * LANES
    added, step = (residual.ctypes.data, 1) if residual.size else (ZEROS.ctypes.data, 0)
    for unit in range(first, last):
        block, tile = unit // tiles, unit % tiles
        x_at = padded.ctypes.data + block // span * span * block_floats * 4
        short = tile == tiles - 1 and short_rows < ROWS
        offset = (block * plane + tile * ROWS * LANES) * 4
        target = tail[block // VECTORS, block % VECTORS].ctypes.data if short else out.ctypes.data + offset
        for chunk in range(0, terms, CHUNK_TERMS):
            count = min(CHUNK_TERMS, terms - chunk)
            ends = chunk + count == terms and not short
            _lone_tile_of(chunk > 0, ends, x_at, bases.ctypes.data + tile * ROWS * 8, offsets.ctypes.data + chunk * 8,
                          panels.ctypes.data + (block * terms + chunk) * LANES * 4, count, target, plane,
                          bias.ctypes.data + block * LANES * 4, added + offset * step, step, lo, hi)
        if short or code != CLIP_CODE:
            sums = tail[block // VECTORS, block % VECTORS:block % VECTORS + 1]
            _close_tile(out, sums, block, tile * ROWS, short, bias, lo, hi, code, alpha, residual)


@jit
def _activate_tiles(out, block, vectors, top, rows, code, alpha):
    """The activation of ``code`` on positions ``top`` to ``top + rows - 1`` of blocks ``block`` to
    ``block + vectors - 1`` of out (OB, P, LANES), in place."""
    flat, positions = out.reshape(out.size), out.shape[1]
    for b in range(block, block + vectors):
        activate_run(flat, (b * positions + top) * LANES, rows * LANES, flat.dtype.type(0), code, alpha)


@jit
def _close_tile(out, sums, block, top, short, bias, lo, hi, code, alpha, residual):
    """After the last terms of the tile at position ``top`` of blocks ``block`` on (as many as
    ``sums`` (vectors, ROWS, LANES) holds): a tile short of ROWS positions, which summed in ``sums``,
    goes out and is finished (``_finish``); a whole one, clipped in registers, takes its activation
    (``code``) while in cache."""
    positions, vectors = out.shape[1], sums.shape[0]
    if short:
        rows = positions - top
        for j in range(vectors):
            out[block + j, top:positions] = sums[j, :rows]
        _finish(out, block, vectors, top, rows, bias, lo, hi, code, alpha, residual)
    elif code != CLIP_CODE:
        _activate_tiles(out, block, vectors, top, ROWS, code, alpha)


@jit
def _finish(out, block, vectors, top, rows, bias, lo, hi, code, alpha, residual):
    """Positions ``top`` to ``top + rows - 1`` of blocks ``block`` to ``block + vectors - 1`` of out
    (OB, P, LANES), in place: clip(sum + bias (OB, LANES) (+ residual, out's shape; empty for
    none), lo, hi), then the activation of ``code``."""
    flat, positions = out.reshape(out.size), out.shape[1]
    for b in range(block, block + vectors):
        for p in range(top, top + rows):
            if residual.size:
                for lane in range(LANES):
                    out[b, p, lane] = min(max(out[b, p, lane] + bias[b, lane] + residual[b, p, lane], lo), hi)
            else:
                for lane in range(LANES):
                    out[b, p, lane] = min(max(out[b, p, lane] + bias[b, lane], lo), hi)
        if code != CLIP_CODE:
            activate_run(flat, (b * positions + top) * LANES, rows * LANES, flat.dtype.type(0), code, alpha)


# The block of the products on the crew (``lite.kernels.fast.crew.Jobs``), then (first, last) a piece:
_PADDED, _PADDED_N, _OFFSETS, _TERMS, _PANELS, _VECTORSS, _WIDE, _OUT_BLOCKS, _WIDE_POSITIONS, _TILES = range(10)
_HEADER = 10


def products_jobs(plan: BlockedDirectPlan, weights: np.ndarray, padded: np.ndarray, wide: np.ndarray,
              bounds: list[tuple[int, int]]):
    """``plan.products``' pieces of ``bounds`` (units) as jobs for the crew."""
    from lite.kernels.fast.crew import Jobs, pieces_block

    block = pieces_block(_HEADER, bounds)
    block[[_PADDED, _PADDED_N, _OFFSETS, _TERMS]] = padded.ctypes.data, padded.size, plan.offsets.ctypes.data, \
        plan.offsets.size
    block[[_PANELS, _VECTORSS, _WIDE, _OUT_BLOCKS, _WIDE_POSITIONS, _TILES]] = weights.ctypes.data, weights.shape[0], \
        wide.ctypes.data, wide.shape[0], wide.shape[1], plan.tiles
    return Jobs(products_job, block, len(bounds), (weights, padded, plan.offsets, wide))


def products_job(index, data, extra):
    """Piece ``index`` of the products that the block at ``data`` describes."""
    block = carray(data, (_HEADER + 2 * (index + 1),), np.int64)
    terms = block[_TERMS]
    padded = carray(as_pointer(block[_PADDED]), (block[_PADDED_N],), np.float32)
    offsets = carray(as_pointer(block[_OFFSETS]), (terms,), np.int64)
    panels = carray(as_pointer(block[_PANELS]), (block[_VECTORSS], terms, WIDTH), np.float32)
    wide = carray(as_pointer(block[_WIDE]), (block[_OUT_BLOCKS], block[_WIDE_POSITIONS], LANES), np.float32)
    piece = _HEADER + 2 * index
    products(padded, offsets, panels, wide, block[_TILES], block[piece], block[piece + 1])


# The blocks of the fill on the crew:
_F_X, _F_N, _F_C, _F_H, _F_W, _F_PADDED, _F_BLOCKS, _F_POSITIONS, _F_IMAGE, _F_ROWS, _F_COLUMNS = range(11)
_F_HEADER = 11


def fill_jobs(plan: BlockedDirectPlan, x: np.ndarray, image: int, padded: np.ndarray,
              bounds: list[tuple[int, int]]):
    """``plan.fill``'s pieces of ``bounds`` (input blocks) as jobs for the crew."""
    from lite.kernels.fast.crew import Jobs, pieces_block

    block = pieces_block(_F_HEADER, bounds)
    block[:_F_HEADER] = x.ctypes.data, *x.shape, padded.ctypes.data, *padded.shape[:2], image, \
        plan.row_at.ctypes.data, plan.column_at.ctypes.data
    return Jobs(fill_job, block, len(bounds), (x, padded, plan.row_at, plan.column_at))


def fill_job(index, data, extra):
    """Piece ``index`` of the fill that the block at ``data`` describes."""
    block = carray(data, (_F_HEADER + 2 * (index + 1),), np.int64)
    x = carray(as_pointer(block[_F_X]), (block[_F_N], block[_F_C], block[_F_H], block[_F_W]), np.float32)
    padded = carray(as_pointer(block[_F_PADDED]), (block[_F_BLOCKS], block[_F_POSITIONS], LANES), np.float32)
    row_at = carray(as_pointer(block[_F_ROWS]), (block[_F_H],), np.int64)
    column_at = carray(as_pointer(block[_F_COLUMNS]), (block[_F_W],), np.int64)
    piece = _F_HEADER + 2 * index
    fill(x, block[_F_IMAGE], padded, row_at, column_at, block[piece], block[piece + 1])


# The block of the fill by rows on the crew (x's address, shape and image set per call: ``aim_fill_rows``):
_FR_X, _FR_N, _FR_C, _FR_H, _FR_W, _FR_IMAGE, _FR_PADDED, _FR_BLOCKS, _FR_POSITIONS, _FR_LANES, _FR_LAYOUT = range(11)
_FR_HEADER = 11


def fill_rows_jobs(plan: BlockedDirectPlan, padded: np.ndarray, bounds: list[tuple[int, int]]):
    """``plan.fill_rows``' pieces of ``bounds`` (padded rows) as jobs for the crew, aimed at an image
    by ``aim_fill_rows`` before each run."""
    from lite.kernels.fast.crew import Jobs, pieces_block

    block = pieces_block(_FR_HEADER, bounds)
    block[_FR_PADDED:_FR_HEADER] = padded.ctypes.data, *padded.shape, plan.layout.ctypes.data
    return Jobs(fill_rows_job, block, len(bounds), (padded, plan.layout))


def aim_fill_rows(jobs, x: np.ndarray, image: int) -> None:
    """Points ``fill_rows_jobs``' jobs at image ``image`` of x (N, C, H, W), which they hold while they live."""
    jobs.block[_FR_X:_FR_PADDED] = x.ctypes.data, *x.shape, image
    jobs.arrays = (*jobs.arrays[:2], x)


def fill_rows_job(index, data, extra):
    """Piece ``index`` of the fill by rows that the block at ``data`` describes."""
    block = carray(data, (_FR_HEADER + 2 * (index + 1),), np.int64)
    x = carray(as_pointer(block[_FR_X]), (block[_FR_N], block[_FR_C], block[_FR_H], block[_FR_W]), np.float32)
    padded = carray(as_pointer(block[_FR_PADDED]), (block[_FR_BLOCKS], block[_FR_POSITIONS], block[_FR_LANES]),
                    np.float32)
    piece = _FR_HEADER + 2 * index
    fill_rows(x, block[_FR_IMAGE], padded, carray(as_pointer(block[_FR_LAYOUT]), (7,), np.int64), block[piece],
              block[piece + 1])


# The block of the write-out on the crew:
_O_WIDE, _O_BLOCKS, _O_POSITIONS, _O_OUT, _O_N, _O_C, _O_OH, _O_OW, _O_IMAGE, _O_BIAS = range(10)
_O_LO, _O_HI, _O_ALPHA, _O_CODE, _O_WQ, _O_RESIDUAL, _O_RESIDUAL_N = range(10, 17)
_O_HEADER = 17


def write_jobs(plan: BlockedDirectPlan, wide: np.ndarray, out: np.ndarray, image: int, bias: np.ndarray, lo, hi,
               code: int, alpha, bounds: list[tuple[int, int]], residual: np.ndarray | None = None):
    """``plan.write_out``'s pieces of ``bounds`` (output channels) as jobs for the crew."""
    from lite.kernels.fast.crew import Jobs, pieces_block

    added = NO_RESIDUAL if residual is None else residual.reshape(-1)
    block = pieces_block(_O_HEADER, bounds)
    block[[_O_WIDE, _O_BLOCKS, _O_POSITIONS]] = wide.ctypes.data, *wide.shape[:2]
    block[[_O_OUT, _O_N, _O_C, _O_OH, _O_OW, _O_IMAGE, _O_BIAS]] = out.ctypes.data, *out.shape, image, bias.ctypes.data
    block[_O_LO:_O_CODE].view(np.float64)[:] = lo, hi, alpha
    block[[_O_CODE, _O_WQ, _O_RESIDUAL, _O_RESIDUAL_N]] = code, plan.wq, added.ctypes.data, added.size
    return Jobs(write_job, block, len(bounds), (wide, out, bias, added))


def write_job(index, data, extra):
    """Piece ``index`` of the write-out that the block at ``data`` describes."""
    block = carray(data, (_O_HEADER + 2 * (index + 1),), np.int64)
    floats = carray(data, (_O_HEADER,), np.float64)
    wide = carray(as_pointer(block[_O_WIDE]), (block[_O_BLOCKS], block[_O_POSITIONS], LANES), np.float32)
    out = carray(as_pointer(block[_O_OUT]), (block[_O_N], block[_O_C], block[_O_OH], block[_O_OW]), np.float32)
    bias = carray(as_pointer(block[_O_BIAS]), (block[_O_C],), np.float32)
    residual = carray(as_pointer(block[_O_RESIDUAL]), (block[_O_RESIDUAL_N],), np.float32)
    piece = _O_HEADER + 2 * index
    write_out(wide, out, block[_O_IMAGE], bias, np.float32(floats[_O_LO]), np.float32(floats[_O_HI]),
              block[_O_CODE], np.float32(floats[_O_ALPHA]), block[_O_WQ], block[piece], block[piece + 1], residual)


# The block of the refill on the crew:
_R_X, _R_BLOCKS, _R_POSITIONS, _R_PADDED, _R_PADDED_POSITIONS, _R_ROWS, _R_H, _R_COLUMNS, _R_W = range(9)
_R_HEADER = 9


def refill_jobs(plan: BlockedDirectPlan, x: np.ndarray, padded: np.ndarray, bounds: list[tuple[int, int]]):
    """``refill``'s pieces of ``bounds`` (input blocks) as jobs for the crew."""
    from lite.kernels.fast.crew import Jobs, pieces_block

    block = pieces_block(_R_HEADER, bounds)
    block[:_R_HEADER] = x.ctypes.data, *x.shape[:2], padded.ctypes.data, padded.shape[1], \
        plan.row_at.ctypes.data, plan.row_at.size, plan.column_at.ctypes.data, plan.column_at.size
    return Jobs(refill_job, block, len(bounds), (x, padded, plan.row_at, plan.column_at))


def refill_job(index, data, extra):
    """Piece ``index`` of the refill that the block at ``data`` describes."""
    block = carray(data, (_R_HEADER + 2 * (index + 1),), np.int64)
    blocks = block[_R_BLOCKS]
    x = carray(as_pointer(block[_R_X]), (blocks, block[_R_POSITIONS], LANES), np.float32)
    padded = carray(as_pointer(block[_R_PADDED]), (blocks, block[_R_PADDED_POSITIONS], LANES), np.float32)
    row_at = carray(as_pointer(block[_R_ROWS]), (block[_R_H],), np.int64)
    column_at = carray(as_pointer(block[_R_COLUMNS]), (block[_R_W],), np.int64)
    piece = _R_HEADER + 2 * index
    refill(x, padded, row_at, column_at, block[piece], block[piece + 1])


# The block of the products into channel blocks on the crew:
(_B_PADDED, _B_PADDED_BLOCKS, _B_PADDED_POSITIONS, _B_PADDED_LANES, _B_OFFSETS, _B_TERMS, _B_PANELS, _B_GROUPS,
 _B_OUT, _B_BLOCKS, _B_POSITIONS, _B_BASES, _B_TILES, _B_TAIL, _B_TAIL_GROUPS, _B_BIAS, _B_CODE, _B_RESIDUAL, _B_SPAN,
 _B_ROW) = range(20)
_B_LO, _B_HI, _B_ALPHA = range(20, 23)
_B_HEADER = 23


def block_products_jobs(plan: BlockedDirectPlan, weights: np.ndarray, padded: np.ndarray, out: np.ndarray,
                        tail: np.ndarray, bias: np.ndarray, lo, hi, code: int, alpha, residual: np.ndarray,
                        bounds: list[tuple[int, int]]):
    """``plan.block_products``' pieces of ``bounds`` (units) as jobs for the crew."""
    from lite.kernels.fast.crew import Jobs, pieces_block

    block = pieces_block(_B_HEADER, bounds)
    block[[_B_PADDED, _B_PADDED_BLOCKS, _B_PADDED_POSITIONS, _B_PADDED_LANES]] = padded.ctypes.data, *padded.shape
    block[[_B_OFFSETS, _B_TERMS]] = plan.offsets.ctypes.data, plan.offsets.size
    block[[_B_PANELS, _B_GROUPS, _B_ROW, _B_OUT, _B_BLOCKS, _B_POSITIONS]] = weights.ctypes.data, weights.shape[0], \
        weights.shape[2], out.ctypes.data, *out.shape[:2]
    block[[_B_BASES, _B_TILES, _B_TAIL, _B_TAIL_GROUPS, _B_BIAS, _B_CODE]] = plan.bases.ctypes.data, \
        plan.block_tiles, tail.ctypes.data, tail.shape[0], bias.ctypes.data, code
    block[_B_SPAN] = plan.grouped_span
    block[_B_RESIDUAL] = residual.ctypes.data if residual.size else 0
    block[_B_LO:_B_HEADER].view(np.float64)[:] = lo, hi, alpha
    return Jobs(block_products_job, block, len(bounds), (weights, padded, plan.offsets, out, plan.bases, tail, bias,
                                                         residual))


def block_products_job(index, data, extra):
    """Piece ``index`` of the products into channel blocks that the block at ``data`` describes."""
    block = carray(data, (_B_HEADER + 2 * (index + 1),), np.int64)
    floats = carray(data, (_B_HEADER,), np.float64)
    terms, groups, blocks, positions = block[_B_TERMS], block[_B_GROUPS], block[_B_BLOCKS], block[_B_POSITIONS]
    padded = carray(as_pointer(block[_B_PADDED]), (block[_B_PADDED_BLOCKS], block[_B_PADDED_POSITIONS],
                                                   block[_B_PADDED_LANES]), np.float32)
    offsets = carray(as_pointer(block[_B_OFFSETS]), (terms,), np.int64)
    panels = carray(as_pointer(block[_B_PANELS]), (groups, terms, block[_B_ROW]), np.float32)
    out = carray(as_pointer(block[_B_OUT]), (blocks, positions, LANES), np.float32)
    bases = carray(as_pointer(block[_B_BASES]), (block[_B_TILES], ROWS), np.int64)
    tail = carray(as_pointer(block[_B_TAIL]), (block[_B_TAIL_GROUPS], VECTORS, ROWS, LANES), np.float32)
    bias = carray(as_pointer(block[_B_BIAS]), (blocks, LANES), np.float32)
    residual = carray(as_pointer(block[_B_RESIDUAL]), (blocks if block[_B_RESIDUAL] else 0, positions, LANES),
                      np.float32)
    piece = _B_HEADER + 2 * index
    block_products(padded, offsets, panels, out, bases, tail, block[_B_TILES], block[piece], block[piece + 1],
                   bias, np.float32(floats[_B_LO]), np.float32(floats[_B_HI]), block[_B_CODE],
                   np.float32(floats[_B_ALPHA]), residual, block[_B_SPAN])
