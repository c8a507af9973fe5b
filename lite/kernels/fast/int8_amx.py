"""Quantized convolutions on AMX tiles (Advanced Matrix Extensions): ``tdpbsud`` adds to each of
16 x 16 int32 sums the 64 products of a row of signed bytes by a column of unsigned bytes.

The convolution is the byte-quad one (``int8_quads``): the weight's offsets ``w - w_zero_point`` as
signed bytes, the input as unsigned bytes ``u`` with the pads holding ``p``, and ``- p * sum w'``
folded into the bias, so the sums here are those of ``conv_quad_items`` and their requantization
is the same (``int8._requantizing_finish``); only the products run on tiles instead of vectors.

A step computes 32 output channels by 32 output positions in four accumulator tiles (tmm0-3): for
each 64 input channels of one tap, two weight tiles (tmm4-5: 16 channels' rows of 64 bytes) and two
input tiles (tmm6-7: 16 quad words of 16 positions, one row per four channels), four ``tdpbsud``.
The weight is packed tap by tap (``pack_amx_weight``) and its channels padded to whole tiles; the
input stays in the phases of the quad fill (``int8_quads.fill_quad_items``), where the quad words
of one position and tap are one phase plane apart: a tile load's stride.

The instructions are written as bytes (``.byte``) in inline assembly, so the code compiles for any
target; it runs only where the CPU has AMX-INT8 and Linux lets this process use the tile registers
(``available``: ``arch_prctl(ARCH_REQ_XCOMP_PERM)``, once per process). Each call configures the
tiles of its own thread (``ldtilecfg``) and releases them after (``tilerelease``).
"""

from __future__ import annotations

import ctypes
import functools
import os
import sys

import numpy as np
from llvmlite import ir
from numba import carray, types
from numba import uint64 as _u  # NOTE: unsigned indices skip the negative-index check, so the loops vectorize
from numba.extending import intrinsic

from lite.kernels import fast
from lite.kernels.fast import compiled, exact_jit, jit
from lite.kernels.fast.crew import as_pointer
from lite.kernels.fast.int8 import LANES, SUMS, _requantizing_finish, copy_spare
from lite.kernels.fast.tile import WIDTH, prefetch

TILE = 16
"""Rows of a tile, and int32 words (quads, or sums) of a row: 64 bytes."""
BLOCK = 2 * TILE
"""Output channels, and output positions, that one step computes."""
CONFIG_WORDS = 16
"""int32 words of the tile configuration (64 bytes) at the start of a call's scratch."""

_ARCH_PRCTL, _REQ_XCOMP_PERM, _XTILEDATA = 158, 0x1023, 18


def available() -> bool:
    """Whether compiled kernels run on byte quads (``int8_quads.available``), ``DELITE_AMX`` is not
    0, the CPU has AMX-INT8 and this process may use its tiles."""
    if os.environ.get("DELITE_AMX", "1").strip() == "0" or not fast.enabled():
        return False
    from lite.kernels.fast import int8_quads

    return int8_quads.available() and _tiles_permitted()


@functools.cache
def _tiles_permitted() -> bool:
    """The CPU's AMX-TILE and AMX-INT8 (as LLVM reads them), then Linux's permission for this
    process to use the tile data (asked once; a kernel without it, or that refuses, says no)."""
    if not sys.platform.startswith("linux") or os.uname().machine != "x86_64":
        return False
    from llvmlite import binding

    features = binding.get_host_cpu_features()
    if not (features.get("amx-tile") and features.get("amx-int8")):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.syscall(_ARCH_PRCTL, _REQ_XCOMP_PERM, _XTILEDATA) == 0
    except (OSError, AttributeError):
        return False


def _parse_asm() -> None:
    """Lets LLVM read inline assembly (numba sets up the target without its parser): needed wherever
    a function that calls these kernels is compiled, so done when this module is imported."""
    from llvmlite import binding

    binding.initialize_native_asmparser()


_parse_asm()  # NOTE: at import: a caller compiled later links these kernels' IR, their assembly with it


def _bytes(*values: int) -> str:
    return ".byte " + ",".join(f"0x{v:02x}" for v in values)


def _asm(builder: ir.IRBuilder, text: str, constraints: str, args: list) -> None:
    kinds = [a.type for a in args]
    code = ir.InlineAsm(ir.FunctionType(ir.VoidType(), kinds), text, constraints, side_effect=True)
    builder.call(code, args)


