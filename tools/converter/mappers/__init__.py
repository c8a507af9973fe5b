"""ONNX op mappers, one module per kernel family; importing this registers them all.

A mapper is named ``<op>_v<since>``, the ONNX op type in snake_case and the opset its
``@mapper(..., since=...)`` starts at (``split_v13``); one function serving several ops or
versions takes a family name and the first opset it serves (``binary_v1``, ``reduce_v13``).
What an op means lives in ``lite.ops``; a mapper only translates ONNX attributes to it.
"""

from lite.tools.converter.mappers import (  # noqa: F401
    activation,
    conv,
    elementwise,
    indexing,
    integer,
    matmul,
    norm,
    pool,
    quant,
    reduce,
    resize,
    shape,
)
