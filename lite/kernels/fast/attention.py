"""Attention head by head in compiled code: softmax(q @ k * scale + mask) @ v, float32.

For each head, its k (D, Sk) and v (Sk, Dv) are packed into ``lite.kernels.fast.gemm``'s panels
(``pack_into``: a few tens of KB), ``gemm.product`` computes the head's scores (Sq, Sk) from q in place,
``lite.kernels.fast.softmax.softmax_rows`` turns them into weights while they are in cache, and a
second product writes the head's output. numpy ran each of the two batched products as one BLAS
call per head (packing both operands each time) and the softmax between them over all heads'
scores. Heads are independent: threads take ranges of them (the crew's jobs).

At two threads or more the heads as crew jobs beat BLAS's threaded products; at one thread BLAS
is faster (``lite.kernels.matmul.Attention.heads_on_crew``; measured: docs/performance.md).
"""

from __future__ import annotations

import functools

import numpy as np
from numba import carray

from lite.kernels.fast import compiled, jit
from lite.kernels.fast.activation import CLIP_CODE
from lite.kernels.fast.crew import as_pointer
from lite.kernels.fast.gemm import MIN_ROWS, ONE, pack_into, panel_count, product
from lite.kernels.fast.softmax import mask_layout, softmax_rows
from lite.kernels.fast.tile import WIDTH


def takes(q: np.ndarray, k: np.ndarray, v: np.ndarray, scores: tuple[int, ...]) -> bool:
    """Whether ``heads`` runs these operands: float32, C-contiguous, the same batch dims (none
    broadcast), at most 4 dims, and at least ``MIN_ROWS`` queries."""
    arrays = (q, k, v)
    return (all(a.dtype == np.float32 and a.flags.c_contiguous for a in arrays) and len(scores) <= 4
            and q.shape[:-2] == k.shape[:-2] == v.shape[:-2] == scores[:-2] and q.shape[-2] >= MIN_ROWS)


def layout(q: np.ndarray, k: np.ndarray, v: np.ndarray, scores: np.ndarray,
           out: np.ndarray) -> tuple[np.ndarray, ...]:
    """The operands as ``heads`` takes them: every batch dim flattened into one of heads."""
    def flat(a: np.ndarray) -> np.ndarray:
        return a.reshape(-1, *a.shape[-2:])
    return flat(q), flat(k), flat(v), flat(scores), flat(out)


@jit
def heads(q, k, v, scores, out, shape, scale, mask, strides, first, last, nan_to_zero):
    """Heads ``first`` to ``last - 1`` of flat (H, ...) operands: scores[h] = q[h] @ k[h], the
    softmax of its rows (``softmax_rows`` over the (B, H, Sq, Sk) ``shape``, ``nan_to_zero`` as
    there), out[h] = scores[h] @ v[h]."""
    depth, keys, width = k.shape[1], k.shape[2], v.shape[2]
    queries = q.shape[1]
    panels_k = np.empty((panel_count(keys), depth, WIDTH), np.float32)
    panels_v = np.empty((panel_count(width), keys, WIDTH), np.float32)
    zero_k, zero_v = np.zeros(keys, np.float32), np.zeros(width, np.float32)
    lowest, highest = np.float32(-np.inf), np.float32(np.inf)
    flat = scores.reshape(scores.size)
    for head in range(first, last):
        pack_into(k[head], panels_k)
        product(q[head], panels_k, zero_k, lowest, highest, scores[head], 0, panels_k.shape[0], CLIP_CODE, ONE)
        softmax_rows(flat, shape, scale, mask, strides, head * queries, (head + 1) * queries, nan_to_zero)
        pack_into(v[head], panels_v)
        product(scores[head], panels_v, zero_v, lowest, highest, out[head], 0, panels_v.shape[0], CLIP_CODE, ONE)


@functools.cache
def warm() -> None:
    """Compiles ``heads`` now (at build), with and without a mask, not in the first predict."""
    q, k, v = np.zeros((1, MIN_ROWS, 2), np.float32), np.zeros((1, 2, 3), np.float32), np.zeros((1, 3, 2), np.float32)
    scores, out, shape = np.zeros((1, MIN_ROWS, 3), np.float32), np.zeros((1, MIN_ROWS, 2), np.float32), \
        np.array([1, 1, MIN_ROWS, 3], np.int64)
    for mask in (None, np.zeros(3, np.float32)):
        compiled(heads, q, k, v, scores, out, shape, np.float32(1), *mask_layout(mask, tuple(shape)), 0, 1, False)


# The block of an attention on the crew (``lite.kernels.fast.crew.Jobs``), then (first, last) a piece:
_Q, _K, _V, _SCORES, _OUT, _HEADS, _QUERIES, _DEPTH, _KEYS, _WIDTH = range(10)
_SHAPE, _SCALE, _MASK, _MASK_SIZE, _STRIDES, _NAN_TO_ZERO = 10, 14, 15, 16, 17, 21
_HEADER = 22


def crew_jobs(q: np.ndarray, k: np.ndarray, v: np.ndarray, scores: np.ndarray, out: np.ndarray, shape: np.ndarray,
              scale: np.float32, mask: np.ndarray, strides: np.ndarray, bounds: list[tuple[int, int]],
              nan_to_zero: bool):
    """``heads`` over the head ranges ``bounds`` as jobs for the crew (flat operands, as ``layout``
    gives them)."""
    from lite.kernels.fast.crew import Jobs, pieces_block

    block = pieces_block(_HEADER, bounds)
    block[[_Q, _K, _V, _SCORES, _OUT]] = [a.ctypes.data for a in (q, k, v, scores, out)]
    block[[_HEADS, _QUERIES, _DEPTH, _KEYS, _WIDTH]] = q.shape[0], q.shape[1], q.shape[2], k.shape[2], v.shape[2]
    block[_SHAPE:_SHAPE + 4], block[_STRIDES:_STRIDES + 4] = shape, strides
    block[_SCALE:_SCALE + 1].view(np.float64)[0] = scale
    block[[_MASK, _MASK_SIZE, _NAN_TO_ZERO]] = mask.ctypes.data, mask.size, nan_to_zero
    return Jobs(heads_job, block, len(bounds), (q, k, v, scores, out, shape, mask, strides))


def heads_job(index, data, extra):
    """Piece ``index`` of the attention that the block at ``data`` describes."""
    block = carray(data, (_HEADER + 2 * (index + 1),), np.int64)
    floats = carray(data, (_HEADER,), np.float64)
    count, queries, depth, keys, width = block[_HEADS], block[_QUERIES], block[_DEPTH], block[_KEYS], block[_WIDTH]
    q = carray(as_pointer(block[_Q]), (count, queries, depth), np.float32)
    k = carray(as_pointer(block[_K]), (count, depth, keys), np.float32)
    v = carray(as_pointer(block[_V]), (count, keys, width), np.float32)
    scores = carray(as_pointer(block[_SCORES]), (count, queries, keys), np.float32)
    out = carray(as_pointer(block[_OUT]), (count, queries, width), np.float32)
    mask = carray(as_pointer(block[_MASK]), (block[_MASK_SIZE],), np.float32)
    piece = _HEADER + 2 * index
    heads(q, k, v, scores, out, block[_SHAPE:_SHAPE + 4], np.float32(floats[_SCALE]), mask,
          block[_STRIDES:_STRIDES + 4], block[piece], block[piece + 1], block[_NAN_TO_ZERO] != 0)
