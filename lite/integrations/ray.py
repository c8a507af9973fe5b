"""Offline batch inference on Ray Data: a ``.lite`` (or ``.onnx``) model scores a whole dataset from an
actor pool, one ``lite.Model`` per actor, on a laptop or a cluster alike.

``predict_dataset`` is the common call; ``LitePredictor`` is the callable class it hands to
``Dataset.map_batches``, for pipelines that call ``map_batches`` themselves. Columns are named like
the model's inputs (one row per sample, without the batch dim) and come back named like its outputs.
Ray is imported only when a dataset is mapped: ``pip install "delite[ray]"``.

Example (10,000 images, 2 actors of 1 thread each):
    >>> import numpy as np, ray
    >>> from lite.integrations.ray import predict_dataset
    >>> images = np.random.default_rng(0).standard_normal((10_000, 3, 32, 32), dtype=np.float32)
    >>> ds = ray.data.from_items([{"input": image} for image in images])
    >>> scored = predict_dataset(ds, "mobilenet_v2.lite", {"thread_num": 1, "delegates": ["ort"]},
    ...                          concurrency=2, batch_size=256)
    >>> scored.take_batch(4)["output"].shape
    (4, 1000)
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

import lite
from lite.arguments import booleans_from_text
from lite.delegates import load_delegate
from lite.errors import InputError, LiteError
from lite.extras import require

if TYPE_CHECKING:
    import ray.data

ContextSpec = Mapping[str, Any]
"""``lite.Context``'s keyword arguments, with ``delegates`` named instead of built (it pickles)."""

DelegateSpec = str | Mapping[str, Any]
"""A delegate by name as the tools' ``--delegate`` takes it, or ``{"name": ..., "options": {...}}``."""


def context_from_spec(spec: ContextSpec | None = None) -> lite.Context:
    """Builds a ``lite.Context`` from a plain description, which Ray can send to every actor.

    Args:
        spec: ``lite.Context``'s keyword arguments (``thread_num``, ``fallback``, ``placement``, ...),
            with ``delegates`` in priority order, each a name (``"ort"``, ``"tvm"``, ``"example_npu"``,
            ``"native"`` or ``"module:Class"``, as the tools' ``--delegate``) or a mapping
            ``{"name": "tvm", "options": {"target": "llvm"}}`` (the delegate's constructor arguments).

    Boolean values (``fallback``, a delegate's ``trust_saved_code``) may be given as text, as on the
    command line: true/false, 1/0, yes/no, on/off in any case; anything else is refused.

    Raises:
        InputError: a key ``lite.Context`` does not take, an unknown delegate, options it refuses, or a
            boolean that is none of those words.

    Example:
        >>> ctx = context_from_spec({"thread_num": 1, "delegates": [{"name": "example_npu"}]})
        >>> ctx.thread_num, type(ctx.delegate).__name__
        (1, 'ExampleNPUDelegate')
    """
    if spec is not None and not isinstance(spec, Mapping):
        raise InputError(f"the context description is a mapping of lite.Context's keyword arguments, got "
                         f"{type(spec).__name__}")
    options = booleans_from_text(lite.Context, spec or {}, "the context description's")
    delegates = options.pop("delegates", None) or []
    if not isinstance(delegates, (list, tuple)):
        raise InputError(f"the context description's 'delegates' is a list of names or {{'name': ..., 'options': "
                         f"{{...}}}}, got {type(delegates).__name__}")
    named = [load_delegate(*delegate_name_and_options(d)) for d in delegates]
    try:
        return lite.Context(**options, delegates=[d for d in named if d is not None])
    except TypeError as exc:
        raise InputError(f"the context description takes lite.Context's keyword arguments and 'delegates' "
                         f"(names or {{'name': ..., 'options': {{...}}}}): {exc}") from exc


def delegate_name_and_options(spec: DelegateSpec) -> tuple[str, dict[str, Any]]:
    """``"ort"`` -> ``("ort", {})``; ``{"name": "tvm", "options": {"target": "llvm"}}`` -> its two parts."""
    if isinstance(spec, str):
        return spec, {}
    if (isinstance(spec, Mapping) and isinstance(spec.get("name"), str) and set(spec) <= {"name", "options"}
            and isinstance(spec.get("options") or {}, Mapping)):
        return spec["name"], dict(spec.get("options") or {})
    raise InputError(f"a delegate is given as a name ('ort') or as {{'name': 'tvm', 'options': {{...}}}}, "
                     f"got {spec!r}")


