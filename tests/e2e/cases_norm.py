"""E2E cases: normalisations beyond BatchNorm (LayerNormalization, ...)."""

from __future__ import annotations

import numpy as np

from tests.e2e.cases import F, case, node_model, w

for axis, shape in ((-1, (2, 5, 16)), (1, (2, 5, 16)), (0, (3, 4)), (2, (2, 3, 4, 5))):
    normalised = shape[axis:]
    case("LayerNormalization", {"x": F(*shape, scale=3)}, 17, f"axis{axis}",
         {"s": w(*normalised), "b": w(*normalised)}, axis=axis)
case("LayerNormalization", {"x": F("N", 7, 32)}, 17, "no-bias-eps", {"s": w(32)}, epsilon=1e-3, batches=(1, 3))
case("LayerNormalization", {"x": F(2, 6, 8)}, 17, "stats", {"s": w(8), "b": w(8)}, n_out=3)
case("LayerNormalization", {"x": F(2, 6, 8), "s": F(8), "b": F(8)}, 17, "param-inputs")

case("InstanceNormalization", {"x": F(2, 3, 7)}, 6, "1d", {"s": w(3), "b": w(3)}, epsilon=1e-3)
case("InstanceNormalization", {"x": F("N", 4, 5, 5)}, 6, "2d-dyn", {"s": w(4), "b": w(4)}, batches=(1, 3))
GROUP_SCALE, GROUP_BIAS = w(3), w(3)
case("GroupNormalization", {"x": F(2, 6, 4, 4)}, 18, "per-group", {"s": GROUP_SCALE, "b": GROUP_BIAS}, num_groups=3,
     oracle=node_model("GroupNormalization", {"x": F(2, 6, 4, 4)}, 21,
                       {"s": np.repeat(GROUP_SCALE, 2), "b": np.repeat(GROUP_BIAS, 2)}, num_groups=3))
case("GroupNormalization", {"x": F(2, 6, 5)}, 21, "per-channel", {"s": w(6), "b": w(6)}, num_groups=2, epsilon=1e-3)
