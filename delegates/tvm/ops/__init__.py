"""The support table: primitive type -> Relax emitter.

Each op family module (``conv``, ``elementwise``, ...) declares its emitters with
``@emitter("Conv2DFusion", check=..., values=(...))``. An emitter turns one native kernel
into Relax expressions inside the partition's function; ``check`` says why an instance of
the op cannot be compiled (a reason string, shown by ``Model.partition_report()``), and
``values`` lists the inputs whose *values* the emitter bakes in at compile time (a Pad's
pads, a Resize's sizes): they must be constants or values the runtime computes from shapes
alone. ``shapes`` lists baked inputs whose whole effect is the output shape (a Reshape's
target), so a new value with the same output shape needs no recompilation. Registering an
op type twice raises.

Importing this package imports tvm.
"""

from __future__ import annotations

from lite.delegates.tvm.ops import (  # noqa: F401  (registers every emitter)
    activation,
    attention,
    conv,
    elementwise,
    indexing,
    norm,
    pool,
    reduce,
    resize,
    shape,
)
from lite.delegates.tvm.ops.common import (
    DTYPES,
    EMITTERS,
    UNSUPPORTED,
    Dim,
    Emitter,
    Graph,
    NeedsStaticShapes,
    Node,
    emitter,
    shape_of,
    why_not,
)

__all__ = ["DTYPES", "EMITTERS", "UNSUPPORTED", "Dim", "Emitter", "Graph", "NeedsStaticShapes", "Node", "emitter",
           "shape_of", "why_not"]
