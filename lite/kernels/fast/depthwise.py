"""Direct depthwise convolution with the bias and a clip activation fused (no im2col, no GEMM).

Channel by channel, the padded input plane is split into stride phases (one for stride 1), so
every tap is one long multiply-add over the whole output plane, computed "wide" (as wide as
the phase; the extra columns are thrown away). It computes ``clip(bias + sum of taps, lo, hi)``
for x (N, C, H, W) and weight (O, 1, KH, KW) with O a multiple of C (output channel o reads
input channel o // (O / C)).

Measured against the numpy kernel (im2col-style copies and a batched matmul) on MobileNetV2's
layers, it wins on output planes of 14x14 and more, and loses below (fixed costs per channel):
``worth_it`` says which.
"""

from __future__ import annotations

import functools

import numpy as np

from lite.kernels.fast import compiled, jit
from lite.kernels.window import Geometry

SMALL_PLANE = 100  # output pixels below which the numpy kernel is faster


def worth_it(g: Geometry) -> bool:
    """Whether this kernel beats the numpy one on geometry ``g``."""
    return g.out[0] * g.out[1] >= SMALL_PLANE


class DepthwisePlan:
    """Scratch sizes for one geometry; ``run`` computes the output."""

    def __init__(self, g: Geometry) -> None:
        (_, _, h, w), (kh, kw), (sh, sw), (dh, dw) = g.x, g.kernel, g.strides, g.dilations
        (oh, ow), (pt, pl) = g.out, g.begins
        self.geometry = g
        self.wq = max(-(-(w + pl + g.ends[1]) // sw), ow + (kw - 1) * dw // sw)
        self.hq = max(-(-(h + pt + g.ends[0]) // sh), oh + (kh - 1) * dh // sh) + 1
        self.scratch = ((sh * sw * self.hq * self.wq,), (oh * self.wq,))

    @staticmethod
    def arrange(weight: np.ndarray) -> np.ndarray:
        """The weight (O, 1, KH, KW) as ``run`` reads it: (O, KH * KW)."""
        return np.ascontiguousarray(weight.reshape(weight.shape[0], -1))

    def run(self, x: np.ndarray, weight: np.ndarray, bias: np.ndarray, out: np.ndarray,
            bounds: tuple[float, float], scratch: list[np.ndarray]) -> None:
        """``out`` = clip(depthwise(x, weight) + bias, *bounds); ``weight`` as ``arrange`` gave it."""
        g, lo, hi = self.geometry, out.dtype.type(bounds[0]), out.dtype.type(bounds[1])
        by_plane(x, weight, bias, out, *g.kernel, *g.strides, *g.dilations, *g.begins, lo, hi, self.hq, self.wq,
                 *scratch)

    def warm(self, dtype: np.dtype) -> None:
        """Compiles the kernel for ``dtype`` now (at build), not in the first predict."""
        _warm(np.dtype(dtype).name)


@functools.cache
def _warm(dtype: str) -> None:
    plan = DepthwisePlan(Geometry((1, 2, 4, 4), (3, 3), (1, 1), (1, 1), (1, 1), (1, 1), (4, 4)))
    x, out = np.zeros((1, 2, 4, 4), dtype), np.zeros((1, 2, 4, 4), dtype)
    scratch = [np.zeros(shape, dtype) for shape in plan.scratch]
    compiled(plan.run, x, plan.arrange(np.zeros((2, 1, 3, 3), dtype)), np.zeros(2, dtype), out, (0.0, 6.0), scratch)


@jit
def _fill_phases(plane, h, w, pt, pl, sh, sw, hq, wq, phases):
    """Zero-pads one channel's plane and splits it into sh * sw stride phases of hq x wq."""
    phases[:] = 0
    for r in range(h):
        pr = r + pt
        source = plane[r * w:]
        for q in range(sw):
            row = phases[((pr % sh) * sw + q) * hq * wq + (pr // sh) * wq:]
            j0 = (pl - q + sw - 1) // sw if pl > q else 0
            j1 = min(wq, (w - 1 + pl - q) // sw + 1)
            if j1 <= j0:
                continue
            target, start = row[j0:], j0 * sw + q - pl
            if sw == 1:
                for j in range(j1 - j0):
                    target[j] = source[start + j]
            else:
                for j in range(j1 - j0):
                    target[j] = source[start + j * sw]


@jit
def _plane(phases, taps, kh, kw, sh, sw, dh, dw, hq, wq, bias, lo, hi, oh, ow, wide, out):
    """One output channel from its phases: taps as long multiply-adds over the wide plane."""
    count = oh * wq
    for i in range(count):
        wide[i] = bias
    for a in range(kh):
        for b in range(kw):
            weight, th, tw = taps[a * kw + b], a * dh, b * dw
            source = phases[((th % sh) * sw + tw % sw) * hq * wq + (th // sh) * wq + tw // sw:]
            for i in range(count):
                wide[i] += weight * source[i]
    for r in range(oh):
        row, target = wide[r * wq:], out[r * ow:]
        for i in range(ow):
            target[i] = min(max(row[i], lo), hi)


@jit
def by_plane(x, weight, bias, out, kh, kw, sh, sw, dh, dw, pt, pl, lo, hi, hq, wq, phases, wide):
    """Channel by channel: its stride phases, then the taps over the whole output plane."""
    n, c, h, w = x.shape
    o, oh, ow = out.shape[1], out.shape[2], out.shape[3]
    planes, outs = x.reshape(n * c, h * w), out.reshape(n * o, oh * ow)
    multiplier = o // c
    for job in range(n * o):
        image, channel = job // o, job % o
        _fill_phases(planes[image * c + channel // multiplier], h, w, pt, pl, sh, sw, hq, wq, phases)
        _plane(phases, weight[channel], kh, kw, sh, sw, dh, dw, hq, wq, bias[channel], lo, hi, oh, ow, wide,
               outs[job])
