"""E2E cases: normalisations beyond BatchNorm (LayerNormalization, ...)."""

from __future__ import annotations

from tests.e2e.cases import F, case, w

for axis, shape in ((-1, (2, 5, 16)), (1, (2, 5, 16)), (0, (3, 4)), (2, (2, 3, 4, 5))):
    normalised = shape[axis:]
    case("LayerNormalization", {"x": F(*shape, scale=3)}, 17, f"axis{axis}",
         {"s": w(*normalised), "b": w(*normalised)}, axis=axis)
case("LayerNormalization", {"x": F("N", 7, 32)}, 17, "no-bias-eps", {"s": w(32)}, epsilon=1e-3, batches=(1, 3))
case("LayerNormalization", {"x": F(2, 6, 8)}, 17, "stats", {"s": w(8), "b": w(8)}, n_out=3)
case("LayerNormalization", {"x": F(2, 6, 8), "s": F(8), "b": F(8)}, 17, "param-inputs")
