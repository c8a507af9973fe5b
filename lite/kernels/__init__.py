"""Native numpy CPU kernels, one module per op family; importing this registers them all."""

from lite.kernels import (  # noqa: F401
    activation,
    conv,
    elementwise,
    indexing,
    integer,
    matmul,
    norm,
    pool,
    quant,
    quantized,
    quantized_elementwise,
    reduce,
    registry,
    resize,
    shape,
)

registry.set_quantized_fallback(quantized.quantized_kernel_class)