class LitePredictor:
    """A callable class for ``Dataset.map_batches(..., batch_format="numpy")``: builds the model once (in
    each actor), then maps a batch of input columns to output columns.

    A batch is a dict of numpy columns, one per model input and named like it, each of shape
    (rows, *row_shape) with the model's dtype. A model with a dynamic batch dim runs the whole batch
    at once (``Model.predict`` resizes it to the rows); one with a fixed batch N runs it N rows at a
    time, the last rows padded with copies of the last one and their outputs dropped.

    Args:
        model_path: a ``.lite`` or ``.onnx`` file every actor can read.
        context: how to build the model (see ``context_from_spec``); None: ``lite.Context()``.
        keep_columns: batch columns returned unchanged beside the outputs (ids, file paths, labels).

    A pandas DataFrame (``batch_format="pandas"``) is read as the dict of its columns. Every output
    holds as many rows as the batch's columns; a batch whose columns differ in length is refused.

    Raises:
        InputError: when called on a batch with a missing column, one of another dtype, ragged rows,
            rows of another shape, columns of different lengths, or something that is not a batch of
            columns; the message names the column and the batch.

    Example:
        >>> predictor = LitePredictor("mobilenet_v2.lite", {"thread_num": 1}, keep_columns=["path"])
        >>> out = predictor({"input": np.zeros((5, 3, 32, 32), np.float32), "path": np.array(["a"] * 5)})
        >>> sorted(out), out["output"].shape
        (['output', 'path'], (5, 1000))
    """

    def __init__(self, model_path: str | os.PathLike, context: ContextSpec | None = None,
                 keep_columns: Sequence[str] = ()):
        self.model = lite.Model()
        self.model.build_from_file(model_path, context=context_from_spec(context))
        self.inputs = [(t.name, t.dtype, t.shape) for t in self.model.get_inputs()]
        self.output_names = [t.name for t in self.model.get_outputs()]
        self.keep_columns = list(keep_columns)
        taken = set(self.keep_columns) & set(self.output_names)
        if taken:
            raise InputError(f"keep_columns {sorted(taken)} are also model outputs: rename those columns first")
        fixed = {shape[0] for _, _, shape in self.inputs} - {-1}
        self.rows_per_predict = fixed.pop() if len(fixed) == 1 else None
        self.batches_seen = 0

    def __call__(self, batch: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The output columns (and ``keep_columns``) of one batch of input columns: one row per input row.

        Raises:
            InputError: the batch is not a dict of columns (or a pandas DataFrame), or a column is
                missing, not a column, ragged, of another dtype, of another row shape, or of another
                length than the others; the message names the column and the batch.
        """
        where = f"batch {self.batches_seen} of this actor"
        self.batches_seen += 1
        batch = batch_columns(batch, where)
        first = next((name for name, _, _ in self.inputs if name in batch), next(iter(batch), None))
        rows = len(batch[first]) if first is not None and is_column(batch[first]) else 0
        where = f"{where} ({rows} rows, process {os.getpid()})"
        columns = {name: checked_column(batch, name, dtype, shape, where) for name, dtype, shape in self.inputs}
        kept = {name: kept_column(batch, name, where) for name in self.keep_columns}
        check_rows({**columns, **kept}, first, rows, where)
        outputs = self.predict_rows(list(columns.values()), rows, where) if rows else self.empty_outputs()
        return {**kept, **dict(zip(self.output_names, outputs, strict=True))}

    def empty_outputs(self) -> list[np.ndarray]:
        """Zero rows of each output, for an empty batch (free dims of a row as 0)."""
        return [np.empty((0, *(max(d, 0) for d in t.shape[1:])), t.dtype) for t in self.model.get_outputs()]

    def predict_rows(self, columns: list[np.ndarray], rows: int, where: str) -> list[np.ndarray]:
        """Each output for all ``rows``: one predict, or one per ``rows_per_predict`` rows."""
        step = self.rows_per_predict or rows
        pieces = [self.predict_padded([c[start:start + step] for c in columns], step)
                  for start in range(0, rows, step)]
        outputs = [np.concatenate(parts)[:rows] for parts in zip(*pieces, strict=True)]
        for name, output in zip(self.output_names, outputs, strict=True):
            if len(output) != rows:
                raise LiteError(f"{where}: output {name!r} has {len(output)} rows for {rows} input rows: "
                                "its first dim is not the batch, so it cannot be a column")
        return outputs

    def predict_padded(self, chunk: list[np.ndarray], rows: int) -> list[np.ndarray]:
        """The outputs of ``chunk``, whose columns are padded to ``rows`` by repeating their last row."""
        padded = [np.concatenate([c, np.repeat(c[-1:], rows - len(c), axis=0)]) if len(c) < rows else c
                  for c in chunk]
        return [t.get_data_to_numpy() for t in self.model.predict(padded)]


def batch_columns(batch: Any, where: str) -> Mapping[str, Any]:
    """A batch as a mapping of column name to column: a dict (``batch_format="numpy"``) as it is, a pandas
    DataFrame (``batch_format="pandas"``) as its columns' numpy arrays.

    Raises:
        InputError: anything else (a pyarrow Table, a list, an array).
    """
    if isinstance(batch, Mapping):
        return batch
    pandas = sys.modules.get("pandas")
    if pandas is not None and isinstance(batch, pandas.DataFrame):
        return {str(name): batch[name].to_numpy() for name in batch.columns}
    raise InputError(f"{where} is a {type(batch).__name__}; LitePredictor takes a dict of numpy columns "
                     "(map_batches(..., batch_format=\"numpy\")) or a pandas DataFrame")


def is_column(value: Any) -> bool:
    """Whether ``value`` holds rows: an array of one or more dims, a list, a pandas Series; not a scalar,
    a 0-d array, a string or None."""
    return not isinstance(value, (str, bytes)) and getattr(value, "ndim", 1) != 0 and hasattr(value, "__len__")


def checked_rows(value: Any, what: str) -> int:
    """How many rows ``value`` holds.

    Raises:
        InputError: it is not a column (``is_column``).
    """
    if not is_column(value):
        raise InputError(f"{what} is a {type(value).__name__}, not a column of rows")
    return len(value)


def check_rows(columns: Mapping[str, Any], first: str | None, rows: int, where: str) -> None:
    """Refuses (InputError) a batch whose ``columns`` do not all hold the ``rows`` of column ``first``."""
    for name, column in columns.items():
        if len(column) != rows:
            raise InputError(f"{where}: column {name!r} has {len(column)} rows, column {first!r} has {rows}: "
                             "every column of a batch holds one row per sample")


def kept_column(batch: Mapping[str, Any], name: str, where: str) -> Any:
    """Column ``name`` of ``batch``, returned unchanged (``keep_columns``).

    Raises:
        InputError: the batch has no such column.
    """
    if name not in batch:
        raise InputError(f"{where}: no column {name!r} to keep (keep_columns); the batch has {sorted(batch)}")
    checked_rows(batch[name], f"{where}: column {name!r}")
    return batch[name]


def checked_column(batch: Mapping[str, np.ndarray], name: str, dtype: np.dtype, shape: tuple[int, ...],
                   where: str) -> np.ndarray:
    """Column ``name`` of ``batch``, checked against the model input of that ``dtype`` and ``shape``
    (-1 marks a free dim; the first is the batch). A column of row arrays (Ray's list and variable-shaped
    tensor columns) is stacked first.

    Raises:
        InputError: the column is missing, not a column, ragged, of another dtype or of another row shape.
    """
    if name not in batch:
        raise InputError(f"{where}: no column {name!r} for the model input of that name; the batch has "
                         f"{sorted(batch)} (rename columns with Dataset.rename_columns)")
    what = f"{where}: column {name!r}"
    column = column_array(batch[name], what, dtype, shape)
    if column.dtype != dtype:
        raise InputError(f"{what} is {column.dtype}, the model input takes {dtype}: "
                         f"cast it first (e.g. in a map_batches before this one)")
    if column.ndim != len(shape) or any(d not in (-1, r) for d, r in zip(shape[1:], column.shape[1:], strict=True)):
        raise InputError(f"{what} has rows of shape {column.shape[1:]}, the model input "
                         f"takes {row_shape_text(shape)}")
    return column


def column_array(raw: Any, what: str, dtype: np.dtype, shape: tuple[int, ...]) -> np.ndarray:
    """A column as one array, its rows stacked; a column without rows as zero rows of the model input.

    Raises:
        InputError: it is not a column, or holds rows numpy cannot stack.
    """
    empty = not checked_rows(raw, what)
    try:
        column = stacked_rows(np.asarray(raw), what, shape)
    except (ValueError, TypeError) as exc:  # NOTE: numpy refusing ragged nested lists
        raise InputError(f"{what} holds rows numpy cannot stack into one array ({exc}); the model input takes "
                         f"rows of shape {row_shape_text(shape)}") from exc
    if empty and (column.dtype == np.dtype(object) or isinstance(raw, (list, tuple))):
        return np.empty((0, *(max(d, 0) for d in shape[1:])), dtype)  # NOTE: no rows, so no dtype to check
    return column


def stacked_rows(column: np.ndarray, what: str, shape: tuple[int, ...]) -> np.ndarray:
    """Ray's list and variable-shaped tensor columns come as object arrays of row arrays: those rows stacked
    into one array when they share a shape (a model input of ``shape`` takes no other).

    Raises:
        InputError: two rows differ in shape; names the first that differs from row 0.
    """
    if column.dtype != object or not len(column):
        return column
    first = np.shape(column[0])
    odd = next((i for i, row in enumerate(column) if np.shape(row) != first), None)
    if odd is not None:
        raise InputError(f"{what} holds rows of different shapes: row 0 {first}, row {odd} {np.shape(column[odd])}; "
                         f"the model input takes one shape {row_shape_text(shape)}: resize or pad the rows first")
    return np.stack(column)


def row_shape_text(shape: tuple[int, ...]) -> str:
    """A model input's row shape (without the batch dim) as text, free dims as ``?``."""
    return "(" + ", ".join("?" if d == -1 else str(d) for d in shape[1:]) + ")"


def predict_dataset(ds: ray.data.Dataset, model_path: str | os.PathLike, context: ContextSpec | None = None, *,
                    concurrency: int | tuple[int, int] = 1, batch_size: int | None = 256,
                    keep_columns: Sequence[str] = (), **ray_options: Any) -> ray.data.Dataset:
    """Scores ``ds`` with the model on a pool of actors, each building the model once.

    Args:
        ds: a Ray Dataset whose columns are named like the model's inputs.
        model_path: a ``.lite`` or ``.onnx`` file every actor can read (a shared path on a cluster).
        context: how each actor builds the model (see ``context_from_spec``); without ``thread_num``,
            each actor runs ``num_cpus`` threads (a Ray option, default 1).
        concurrency: the actor pool's size, or its (min, max) to autoscale. A fixed pool whose actors take
            every CPU leaves none for Ray's read tasks (``read_parquet``, ``read_images``): the job then
            waits forever. Leave CPUs free, or autoscale, e.g. ``(1, cpus)``.
        batch_size: rows per batch given to an actor (None: whole blocks).
        keep_columns: input columns carried to the result unchanged beside the outputs.
        **ray_options: passed to ``map_batches`` unchanged: ``num_cpus``, ``memory``, ``max_restarts``,
            ``max_task_retries``, ``runtime_env``, ``zero_copy_batch``, ...

    Returns:
        A lazy Dataset of the output columns (and ``keep_columns``), one row per input row.

    Raises:
        MissingPackageError: Ray Data is not installed (``pip install "delite[ray]"``).
        InputError: a bad context description (before any actor starts). A bad column raises
            InputError in the actor, which Ray raises here when the dataset runs.

    Example:
        >>> ids = ray.data.read_parquet("tokens.parquet")        # a column "input_ids", int64 (seq_len,)
        >>> embeddings = predict_dataset(ids, "bert.lite", {"thread_num": 2}, concurrency=4, num_cpus=2)
        >>> embeddings.write_parquet("embeddings/")
    """
    ray_data = require("ray.data", "lite.integrations.ray")
    context = {"thread_num": max(1, int(ray_options.get("num_cpus") or 1)), **(context or {})}
    context_from_spec(context)  # NOTE: a bad description fails here, not in every actor
    fewest, most = (concurrency, concurrency) if isinstance(concurrency, int) else concurrency
    arguments = {"model_path": os.fspath(model_path), "context": context, "keep_columns": list(keep_columns)}
    return ds.map_batches(LitePredictor, fn_constructor_kwargs=arguments,
                          compute=ray_data.ActorPoolStrategy(min_size=fewest, max_size=most),
                          batch_size=batch_size, batch_format="numpy", **ray_options)