def _pointer_asm(text: str):
    """An intrinsic ``(address)`` running ``text`` with the address in rax."""
    def codegen(context, builder, signature, args):
        _asm(builder, text, "{rax},~{memory}", [args[0]])
        return context.get_dummy_value()

    def function(typingctx, address):
        return types.void(types.int64), codegen
    return intrinsic(function)


def _plain_asm(text: str):
    """An intrinsic ``()`` running ``text``."""
    def codegen(context, builder, signature, args):
        _asm(builder, text, "~{memory}", [])
        return context.get_dummy_value()

    def function(typingctx):
        return types.void(), codegen
    return intrinsic(function)


def _strided_asm(texts: list[str]):
    """An intrinsic ``(tile, address, stride)`` running ``texts[tile]`` (tile a literal) with the
    address in rax and the stride in rcx."""
    def function(typingctx, tile, address, stride):
        if not isinstance(tile, types.IntegerLiteral):
            return None

        def codegen(context, builder, signature, args):
            _asm(builder, texts[tile.literal_value], "{rax},{rcx},~{memory}", [args[1], args[2]])
            return context.get_dummy_value()
        return types.void(tile, types.int64, types.int64), codegen
    return intrinsic(function)


configure_tiles = _pointer_asm(_bytes(0xC4, 0xE2, 0x78, 0x49, 0x00))
"""``ldtilecfg [address]``: the 64-byte configuration (``write_config``)."""
release_tiles = _plain_asm(_bytes(0xC4, 0xE2, 0x78, 0x49, 0xC0))
"""``tilerelease``."""
load_tile = _strided_asm([_bytes(0xC4, 0xE2, 0x7B, 0x4B, 0x04 | t << 3, 0x08) for t in range(8)])
"""``tileloadd tmm<tile>, [address + stride]``: 16 rows of 64 bytes, ``stride`` bytes apart."""
store_tile = _strided_asm([_bytes(0xC4, 0xE2, 0x7A, 0x4B, 0x04 | t << 3, 0x08) for t in range(8)])
"""``tilestored [address + stride], tmm<tile>``."""
zero_tiles = _plain_asm("\n".join(_bytes(0xC4, 0xE2, 0x7B, 0x49, 0xC0 | t << 3) for t in range(4)))
"""``tilezero`` tmm0-3, the accumulators."""


def _dot(sums: int, signed: int, unsigned: int) -> str:
    """``tdpbsud tmm<sums>, tmm<signed>, tmm<unsigned>``."""
    return _bytes(0xC4, 0xE2, (~unsigned & 0xF) << 3 | 0x2, 0x5E, 0xC0 | sums << 3 | signed)


multiply_block = _plain_asm("\n".join(_dot(2 * a + b, 4 + a, 6 + b) for a in range(2) for b in range(2)))
"""tmm0-3 (2 x 2 blocks of sums) plus the products of the weight tiles tmm4-5 by the input tiles tmm6-7."""


