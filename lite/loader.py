"""The one model loader: reads a path, bytes or an ``onnx.ModelProto`` (``lite.conversion``
turns them into .lite bytes, calling the converter for ONNX; the loader never imports it).

Every entry point (``Model``, ``ModelParallelRunner``, the pipeline, the converter and the
tools) loads through here, so a model behaves the same whichever way it is given:

- a path is read only when it is a regular file of at most ``size_limit`` bytes (a FIFO or
  ``/dev/zero`` is refused instead of hanging or exhausting memory), into memory sized by the
  file, never by ``size_limit``; a file that changes size while it is read is refused;
- an ONNX model's external data (``model.onnx.data``) resolves against the folder of the
  model file, whatever the working directory, and nowhere else: a location that is absolute,
  climbs out of that folder (``..``, a symlink) or names something other than a regular file
  is refused, as is data that runs past the end of its file or past ``size_limit``;
- ONNX bytes or a ModelProto have no folder, so external data they still reference is refused
  with the fix (pass the path).
"""

from __future__ import annotations

import enum
import functools
import os
import stat
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Union

from lite.errors import InputError, MemoryLimitError, ModelFileError, ModelFormatError
from lite.files import check_size, open_regular, read_lite_file, read_regular_file  # noqa: F401  (named here too)
from lite.schema.graph import FILE_IDENTIFIER
from lite.schema.reader import DEFAULT_MEMORY_LIMIT

if TYPE_CHECKING:
    import onnx

ModelSource = Union[str, os.PathLike, bytes, bytearray, memoryview, "onnx.ModelProto"]


class ModelType(enum.Enum):
    """The kind of model bytes or file: a .lite flatbuffer or an ONNX protobuf."""

    LITE = "lite"
    ONNX = "onnx"


def model_type_of(source: ModelSource, model_type: ModelType | None = None) -> ModelType:
    """``model_type`` if given, else what ``source`` looks like (see ``load_lite_bytes``)."""
    if model_type is not None:
        if not isinstance(model_type, ModelType):
            raise InputError(f"model_type must be a lite.ModelType, got {model_type!r}")
        return model_type
    if isinstance(source, (bytes, bytearray, memoryview)):
        return ModelType.LITE if bytes(source[4:8]) == FILE_IDENTIFIER else ModelType.ONNX
    if isinstance(source, (str, os.PathLike)):
        return ModelType.ONNX if Path(source).suffix.lower() == ".onnx" else ModelType.LITE
    return ModelType.ONNX


def source_bytes(source: ModelSource, size_limit: int = DEFAULT_MEMORY_LIMIT, what: str = "model file") -> bytes:
    """The raw bytes of a path (read with ``read_model_file``) or of a bytes-like object."""
    if isinstance(source, (bytes, bytearray, memoryview)):
        return bytes(source)
    if isinstance(source, (str, os.PathLike)):
        return read_model_file(source, size_limit, what)
    raise InputError(f"a model is a path, bytes or an onnx.ModelProto, got {type(source).__name__}")


def read_model_file(path: str | os.PathLike, size_limit: int = DEFAULT_MEMORY_LIMIT, what: str = "model file") -> bytes:
    """Reads a model file: a regular file of at most ``size_limit`` bytes (``what`` names it in errors).

    Raises:
        ModelFileError: the file cannot be opened or read, is not a regular file (a FIFO, a
            device, a folder), or changes size while it is read.
        MemoryLimitError: it has more than ``size_limit`` bytes.
    """
    return read_regular_file(path, size_limit, what)


def load_onnx(source: ModelSource, *, size_limit: int = DEFAULT_MEMORY_LIMIT, digest=None,
              seen: Callable[[bytes], None] | None = None) -> onnx.ModelProto:
    """An ``onnx.ModelProto`` with its external data read in, confined to the model's folder.

    A ModelProto given is returned as is when it references no external data (it is not copied
    or changed); a path is read with ``read_model_file``. ``digest`` (a ``hashlib`` hash), when
    given, is updated with each external tensor's name and data as they are read in; ``seen``,
    when given, is called with the model's bytes before they are parsed.

    Raises:
        InputError, ModelFormatError: as ``read_model_file``; the bytes are not ONNX (or hold a
            string that is not UTF-8); or the external data is missing, outside the model's
            folder, truncated or too large.
    """
    import onnx

    if isinstance(source, onnx.ModelProto):
        _check_text(source, "the ModelProto")
        _check_no_external_data(source)
        return source
    data = source_bytes(source, size_limit, "ONNX model")
    if seen is not None:
        seen(data)
    try:
        model = onnx.load_model_from_string(data)
    except Exception as exc:  # NOTE: protobuf raises several types for corrupt bytes
        raise ModelFormatError(f"not a valid ONNX model: {_describe(source)}: {exc}") from exc
    _check_text(model, _describe(source))
    if isinstance(source, (str, os.PathLike)):
        read_external_data(model, Path(source).parent, size_limit, digest)
    else:
        _check_no_external_data(model)
    return model


def _check_text(message, source: str) -> None:
    """Refuses a protobuf message (an ONNX model) with a string field that is not UTF-8.

    The protobuf runtime parses such a field without complaint and hands it out as ``bytes``
    (where the converter expects ``str``), or raises UnicodeDecodeError when it is copied. Only
    string and message fields are read (never a tensor's data).
    """
    for name, full_name, is_message, repeated in _text_fields(message.DESCRIPTOR):
        if repeated:
            values = getattr(message, name)
        elif message.HasField(name):
            values = (getattr(message, name),)
        else:
            continue
        for value in values:
            if is_message:
                _check_text(value, source)
            elif not isinstance(value, str):
                raise ModelFormatError(f"not a valid ONNX model: {source}: {full_name} is not UTF-8 text")


