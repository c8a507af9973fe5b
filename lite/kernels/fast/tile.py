"""The register tile of the compiled products: ``ROWS`` x ``WIDTH`` sums of K terms in vector FMAs.

Each of the K terms adds, for ROWS rows r and WIDTH columns j, ``a(k, r) * b(k)[j]``: ROWS
scalars of the left operand, each broadcast, times one row of WIDTH floats of the right one
(``VECTORS`` vectors of ``LANES`` floats). The sums stay in registers for all K terms and are
stored once. A narrow tile (fewer vectors) covers the last columns of a row that are fewer
than WIDTH. It is LLVM IR (``<16 x float>`` vectors: LLVM splits them where the machine's are
narrower); its users (``lite.kernels.fast.direct``, ``lite.kernels.fast.gemm``) say where
a(k, r) and b(k) lie.

The tile's shape follows the registers (``lite.kernels.fast.wide_registers``): with 32 registers
of 512 bits, 8 rows by 3 vectors (24 sums); with 16 of 256 bits (AVX2), where each vector takes
two, 6 rows by 1 vector (12 registers of sums, the shape BLIS uses there): with AVX2 the 8 x 3
tile spilled its sums to the stack and ran at half OpenBLAS's speed (docs/performance.md, the
register tile).
"""

from __future__ import annotations

from collections.abc import Callable

from llvmlite import ir
from numba.core import cgutils

from lite.kernels.fast import wide_registers

LANES = 16
WIDE_TILE, NARROW_TILE = (8, 3), (6, 1)
"""(ROWS, VECTORS) with 512-bit registers, and with 256-bit ones."""
ROWS, VECTORS = WIDE_TILE if wide_registers() else NARROW_TILE
WIDTH = LANES * VECTORS  # columns a tile computes
UNROLL = 4
"""Terms a pass of the loop (``emit_tile``'s ``unroll``) where the tiles take more than one: the
1x1 tile on channel blocks (its lanes' addresses fold to constants), the packed GEMM's and the
small-plane convolution's (the loop's counting once per pass). Measured per kernel, and not kept
for the blocked direct kernel (docs/performance.md)."""
TILE_VECTORS = (1, min(2, VECTORS), VECTORS)
"""The vectors of a product's three tile variants (a one-vector and a two-vector narrow tile, the
whole tile): all three are one vector wide where the whole tile is."""

