"""ONNX emitters, one module per primitive family; importing this registers them all."""

from lite.delegates.onnxruntime.emitters import (  # noqa: F401
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
