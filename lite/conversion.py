"""A model given any way -> its ``.lite`` bytes: ``lite.loader`` reads files and ONNX models, the
converter (``lite.tools.converter``, which itself reads through the loader) converts ONNX ones.

A module of its own above both, so that the loader never imports the converter.
"""

from __future__ import annotations

from lite.loader import ModelSource, ModelType, load_onnx, model_type_of, source_bytes
from lite.schema.reader import DEFAULT_MEMORY_LIMIT


def load_lite_bytes(source: ModelSource, model_type: ModelType | None = None, *,
                    size_limit: int = DEFAULT_MEMORY_LIMIT) -> bytes:
    """The .lite bytes of a model given as a path, bytes or an ``onnx.ModelProto``.

    ONNX models are converted in memory with the default options.

    Args:
        source: a ``.lite`` or ``.onnx`` path, .lite or ONNX bytes, or an ``onnx.ModelProto``.
        model_type: what ``source`` holds; None: the path's suffix (``.onnx`` or not), or, for
            bytes, whether they carry the .lite file identifier.
        size_limit: the most bytes a model file or its external data may have.

    Raises:
        InputError: ``model_type`` is not a ModelType.
        ModelFileError: the file cannot be read.
        ModelFormatError: the file is too large, not a regular file, or its external data
            cannot be used.
        UnsupportedOpError: the ONNX model does not convert.
    """
    kind = model_type_of(source, model_type)
    if kind is ModelType.LITE:
        return source_bytes(source, size_limit)
    from lite.tools.converter import convert  # NOTE: the converter (and onnx) load only when needed

    return convert(load_onnx(source, size_limit=size_limit), memory_limit=size_limit)