FLOAT, INDEX = ir.FloatType(), ir.IntType(64)
VECTOR = ir.VectorType(FLOAT, LANES)
HALF = ir.VectorType(FLOAT, LANES // 2)
"""The first half of a vector: a tile's last vector where only its first LANES / 2 columns are wanted."""


def emit_tile(builder: ir.IRBuilder, scalar: Callable[[ir.Value, int], ir.Value],
              row: Callable[[ir.Value], ir.Value], count: ir.Value, out: ir.Value, stride: ir.Value,
              vectors: int = VECTORS, accumulate: bool = False, vector_stride: ir.Value | None = None,
              finish: Callable[[ir.Value, ir.Value, int, int], ir.Value] | None = None, rows: int = ROWS,
              ahead: Callable[[ir.Value, int | None], ir.Value | None] | None = None, rows_ahead: int = 0,
              unroll: int = 1, half: bool = False) -> None:
    """Emits the tile: for k below ``count``, the sums ``out[r * stride + j] = sum of
    a(k, r) * b(k)[j]``; ``scalar(k, r)`` emits the address of a(k, r) and ``row(k)`` that of b(k)'s
    first float (float pointers); ``out`` is a float pointer, ``stride`` floats between its rows;
    ``vectors``: the tile's width in vectors (``VECTORS``; fewer for a narrow tile, whose columns
    are ``vectors * LANES``); ``accumulate``: the sums start from out's values (a product's terms
    taken in several passes), else from zero; ``vector_stride``: floats between a row's vectors in
    out (default LANES: the row's columns are contiguous); ``finish(sums, place, r, j)``: emits the
    value stored for row r's vector j (an epilogue in registers; default the sums); ``rows``: the
    tile's rows (``ROWS``; fewer where a count of rows divides better); ``ahead(k, u)``: emits an
    address term k prefetches (the next tile's input, where the hardware's prefetchers lose track),
    or None for none; u is k's place in an unrolled pass (None in the rest);
    ``rows_ahead``: term k prefetches b's row k + rows_ahead too (0: none); ``unroll``: terms a pass of
    the loop takes (a power of two), the rest one a pass after it: with k a known multiple plus a
    constant, addresses such as a(k, r)'s in a block of ``unroll`` channels fold to constant offsets;
    ``half``: the last vector's terms take only its first LANES / 2 columns (``HALF``), and its other
    columns are zero sums (a last block of output channels at most half used: half the multiplies;
    not with ``accumulate``)."""
    assert not (half and accumulate)
    pointer = VECTOR.as_pointer()
    step = INDEX(LANES) if vector_stride is None else vector_stride
    places = [builder.bitcast(builder.gep(out, [builder.add(builder.mul(stride, INDEX(r)),
                                                            builder.mul(step, INDEX(j)))]), pointer)
              for r in range(rows) for j in range(vectors)]
    kinds = [HALF if half and j == vectors - 1 else VECTOR for j in range(vectors)]  # NOTE: each vector's type
    starts = [builder.load(place, align=4) if accumulate else ir.Constant(kinds[index % vectors], 0.0)
              for index, place in enumerate(places)]

    def term(k: ir.Value, sums: list[ir.Value], u: int | None = None) -> list[ir.Value]:
        address = None if ahead is None else ahead(k, u)
        if address is not None:
            prefetch(builder, address)
        start = row(k)
        if rows_ahead:
            later = row(builder.add(k, INDEX(rows_ahead)))
            for j in range(vectors):
                prefetch(builder, builder.gep(later, [INDEX(j * LANES)]))
        b = [builder.load(builder.bitcast(builder.gep(start, [INDEX(j * LANES)]), kinds[j].as_pointer()), align=4)
             for j in range(vectors)]
        updated = []
        for r in range(rows):
            a = splat(builder, builder.load(scalar(k, r)))
            narrow = splat(builder, a, HALF.count) if half else None
            updated += [vector_call(builder, "fma", narrow if kinds[j] is HALF else a, b[j], sums[r * vectors + j])
                        for j in range(vectors)]
        return updated

    for index, (place, value) in enumerate(zip(places, emit_unrolled_loop(builder, count, starts, term, unroll),
                                               strict=True)):
        if value.type is HALF:
            value = builder.shuffle_vector(value, ir.Constant(HALF, [0.0] * HALF.count),
                                           ir.Constant(ir.VectorType(ir.IntType(32), LANES), list(range(LANES))))
        if finish is not None:
            value = finish(value, place, *divmod(index, vectors))
        builder.store(value, place, align=4)


def emit_loop(builder: ir.IRBuilder, count: ir.Value, values: list[ir.Value],
              body: Callable[[ir.Value, list[ir.Value]], list[ir.Value]]) -> list[ir.Value]:
    """Emits ``for k in range(count): values = body(k, values)`` over vectors carried in registers
    (no pass where count <= 0); returns the values after the loop."""
    entry = builder.block
    loop, done = builder.append_basic_block("loop"), builder.append_basic_block("loop.done")
    builder.cbranch(builder.icmp_signed(">", count, INDEX(0)), loop, done)
    builder.position_at_end(loop)
    k = builder.phi(INDEX)
    carried = [builder.phi(value.type) for value in values]
    updated = body(k, carried)
    following, end = builder.add(k, INDEX(1)), builder.block
    k.add_incoming(INDEX(0), entry)
    k.add_incoming(following, end)
    for phi, initial, value in zip(carried, values, updated, strict=True):
        phi.add_incoming(initial, entry)
        phi.add_incoming(value, end)
    builder.cbranch(builder.icmp_signed("<", following, count), loop, done)
    builder.position_at_end(done)
    results = [builder.phi(value.type) for value in values]
    for phi, initial, value in zip(results, values, updated, strict=True):
        phi.add_incoming(initial, entry)
        phi.add_incoming(value, end)
    return results


def emit_unrolled_loop(builder: ir.IRBuilder, count: ir.Value, values: list[ir.Value],
                       body: Callable[[ir.Value, list[ir.Value], int | None], list[ir.Value]],
                       unroll: int) -> list[ir.Value]:
    """``emit_loop`` taking ``unroll`` (a power of two) values of k a pass, k = pass * unroll + u
    (no-wrap arithmetic, so LLVM folds k's shifts and masks by up to ``unroll``), then the last
    ``count % unroll`` one a pass; ``body(k, values, u)``, u None in that last loop."""
    if unroll == 1:
        return emit_loop(builder, count, values, lambda k, carried: body(k, carried, None))
    bits = unroll.bit_length() - 1
    assert 1 << bits == unroll
    count = builder.select(builder.icmp_signed("<", count, INDEX(0)), INDEX(0), count)  # NOTE: none, as emit_loop

    def whole(step: ir.Value, carried: list[ir.Value]) -> list[ir.Value]:
        first = builder.shl(step, INDEX(bits), flags=("nuw", "nsw"))
        for u in range(unroll):
            carried = body(builder.add(first, INDEX(u), flags=("nuw", "nsw")) if u else first, carried, u)
        return carried

    values = emit_loop(builder, builder.lshr(count, INDEX(bits)), values, whole)
    done = builder.and_(count, INDEX(-unroll))
    return emit_loop(builder, builder.and_(count, INDEX(unroll - 1)), values,
                     lambda k, carried: body(builder.add(done, k, flags=("nuw", "nsw")), carried, None))


def prefetch(builder: ir.IRBuilder, pointer: ir.Value) -> None:
    """Emits a prefetch of the line at ``pointer`` into every level of cache, for reading."""
    byte = ir.IntType(8).as_pointer()
    kind = ir.FunctionType(ir.VoidType(), [byte, *(ir.IntType(32),) * 3])
    name = "llvm.prefetch.p0" if str(byte) == "ptr" else "llvm.prefetch.p0i8"
    builder.call(cgutils.get_or_insert_function(builder.module, kind, name),
                 [builder.bitcast(pointer, byte), *(ir.IntType(32)(value) for value in (0, 3, 1))])


def vector_call(builder: ir.IRBuilder, name: str, *operands: ir.Value) -> ir.Value:
    """LLVM's intrinsic ``llvm.<name>.v<N>f32`` (fma, maxnum, ...) on vector operands of N floats
    (``VECTOR`` or ``HALF``)."""
    vector = operands[0].type
    kind = ir.FunctionType(vector, [vector] * len(operands))
    return builder.call(cgutils.get_or_insert_function(builder.module, kind, f"llvm.{name}.v{vector.count}f32"),
                        operands)


def splat(builder: ir.IRBuilder, value: ir.Value, lanes: int = LANES) -> ir.Value:
    """The float ``value`` (or lane 0 of the vector ``value``) in every one of ``lanes`` lanes."""
    if not isinstance(value.type, ir.VectorType):
        value = builder.insert_element(ir.Constant(VECTOR, ir.Undefined), value, INDEX(0))
    return builder.shuffle_vector(value, ir.Constant(value.type, ir.Undefined),
                                  ir.Constant(ir.VectorType(ir.IntType(32), lanes), [0] * lanes))


def clip_finish(builder: ir.IRBuilder, bias: ir.Value, vectors: int, low: ir.Value, high: ir.Value,
                out: ir.Value, added: ir.Value | None = None,
                added_step: ir.Value | None = None) -> Callable[[ir.Value, ir.Value, int, int], ir.Value]:
    """A ``finish`` for ``emit_tile``: clip(sums + bias's vector j (+ the vector at ``added`` + (place
    - out) * added_step bytes), low, high), min and max as LLVM's minnum and maxnum. ``bias``: a float
    pointer (``vectors`` vectors, loaded here, before the loop); ``out`` and ``added``: addresses
    (int64); ``added_step``: 1, or 0 where ``added`` is one vector of zeros (no residual: one tile
    for both); None: no residual; ``low`` and ``high``: floats."""
    pointer = VECTOR.as_pointer()
    shifts = [builder.load(builder.bitcast(builder.gep(bias, [INDEX(j * LANES)]), pointer), align=4)
              for j in range(vectors)]
    low, high = splat(builder, low), splat(builder, high)

    def finish(sums: ir.Value, place: ir.Value, r: int, j: int) -> ir.Value:
        value = builder.fadd(sums, shifts[j])
        if added is not None:
            offset = builder.sub(builder.ptrtoint(place, INDEX), out)
            if added_step is not None:
                offset = builder.mul(offset, added_step)
            value = builder.fadd(value, builder.load(builder.inttoptr(builder.add(added, offset), pointer), align=4))
        return vector_call(builder, "minnum", vector_call(builder, "maxnum", value, low), high)
    return finish


def select_clip(builder: ir.IRBuilder, value: ir.Value, low: ir.Value, high: ir.Value) -> ir.Value:
    """``value`` clipped to [low, high] (vectors), as numba's min and max on floats: a NaN is kept."""
    value = builder.select(builder.fcmp_ordered(">", low, value), low, value)
    return builder.select(builder.fcmp_ordered("<", high, value), high, value)


def emit_clip_span(builder: ir.IRBuilder, source: ir.Value, target: ir.Value, added: ir.Value | None,
                   count: ir.Value, shift: ir.Value, low: ir.Value, high: ir.Value) -> None:
    """Emits ``target[i] = min(max(source[i] + shift (+ added[i]), low), high)`` for i < count, at
    least LANES, in vectors: whole ones from the start, then one ending at ``count`` (computed
    before the others are stored, so ``added`` may be ``target``); min and max as numba's on
    floats (a NaN on the left is kept). Pointers to float; ``count`` an index; the rest floats."""
    pointer = VECTOR.as_pointer()
    shift, low, high = (splat(builder, value) for value in (shift, low, high))

    def value(at: ir.Value) -> ir.Value:
        total = builder.fadd(builder.load(builder.bitcast(builder.gep(source, [at]), pointer), align=4), shift)
        if added is not None:
            total = builder.fadd(total, builder.load(builder.bitcast(builder.gep(added, [at]), pointer), align=4))
        return select_clip(builder, total, low, high)

    last = builder.sub(count, INDEX(LANES))
    tail = value(last)

    def store(k: ir.Value, _: list[ir.Value]) -> list[ir.Value]:
        at = builder.mul(k, INDEX(LANES))
        builder.store(value(at), builder.bitcast(builder.gep(target, [at]), pointer), align=4)
        return []

    emit_loop(builder, builder.udiv(count, INDEX(LANES)), [], store)
    builder.store(tail, builder.bitcast(builder.gep(target, [last]), pointer), align=4)
