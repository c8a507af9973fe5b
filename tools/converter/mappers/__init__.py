"""ONNX op mappers, one module per kernel family; importing this registers them all."""

from lite.tools.converter.mappers import (  # noqa: F401
    activation,
    conv,
    elementwise,
    matmul,
    norm,
    pool,
    reduce,
    resize,
    shape,
)