def _requantize_block_intrinsic(per_row: bool):
    """``requantize_block`` (``per_row``: a convolution's channels) or ``requantize_columns``."""
    addresses = 5 if per_row else 6

    def codegen(context, builder, signature, args):
        sums_at, out_at, out_step, bias_at, multiplier_at = args[:5]
        words = ir.IntType(32).as_pointer()
        terms = None if per_row else builder.inttoptr(args[5], words)
        finish = _requantizing_finish(builder, builder.inttoptr(out_at, ir.IntType(8).as_pointer()), out_step,
                                      builder.inttoptr(bias_at, words),
                                      builder.inttoptr(multiplier_at, ir.FloatType().as_pointer()), args[addresses:],
                                      per_row, terms)
        sums = builder.inttoptr(sums_at, words)
        for r in range(BLOCK):
            for j in range(BLOCK // LANES):
                place = builder.gep(sums, [ir.IntType(64)(r * BLOCK + j * LANES)])
                finish(builder, r, j, builder.load(builder.bitcast(place, SUMS.as_pointer()), align=4))
        return context.get_dummy_value()

    signature = types.void(*(types.int64,) * addresses, *(types.float32,) * 3)
    if per_row:
        def function(typingctx, sums, out, out_stride, bias, multiplier, zero_point, lo, hi):
            return signature, codegen
        return intrinsic(function)

    def columns(typingctx, sums, out, out_stride, bias, multiplier, row_terms, zero_point, lo, hi):
        return signature, codegen
    return intrinsic(columns)


requantize_block = _requantize_block_intrinsic(per_row=True)
"""(sums, out, out_stride, bias, multiplier, zero_point, lo, hi): a step's BLOCK x BLOCK int32 sums
(rows of BLOCK words) plus bias[r], times multiplier[r], requantized into the bytes
out[r * out_stride + j] (``int8.emit_requantize``; addresses as int64)."""
requantize_columns = _requantize_block_intrinsic(per_row=False)
"""(sums, out, out_stride, bias, multiplier, row_terms, zero_point, lo, hi): ``requantize_block``
with a bias and multiplier per column j (a product's) and row_terms[r] added to row r's sums."""


@jit
def write_config(config):
    """The tile configuration: palette 1, eight tiles of 16 rows of 64 bytes."""
    raw = carray(as_pointer(config.ctypes.data), (4 * CONFIG_WORDS,), np.uint8)
    raw[:] = 0
    raw[0] = 1
    for t in range(8):
        raw[16 + 2 * t] = 4 * TILE
        raw[48 + t] = TILE


@jit
def pack_amx_weight(quads, channel_words, taps, packed):
    """The quad-packed weight (``int8_quads.pack_conv_quads``: rows of (channel word, tap) words)
    as tiles: for each BLOCK rows and each step of TILE words (k = t * W + c, W the channel words
    padded to whole tiles: zero past ``channel_words``, as past quads' rows), the two weight tiles'
    16 rows of 16 words, contiguous; ``packed`` (rows, taps * W)."""
    words = packed.shape[1]
    tap_words = words // taps
    tiles = carray(as_pointer(packed.ctypes.data), (packed.shape[0] // BLOCK, words // TILE, 2, TILE, TILE), np.int32)
    for o in range(quads.shape[0]):
        half, row = divmod(o % BLOCK, TILE)
        for t in range(taps):
            for c in range(channel_words):
                k = t * tap_words + c
                tiles[o // BLOCK, k // TILE, half, row, k % TILE] = quads[o, c * taps + t]


def _copy_row_intrinsic():
    def codegen(context, builder, signature, args):
        target, source = (builder.inttoptr(a, ir.IntType(8).as_pointer()) for a in args)
        copy = builder.module.declare_intrinsic("llvm.memcpy", [target.type, source.type, ir.IntType(64)])
        builder.call(copy, [target, source, ir.IntType(64)(BLOCK * 4), ir.IntType(1)(0)])
        return context.get_dummy_value()

    def function(typingctx, target, source):
        return types.void(types.int64, types.int64), codegen
    return intrinsic(function)


def _prefetch_intrinsic():
    def codegen(context, builder, signature, args):
        start = builder.inttoptr(args[0], ir.IntType(8).as_pointer())
        for line in range(STEP_BYTES // 64):
            prefetch(builder, builder.gep(start, [ir.IntType(64)(64 * line)]))
        return context.get_dummy_value()

    def function(typingctx, address):
        return types.void(types.int64), codegen
    return intrinsic(function)


STEP_BYTES = 2 * TILE * TILE * 4
"""The bytes of a step's two weight tiles."""
AHEAD = 4
"""Steps ahead whose weight tiles a step prefetches (a large weight streams from memory)."""
prefetch_step = _prefetch_intrinsic()
"""(address): prefetches the STEP_BYTES from address into every level of cache."""
copy_row = _copy_row_intrinsic()
"""(target, source): BLOCK int32 words from source to target (addresses as int64; two vector moves)."""


@jit
def _pack_panel(source, offsets, plane, panel):
    """A panel's input tiles, aligned: for each step of TILE words k, its 16 rows (word k + i at
    ``source + offsets[k] * 4 + i * plane``) of BLOCK positions' words, into ``panel``'s rows."""
    target = panel.ctypes.data
    for k in range(0, offsets.size, TILE):
        start = source + offsets[k] * 4
        for i in range(TILE):
            copy_row(target + (k + i) * BLOCK * 4, start + i * plane)


@jit
def conv_amx_items(flat, block, packed, offsets, bias, multiplier, zero_point, lo, hi, grid, scratch, whole, first,
                   last):
    """Items ``first`` to ``last`` of a one-group convolution on tiles; ``flat``: the input's phases
    (quad words, ``block`` of them an image), ``offsets[k]``: where word k of a weight row
    (``pack_amx_weight``'s tiles) starts in an image's phases for position 0, the 16 words of a
    tile row one phase plane apart; the output into ``grid`` (images, channels, positions) as
    bytes; ``scratch``: ``scratch_words`` int32 words. ``whole``: an item is (image, block of BLOCK
    output channels), the image's panels packed once a call and each weight tile read once for
    them all (small planes, large weights); else (image, panel of BLOCK positions), every channel."""
    channels, positions, words = grid.shape[1], grid.shape[2], offsets.size
    panels, blocks, plane = -(-positions // BLOCK), -(-channels // BLOCK), (offsets[1] - offsets[0]) * 4
    base = scratch.ctypes.data + (-scratch.ctypes.data) % 64
    config = carray(as_pointer(base), (CONFIG_WORDS,), np.int32)
    sums = carray(as_pointer(base + CONFIG_WORDS * 4), (BLOCK * BLOCK,), np.int32)
    spare = carray(as_pointer(sums.ctypes.data + BLOCK * BLOCK * 4), (BLOCK * WIDTH,), np.uint8)
    held = carray(as_pointer(spare.ctypes.data + BLOCK * WIDTH), (panels if whole else 1, words, BLOCK), np.int32)
    write_config(config)
    configure_tiles(config.ctypes.data)
    packed_image = -1
    for item in range(first, last):
        if whole:
            image, o = divmod(item, blocks)
            if image != packed_image:
                for panel in range(panels):
                    _pack_panel(flat.ctypes.data + (image * block + panel * BLOCK) * 4, offsets, plane, held[panel])
                packed_image = image
            for panel in range(panels):
                _tile_block(packed, held[panel], o * BLOCK, panel * BLOCK, bias, multiplier, zero_point, lo, hi,
                            grid[image], sums, spare)
        else:
            image, panel = divmod(item, panels)
            _pack_panel(flat.ctypes.data + (image * block + panel * BLOCK) * 4, offsets, plane, held[0])
            for o in range(0, channels, BLOCK):
                _tile_block(packed, held[0], o, panel * BLOCK, bias, multiplier, zero_point, lo, hi, grid[image],
                            sums, spare)
    release_tiles()


@jit
def _tile_block(packed, panel, o, column, bias, multiplier, zero_point, lo, hi, out, sums, spare):
    """The BLOCK x BLOCK outputs from channel o and position ``column`` of one image (``out``:
    channels, positions): the products of the weight's tiles by the packed ``panel``'s, requantized."""
    words = panel.shape[0]
    weights = packed.ctypes.data + o * words * 4
    zero_tiles()
    for k in range(0, words, TILE):
        step = weights + k // TILE * STEP_BYTES
        prefetch_step(step + AHEAD * STEP_BYTES)
        load_tile(4, step, 4 * TILE)
        load_tile(5, step + STEP_BYTES // 2, 4 * TILE)
        inputs = panel.ctypes.data + k * BLOCK * 4
        load_tile(6, inputs, BLOCK * 4)
        load_tile(7, inputs + TILE * 4, BLOCK * 4)
        multiply_block()
    rows, count = min(BLOCK, out.shape[0] - o), min(BLOCK, out.shape[1] - column)
    _requantize_block(sums, spare, out[o:o + rows], column, count, bias.ctypes.data + o * 4,
                      multiplier.ctypes.data + o * 4, zero_point, lo, hi)


@jit
def scratch_words(words, held):
    """The int32 words of ``conv_amx_items``' scratch for weight rows of ``words`` words, ``held``
    panels packed at once."""
    return CONFIG_WORDS + BLOCK * BLOCK + BLOCK * WIDTH // 4 + held * words * BLOCK + 16


def whole_image(channels: int, positions: int, words: int) -> bool:
    """Whether ``conv_amx_items`` runs with ``whole``: the weight larger than the image's packed
    panels, and those within ``HELD_BYTES``."""
    panels = -(-positions // BLOCK)
    return channels > panels * BLOCK and panels * words * BLOCK * 4 <= HELD_BYTES


HELD_BYTES = 1 << 20
"""The most bytes of packed panels a call holds at once (in the core's second-level cache)."""


@jit
def _requantize_block(sums, spare, out, column, count, bias_at, multiplier_at, zero_point, lo, hi):
    """The accumulators (tmm0-3) into ``sums``, requantized into out's rows at ``column`` (``count``
    positions; through ``spare``, rows WIDTH bytes apart as ``int8.copy_spare`` reads them, where the
    block reaches past them: the tiles run only with the wide register tile, whose WIDTH is past BLOCK)."""
    _store_sums(sums)
    rows, positions = out.shape
    if rows == BLOCK and count == BLOCK:
        requantize_block(sums.ctypes.data, out.ctypes.data + column, positions, bias_at, multiplier_at,
                         zero_point, lo, hi)
        return
    requantize_block(sums.ctypes.data, spare.ctypes.data, WIDTH, bias_at, multiplier_at, zero_point, lo, hi)
    copy_spare(spare, out, column, rows, count)


@jit
def _store_sums(sums):
    """The accumulators tmm0-3 into ``sums``: BLOCK rows of BLOCK int32 words (tmm0 and tmm1 side by
    side in the first TILE rows, tmm2 and tmm3 below)."""
    at = sums.ctypes.data
    store_tile(0, at, BLOCK * 4)
    store_tile(1, at + TILE * 4, BLOCK * 4)
    store_tile(2, at + TILE * BLOCK * 4, BLOCK * 4)
    store_tile(3, at + (TILE * BLOCK + TILE) * 4, BLOCK * 4)


# ---- products ------------------------------------------------------------------------------------

PRODUCT_SCRATCH_WORDS = CONFIG_WORDS + BLOCK * BLOCK + BLOCK * WIDTH // 4 + 16
"""int32 words of ``product_amx_items``' scratch: the configuration, the sums, the spare, alignment."""


def product_shapes(m: int, k: int, n: int) -> tuple[int, int, int]:
    """(rows, words, blocks) of ``product_amx_items``' operands for M x K times K x N: the rows and
    their quad words padded to whole tiles, and the blocks of BLOCK columns."""
    return -(-m // BLOCK) * BLOCK, -(-k // (4 * TILE)) * TILE, -(-n // BLOCK)


def tile_product_weight(panels: np.ndarray, blocks: int, tiles: np.ndarray) -> None:
    """The weight's panels of unsigned quads (P, words, WIDTH; ``int8_quads.pack_activation_quads``'
    layout) as ``product_amx_items`` streams them into ``tiles`` (blocks, steps, 2, TILE, TILE): for
    each block of BLOCK columns and each step of TILE words, its two tiles (16 words of 16 columns)
    contiguous."""
    words = panels.shape[1]
    by_word = panels.transpose(1, 0, 2).reshape(words, -1)[:, :blocks * BLOCK]
    tiles[:] = by_word.reshape(words // TILE, TILE, blocks, 2, TILE).transpose(2, 0, 3, 1, 4)


@jit
def _block_sums(rows, top, weights, sums):
    """The sums of rows ``top`` to ``top + BLOCK - 1`` of ``rows`` by one block's weight tiles (at
    address ``weights``) into ``sums`` (``_store_sums``), the tiles ``AHEAD`` steps on prefetched."""
    words = rows.shape[1]
    row_bytes = words * 4
    a = rows.ctypes.data + top * row_bytes
    zero_tiles()
    for k in range(0, words, TILE):
        step = weights + k // TILE * STEP_BYTES
        prefetch_step(step + AHEAD * STEP_BYTES)
        load_tile(4, a + k * 4, row_bytes)
        load_tile(5, a + TILE * row_bytes + k * 4, row_bytes)
        load_tile(6, step, 4 * TILE)
        load_tile(7, step + STEP_BYTES // 2, 4 * TILE)
        multiply_block()
    _store_sums(sums)


@jit
def _scratch_parts(scratch):
    """(sums, spare) in ``scratch`` (``PRODUCT_SCRATCH_WORDS``), its tile configuration written and loaded."""
    base = scratch.ctypes.data + (-scratch.ctypes.data) % 64
    config = carray(as_pointer(base), (CONFIG_WORDS,), np.int32)
    sums = carray(as_pointer(base + CONFIG_WORDS * 4), (BLOCK * BLOCK,), np.int32)
    spare = carray(as_pointer(sums.ctypes.data + BLOCK * BLOCK * 4), (BLOCK * WIDTH,), np.uint8)
    write_config(config)
    configure_tiles(config.ctypes.data)
    return sums, spare


@jit
def product_amx_items(rows, row_terms, tiles, bias, multiplier, zero_point, lo, hi, out, scratch, first, last):
    """Column blocks ``first`` to ``last - 1`` (BLOCK columns each) of out (M, N) bytes: ``rows`` of
    signed quad words (``int8_quads.fill_quad_rows``; ``product_shapes``' rows, zero past K and M)
    times the weight's ``tiles`` of unsigned ones (``tile_product_weight``), plus bias[n] and
    row_terms[m], requantized: ``int8_quads.quad_product_panels``' sums and bytes. A block's weight
    streams through once per BLOCK rows."""
    m_count, n_count = out.shape
    sums, spare = _scratch_parts(scratch)
    for item in range(first, last):
        column = item * BLOCK
        count = min(BLOCK, n_count - column)
        for top in range(0, m_count, BLOCK):
            _block_sums(rows, top, tiles[item].ctypes.data, sums)
            height = min(BLOCK, m_count - top)
            whole = height == BLOCK and count == BLOCK
            target, stride = (out[top].ctypes.data + column, n_count) if whole else (spare.ctypes.data, WIDTH)
            requantize_columns(sums.ctypes.data, target, stride, bias.ctypes.data + column * 4,
                               multiplier.ctypes.data + column * 4, row_terms.ctypes.data + top * 4, zero_point, lo,
                               hi)
            if not whole:
                copy_spare(spare, out[top:top + height], column, height, count)
    release_tiles()


@jit
def product_amx_sums(rows, row_terms, tiles, column_terms, out, scratch, first, last):
    """``product_amx_items``' sums unrequantized: out (M, N) int32 = the sums plus column_terms[n] and
    row_terms[m], wrapping as int32 does (MatMulInteger's; ``int8_quads.quad_product_sums``')."""
    m_count, n_count = out.shape
    sums, _ = _scratch_parts(scratch)
    for item in range(first, last):
        column = item * BLOCK
        count = min(BLOCK, n_count - column)
        for top in range(0, m_count, BLOCK):
            _block_sums(rows, top, tiles[item].ctypes.data, sums)
            for r in range(min(BLOCK, m_count - top)):
                term, row, at = row_terms[top + r], out[top + r], r * BLOCK
                for j in range(count):
                    row[_u(column + j)] = sums[_u(at + j)] + column_terms[_u(column + j)] + term
    release_tiles()


@jit
def product_amx_scaled(rows, row_terms, tiles, column_terms, scale, bias, out, scratch, first, last):
    """``product_amx_sums`` into float32: out (M, N) = float32(sum) * scale[n] (+ bias[n] where
    ``bias`` is not empty), the sums' Cast, Mul and Add as ``_scaled_rows`` rounds them (a
    dynamically quantized linear layer, ``lite.fusion_kernels.ScaledIntegerProduct``)."""
    m_count, n_count = out.shape
    sums, _ = _scratch_parts(scratch)
    for item in range(first, last):
        column = item * BLOCK
        count = min(BLOCK, n_count - column)
        for top in range(0, m_count, BLOCK):
            _block_sums(rows, top, tiles[item].ctypes.data, sums)
            _scaled_rows(sums, row_terms, column_terms, scale, bias, out, top, column, min(BLOCK, m_count - top),
                         count)
    release_tiles()


@exact_jit
def _scaled_rows(sums, row_terms, column_terms, scale, bias, out, top, column, height, count):
    """Rows ``top`` to ``top + height - 1``, columns ``column`` on (``count``), of out from a block's
    sums: the int32 total (sum plus the column's and the row's terms, wrapping) to float32, times
    scale[n], plus bias[n]; IEEE float32 steps, as ``int8_elementwise.scaled_sums``."""
    for r in range(height):
        term, row, at = row_terms[top + r], out[top + r], r * BLOCK
        if bias.size:
            for j in range(count):
                total = np.int32(sums[_u(at + j)] + column_terms[_u(column + j)] + term)
                row[_u(column + j)] = np.float32(np.float32(total) * scale[_u(column + j)]) + bias[_u(column + j)]
        else:
            for j in range(count):
                total = np.int32(sums[_u(at + j)] + column_terms[_u(column + j)] + term)
                row[_u(column + j)] = np.float32(total) * scale[_u(column + j)]


# The block of a product on tiles on the crew (``lite.kernels.fast.crew.Jobs``), then per piece
# (first, last, scratch). ``_FORM``: ``REQUANTIZED`` bytes (``product_amx_items``), MatMulInteger's
# int32 ``SUMS`` (``product_amx_sums``: the bias the columns' terms) or ``SCALED`` float32
# (``product_amx_scaled``: the multiplier its scale, ``_FLOAT_BIAS`` its bias of ``_FLOAT_BIAS_N``):
(_ROWS, _ROWS_M, _ROW_WORDS, _ROW_TERMS, _TILES, _TILE_BLOCKS, _PBIAS, _PMULTIPLIER, _OUT, _OUT_M, _OUT_N, _FORM,
 _FLOAT_BIAS, _FLOAT_BIAS_N, _PZERO, _PLO, _PHI) = range(17)
_PRODUCT_HEADER = 17
REQUANTIZED, SUMS_FORM, SCALED = range(3)


def product_crew_jobs(rows: np.ndarray, row_terms: np.ndarray, tiles: np.ndarray, bias: np.ndarray,
                      multiplier: np.ndarray, zero_point, lo, hi, out: np.ndarray, scratches: list[np.ndarray],
                      bounds: list[tuple[int, int]], float_bias: np.ndarray | None = None):
    """``product_amx_items``' blocks as jobs for the crew, one per piece of ``bounds`` with its own
    scratch: ``product_amx_sums``' where ``out`` is int32, ``product_amx_scaled``'s where it is
    float32 (``multiplier`` the scale, ``float_bias`` the bias)."""
    from lite.kernels.fast.crew import Jobs, pieces_block

    form = {np.dtype(np.int32): SUMS_FORM, np.dtype(np.float32): SCALED}.get(out.dtype, REQUANTIZED)
    float_bias = np.zeros(0, np.float32) if float_bias is None else float_bias
    block = pieces_block(_PRODUCT_HEADER, bounds, [[scratch] for scratch in scratches])
    block[:_PZERO] = (rows.ctypes.data, *rows.shape, row_terms.ctypes.data, tiles.ctypes.data, tiles.shape[0],
                      bias.ctypes.data, multiplier.ctypes.data, out.ctypes.data, *out.shape, form,
                      float_bias.ctypes.data, float_bias.size)
    block[_PZERO:_PRODUCT_HEADER].view(np.float64)[:] = zero_point, lo, hi
    kept = (rows, row_terms, tiles, bias, multiplier, out, float_bias, *scratches)
    return Jobs(product_amx_job, block, len(bounds), kept)


@jit
def _product_piece(index, data):
    """Piece ``index`` of the product on tiles that the block at ``data`` describes."""
    block = carray(data, (_PRODUCT_HEADER + 3 * (index + 1),), np.int64)
    floats = carray(data, (_PRODUCT_HEADER,), np.float64)
    m, words, blocks, piece = block[_ROWS_M], block[_ROW_WORDS], block[_TILE_BLOCKS], _PRODUCT_HEADER + 3 * index
    rows = carray(as_pointer(block[_ROWS]), (m, words), np.int32)
    row_terms = carray(as_pointer(block[_ROW_TERMS]), (m,), np.int32)
    tiles = carray(as_pointer(block[_TILES]), (blocks, words // TILE, 2, TILE, TILE), np.int32)
    bias = carray(as_pointer(block[_PBIAS]), (blocks * BLOCK,), np.int32)
    scratch = carray(as_pointer(block[piece + 2]), (PRODUCT_SCRATCH_WORDS,), np.int32)
    shape, first, last = (block[_OUT_M], block[_OUT_N]), block[piece], block[piece + 1]
    multiplier = carray(as_pointer(block[_PMULTIPLIER]), (blocks * BLOCK,), np.float32)
    if block[_FORM] == SUMS_FORM:
        product_amx_sums(rows, row_terms, tiles, bias, carray(as_pointer(block[_OUT]), shape, np.int32), scratch,
                         first, last)
    elif block[_FORM] == SCALED:
        product_amx_scaled(rows, row_terms, tiles, bias, multiplier,
                           carray(as_pointer(block[_FLOAT_BIAS]), (block[_FLOAT_BIAS_N],), np.float32),
                           carray(as_pointer(block[_OUT]), shape, np.float32), scratch, first, last)
    else:
        product_amx_items(rows, row_terms, tiles, bias, multiplier, np.float32(floats[_PZERO]),
                          np.float32(floats[_PLO]), np.float32(floats[_PHI]),
                          carray(as_pointer(block[_OUT]), shape, np.uint8), scratch, first, last)


def product_amx_job(index, data, extra):
    """A crew job: piece ``index`` of the product on tiles the block at ``data`` describes."""
    _product_piece(index, data)


# The block of a convolution on tiles on the crew (``lite.kernels.fast.crew.Jobs``), then per piece
# (first, last, scratch):
(_FLAT, _FLAT_N, _BLOCK, _PACKED, _PACKED_ROWS, _WORDS, _OFFSETS, _BIAS, _MULTIPLIER, _GRID, _IMAGES, _CHANNELS,
 _POSITIONS, _WHOLE, _HELD, _ZERO, _LO, _HI) = range(18)
_HEADER = 18


def conv_crew_jobs(flat: np.ndarray, block_size: int, packed: np.ndarray, offsets: np.ndarray, bias: np.ndarray,
                   multiplier: np.ndarray, zero_point, lo, hi, grid: np.ndarray, scratches: list[np.ndarray],
                   whole: bool, bounds: list[tuple[int, int]]):
    """``conv_amx_items``' items as jobs for the crew, one per piece of ``bounds`` with its own scratch
    (``grid`` viewed as bytes)."""
    from lite.kernels.fast.crew import Jobs, pieces_block

    view = grid.view(np.uint8)
    block = pieces_block(_HEADER, bounds, [[scratch] for scratch in scratches])
    block[:_ZERO] = (flat.ctypes.data, flat.size, block_size, packed.ctypes.data, *packed.shape, offsets.ctypes.data,
                     bias.ctypes.data, multiplier.ctypes.data, view.ctypes.data, *view.shape, int(whole),
                     scratches[0].size)
    block[_ZERO:_HEADER].view(np.float64)[:] = zero_point, lo, hi
    return Jobs(conv_amx_job, block, len(bounds), (flat, packed, offsets, bias, multiplier, view, *scratches))


@jit
def _conv_piece(index, data):
    """Piece ``index`` of the convolution on tiles that the block at ``data`` describes."""
    block = carray(data, (_HEADER + 3 * (index + 1),), np.int64)
    floats = carray(data, (_HEADER,), np.float64)
    rows, words, piece = block[_PACKED_ROWS], block[_WORDS], _HEADER + 3 * index
    conv_amx_items(carray(as_pointer(block[_FLAT]), (block[_FLAT_N],), np.int32), block[_BLOCK],
                   carray(as_pointer(block[_PACKED]), (rows, words), np.int32),
                   carray(as_pointer(block[_OFFSETS]), (words,), np.int64),
                   carray(as_pointer(block[_BIAS]), (rows,), np.int32),
                   carray(as_pointer(block[_MULTIPLIER]), (rows,), np.float32), np.float32(floats[_ZERO]),
                   np.float32(floats[_LO]), np.float32(floats[_HI]),
                   carray(as_pointer(block[_GRID]), (block[_IMAGES], block[_CHANNELS], block[_POSITIONS]), np.uint8),
                   carray(as_pointer(block[piece + 2]), (block[_HELD],), np.int32), block[_WHOLE] != 0, block[piece],
                   block[piece + 1])


def conv_amx_job(index, data, extra):
    """A crew job: piece ``index`` of the convolution on tiles the block at ``data`` describes."""
    _conv_piece(index, data)


@functools.cache
def warm() -> None:
    """Compiles the tile kernels now, at build."""
    i32, i64, f32 = np.int32, np.int64, np.float32
    quads = np.zeros((BLOCK, 2), i32)
    compiled(pack_amx_weight, quads, 1, 2, np.zeros((BLOCK, 2 * TILE), i32))
    compiled(conv_amx_items, np.zeros(1, i32), 1, np.zeros((BLOCK, TILE), i32), np.zeros(TILE, i64),
             np.zeros(BLOCK, i32), np.ones(BLOCK, f32), f32(0), f32(-1), f32(1), np.zeros((1, 1, 1), np.uint8),
             np.zeros(scratch_words(TILE, 1), i32), False, 0, 0)
    compiled(product_amx_items, np.zeros((BLOCK, TILE), i32), np.zeros(BLOCK, i32),
             np.zeros((1, 1, 2, TILE, TILE), i32), np.zeros(WIDTH, i32), np.ones(WIDTH, f32), f32(0), f32(-1), f32(1),
             np.zeros((1, 1), np.uint8), np.zeros(PRODUCT_SCRATCH_WORDS, i32), 0, 0)
    rows, terms, tiles, scratch = np.zeros((BLOCK, TILE), i32), np.zeros(BLOCK, i32), \
        np.zeros((1, 1, 2, TILE, TILE), i32), np.zeros(PRODUCT_SCRATCH_WORDS, i32)
    compiled(product_amx_sums, rows, terms, tiles, terms, np.zeros((1, 1), i32), scratch, 0, 0)
    compiled(product_amx_scaled, rows, terms, tiles, terms, np.ones(BLOCK, f32), np.zeros(0, f32),
             np.zeros((1, 1), f32), scratch, 0, 0)