@functools.cache
def _text_fields(descriptor) -> tuple[tuple[str, str, bool, bool], ...]:
    """(name, full name, is a message, is repeated) of the string and message fields of a message type."""
    return tuple((f.name, f.full_name, f.type == f.TYPE_MESSAGE, _repeated(f)) for f in descriptor.fields
                 if f.type in (f.TYPE_STRING, f.TYPE_MESSAGE))


def _repeated(field) -> bool:
    # NOTE: newer protobuf releases have is_repeated and no longer label
    return field.is_repeated if hasattr(field, "is_repeated") else field.label == field.LABEL_REPEATED


def read_external_data(model: onnx.ModelProto, folder: Path, size_limit: int = DEFAULT_MEMORY_LIMIT,
                       digest=None) -> None:
    """Reads every external tensor of ``model`` from files inside ``folder``, into the tensor
    (and, when ``digest`` is given, its name and data into that hash).

    Raises:
        ModelFormatError: a location outside ``folder`` or not a regular file, bad offset or
            length, or data past the end of its file.
        MemoryLimitError: more than ``size_limit`` bytes in all.
    """
    root = folder.resolve()
    total = 0
    for tensor in external_tensors(model):
        entries = {e.key: e.value for e in tensor.external_data}
        path, size = _confined(root, entries.get("location", ""), tensor.name)
        offset, length = _span(tensor.name, path, size, entries)
        total += length
        if total > size_limit:
            raise MemoryLimitError(f"the model's external data exceeds the memory limit of {size_limit} bytes "
                                   "(Context.memory_limit)")
        tensor.raw_data = _read_span(path, offset, length)
        if digest is not None:
            name = tensor.name.encode()
            digest.update(len(name).to_bytes(8, "little") + name + length.to_bytes(8, "little") + tensor.raw_data)
        del tensor.external_data[:]
        tensor.data_location = tensor.DEFAULT


def external_tensors(model: onnx.ModelProto) -> Iterator[onnx.TensorProto]:
    """Every tensor of the model (subgraphs included) whose data lives in an external file."""
    return (t for t in _tensors(model.graph) if t.data_location == t.EXTERNAL)


def _tensors(graph: onnx.GraphProto) -> Iterator[onnx.TensorProto]:
    yield from graph.initializer
    for sparse in graph.sparse_initializer:
        yield from (sparse.values, sparse.indices)
    for node in graph.node:
        for attribute in node.attribute:
            yield from _attribute_tensors(attribute)


def _attribute_tensors(attribute) -> Iterator[onnx.TensorProto]:
    if attribute.HasField("t"):
        yield attribute.t
    yield from attribute.tensors
    for sparse in [*([attribute.sparse_tensor] if attribute.HasField("sparse_tensor") else []),
                   *attribute.sparse_tensors]:
        yield from (sparse.values, sparse.indices)
    for graph in [*([attribute.g] if attribute.HasField("g") else []), *attribute.graphs]:
        yield from _tensors(graph)


def _check_no_external_data(model: onnx.ModelProto) -> None:
    names = [t.name for t in external_tensors(model)]
    if names:
        raise ModelFormatError(
            f"tensors {names[:5]} keep their data in external files, which resolve only against the model's "
            "folder: pass the .onnx file's path instead of bytes or a ModelProto")


def _confined(root: Path, location: str, name: str) -> tuple[Path, int]:
    """The file ``location`` names inside ``root``, and its size; refuses anything that leaves it."""
    if not location or os.path.isabs(location) or location.startswith(("/", "\\")) or "\0" in location:
        raise ModelFormatError(f"tensor {name!r}: external data location {location!r} should be a relative path "
                               "inside the model's folder")
    path = (root / location).resolve()
    if not path.is_relative_to(root):
        raise ModelFormatError(f"tensor {name!r}: external data location {location!r} leaves the model's folder; "
                               "it should be a file inside the model's folder")
    try:
        info = path.stat()
    except OSError as exc:
        raise ModelFileError(f"tensor {name!r}: external data file {location!r} cannot be read: "
                               f"{exc.strerror or exc}") from exc
    if not stat.S_ISREG(info.st_mode):
        raise ModelFormatError(f"tensor {name!r}: external data location {location!r} is not a regular file")
    return path, info.st_size


def _span(name: str, path: Path, size: int, entries: dict[str, str]) -> tuple[int, int]:
    """(offset, length) of a tensor's bytes in ``path``, checked against the file's ``size``."""
    try:
        offset = int(entries.get("offset", 0))
        length = int(entries["length"]) if "length" in entries else size - offset
    except ValueError as exc:
        raise ModelFormatError(f"tensor {name!r}: external data offset/length are not integers: {exc}") from exc
    if offset < 0 or length < 0 or offset + length > size:
        raise ModelFormatError(f"tensor {name!r}: external data [{offset}, {offset + length}) runs outside "
                               f"{path.name!r} ({size} bytes)")
    return offset, length


def _read_span(path: Path, offset: int, length: int) -> bytes:
    """``length`` bytes at ``offset`` of the external data file ``path`` (a regular file)."""
    try:
        with open_regular(path, "external data file") as f:
            f.seek(offset)
            data = f.read(length)
    except OSError as exc:
        raise ModelFileError(f"cannot read external data file {path.name!r}: {exc.strerror or exc}") from exc
    if len(data) != length:
        raise ModelFormatError(f"external data file {path.name!r} ended early")
    return data


def _describe(source: ModelSource) -> str:
    return f"{len(source)} bytes" if isinstance(source, (bytes, bytearray, memoryview)) else repr(str(source))
