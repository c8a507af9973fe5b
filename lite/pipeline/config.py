"""Pipeline wiring: ``PipelineConfig`` names the stages and connects their tensors by name.

An endpoint is a pipeline input or output name (``"input"``) or a tensor of a stage
(``(stage, "name")``); ``connect`` checks each edge (names, direction, dtype and static
shape) against the stages' models as it is made, ``validate`` checks the whole wiring.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from lite.context import Context
from lite.errors import InputError
from lite.model import Model
from lite.pipeline.worker import StageSource
from lite.tensor import Tensor

# A pipeline input or output name ("input"), or a tensor of a stage ((stage, "name")).
Endpoint = str | tuple[int, str]


@dataclass(frozen=True)
class TensorSpec:
    """The dtype and shape (-1: free dim) a connection end carries."""

    dtype: np.dtype
    shape: tuple[int, ...]

    @classmethod
    def of_input(cls, tensor: Tensor) -> TensorSpec:
        """What a model input takes: its dtype and declared shape (free dims stay -1)."""
        return cls(tensor.dtype, tensor.declared_shape)

    @classmethod
    def of_output(cls, tensor: Tensor) -> TensorSpec:
        """What a model output gives: its dtype and shape."""
        return cls(tensor.dtype, tensor.shape)

    def __str__(self) -> str:
        return f"{self.dtype.name}{list(self.shape)}"

    def mismatch(self, other: TensorSpec) -> str | None:
        """Why a value of this spec cannot feed ``other`` (None when it can)."""
        if self.dtype != other.dtype:
            return f"dtype {self.dtype.name} cannot feed dtype {other.dtype.name}"
        if len(self.shape) != len(other.shape) or any(
                a != b and -1 not in (a, b) for a, b in zip(self.shape, other.shape, strict=True)):
            return f"shape {list(self.shape)} cannot feed shape {list(other.shape)} (-1 marks a free dim)"
        return None


def _describe(endpoint: Endpoint) -> str:
    return f"pipeline {endpoint!r}" if isinstance(endpoint, str) else f"stage {endpoint[0]} {endpoint[1]!r}"


class PipelineConfig:
    """The stages of a pipeline and how tensors flow between them.

    Stages run in list order; a connection goes from a pipeline input or a stage's output to
    a stage's input or a pipeline output. Endpoints are named by tensor name: a plain string
    is a pipeline input (as a source) or output (as a target); ``(i, name)`` is tensor
    ``name`` of stage ``i`` (an output of the model as a source, an input as a target).
    A source may feed several targets; every target is fed exactly once.

    A stage can run in a worker process (``PipelineExecutor(config, processes=...)``) once the
    config knows what to build it from: ``set_source`` (``split_model`` sets every stage's).

    Args:
        stages: built models, one per stage, in the order they run (each with its own Context).

    Raises:
        InputError: no stages, a model that is not built, or the same Model given twice.

    Example::

        config = lite.PipelineConfig([first, second])  # two built lite.Models
        config.connect("input", (0, "input"))           # pipeline input -> stage 0 input
        config.connect((0, "t17"), (1, "t17"))          # stage 0 output -> stage 1 input
        config.connect((1, "output"), "output")         # stage 1 output -> pipeline output
        print(config)                                   # the wiring, for debugging
        config.set_source(1, second_lite_bytes, lite.Context(thread_num=1))  # stage 1 may run in a process
    """

    def __init__(self, stages: Sequence[Model]):
        if not stages:
            raise InputError("a pipeline needs at least one stage")
        if len({id(m) for m in stages}) != len(stages):
            raise InputError("the same Model appears twice among the stages; build one Model per stage")
        self.stages = tuple(stages)
        self._stage_inputs = [{t.name: TensorSpec.of_input(t) for t in m.get_inputs()} for m in self.stages]
        self._stage_outputs = [{t.name: TensorSpec.of_output(t) for t in m.get_outputs()} for m in self.stages]
        self._input_specs: dict[str, TensorSpec] = {}
        self._output_specs: dict[str, TensorSpec] = {}
        self._sources: dict[Endpoint, Endpoint] = {}  # target -> source, in connect order
        self._stage_sources: dict[int, StageSource] = {}

    @property
    def inputs(self) -> list[str]:
        """Pipeline input names, in the order they were first connected."""
        return list(self._input_specs)

    @property
    def input_specs(self) -> dict[str, TensorSpec]:
        """Pipeline input name -> the spec of the first stage input it was connected to."""
        return dict(self._input_specs)

    @property
    def outputs(self) -> list[str]:
        """Pipeline output names, in the order they were connected."""
        return list(self._output_specs)

    @property
    def connections(self) -> list[tuple[Endpoint, Endpoint]]:
        """Every ``(source, target)`` pair, in connect order."""
        return [(source, target) for target, source in self._sources.items()]

    def connect(self, source: Endpoint, target: Endpoint) -> PipelineConfig:
        """Wires ``source`` to ``target``; returns the config, so calls can be chained.

        Args:
            source: a pipeline input name (created on first use) or ``(stage, output_name)``.
            target: ``(stage, input_name)`` of a later stage, or a pipeline output name.

        Raises:
            InputError: naming the connection: an unknown stage or tensor name, a target fed
                twice, an edge to the same or an earlier stage (a cycle), a pipeline input wired
                straight to a pipeline output, or a dtype or static-shape mismatch.
        """
        where = f"connect({source!r}, {target!r})"
        source, target = self._endpoint(source, where), self._endpoint(target, where)
        if target in self._sources:
            raise InputError(f"{where}: {_describe(target)} is already fed by {_describe(self._sources[target])}")
        self._check_direction(source, target, where)
        source_spec, target_spec = self._source_spec(source, where), self._target_spec(target, where)
        problem = source_spec and target_spec and source_spec.mismatch(target_spec)
        if problem:
            raise InputError(f"{where}: {problem}")
        if isinstance(source, str):
            self._input_specs.setdefault(source, target_spec)
        elif isinstance(target, str):
            self._output_specs[target] = source_spec
        self._sources[target] = source
        return self

    def set_source(self, stage: int, model_data: bytes, context: Context | None = None) -> PipelineConfig:
        """Records the ``.lite`` bytes and Context stage ``stage``'s Model was built from, so a worker
        process can build the same stage; returns the config.

        Raises:
            InputError: no such stage, bytes that are not bytes, or a context that is not a Context.
        """
        self._endpoint((stage, ""), f"set_source({stage!r}, ...)")
        if not isinstance(model_data, (bytes, bytearray)):
            raise InputError(f"set_source: model_data must be the stage's .lite bytes, got {type(model_data).__name__}")
        if context is not None and not isinstance(context, Context):
            raise InputError(f"set_source: context must be a lite.Context, got {type(context).__name__}")
        self._stage_sources[stage] = StageSource(bytes(model_data), context or Context())
        return self

    def source(self, stage: int) -> StageSource | None:
        """What stage ``stage`` is built from (``set_source``), or None when it was never set."""
        return self._stage_sources.get(stage)

    def _endpoint(self, endpoint: Endpoint, where: str) -> Endpoint:
        if isinstance(endpoint, str):
            return endpoint
        if (isinstance(endpoint, tuple) and len(endpoint) == 2 and isinstance(endpoint[0], int)
                and isinstance(endpoint[1], str)):
            if not 0 <= endpoint[0] < len(self.stages):
                raise InputError(f"{where}: there is no stage {endpoint[0]}; stages are 0..{len(self.stages) - 1}")
            return endpoint
        raise InputError(f"{where}: an endpoint is a pipeline name (str) or (stage index, tensor name), "
                         f"got {endpoint!r}")

    def _check_direction(self, source: Endpoint, target: Endpoint, where: str) -> None:
        if isinstance(source, str) and isinstance(target, str):
            raise InputError(f"{where}: a pipeline input cannot feed a pipeline output directly; "
                             "connect it to a stage input")
        if isinstance(source, tuple) and isinstance(target, tuple) and target[0] <= source[0]:
            raise InputError(f"{where}: a stage output can only feed a later stage, and stage {target[0]} "
                             f"does not run after stage {source[0]} (this edge would make a cycle)")

    def _source_spec(self, source: Endpoint, where: str) -> TensorSpec | None:
        if isinstance(source, str):
            return self._input_specs.get(source)
        return self._lookup(self._stage_outputs, source, "output", where)

    def _target_spec(self, target: Endpoint, where: str) -> TensorSpec | None:
        if isinstance(target, str):
            return None
        return self._lookup(self._stage_inputs, target, "input", where)

    def _lookup(self, table: list[dict[str, TensorSpec]], endpoint: tuple[int, str], kind: str,
                where: str) -> TensorSpec:
        stage, name = endpoint
        if name not in table[stage]:
            raise InputError(f"{where}: stage {stage} has no {kind} {name!r}; its {kind}s are {list(table[stage])}")
        return table[stage][name]

    def validate(self) -> None:
        """Checks that the wiring is complete (``PipelineExecutor`` calls this).

        Raises:
            InputError: a stage input is fed by nothing, or the pipeline has no output.
        """
        unfed = [(i, name) for i, specs in enumerate(self._stage_inputs) for name in specs
                 if (i, name) not in self._sources]
        if unfed:
            hint = "; ".join(f"connect(<source>, {endpoint!r})" for endpoint in unfed)
            raise InputError(f"stage inputs {unfed} are fed by nothing: {hint}")
        if not self._output_specs:
            raise InputError("the pipeline has no outputs: connect((stage, name), 'output_name')")

    def __str__(self) -> str:
        lines = [f"PipelineConfig: {len(self.stages)} stage(s)"]
        lines += [f"  input  {name!r}: {spec}" for name, spec in self._input_specs.items()]
        lines += [f"  output {name!r}: {spec}" for name, spec in self._output_specs.items()]
        for i, (ins, outs) in enumerate(zip(self._stage_inputs, self._stage_outputs, strict=True)):
            lines.append(f"  stage {i}: inputs {list(ins)} -> outputs {list(outs)}")
        lines += [f"  {_describe(source)} -> {_describe(target)}" for source, target in self.connections]
        return "\n".join(lines)


def check_positive(what: str, value: int) -> None:
    """Raises ``InputError`` naming ``what`` unless ``value`` is a positive int (a bool is not)."""
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise InputError(f"{what} must be a positive int, got {value!r}")
