"""Native numpy CPU kernels, one module per op family; importing this registers them all."""

from lite.kernels import (  # noqa: F401
    activation,
    conv,
    elementwise,
    indexing,
    matmul,
    norm,
    pool,
    quant,
    reduce,
    resize,
    shape,
)
