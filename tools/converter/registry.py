"""The mapper registry: ONNX op type + opset -> the function that emits .lite nodes.

Mappers are declared with ``@mapper("Conv", since=1)``; stack decorators when one
function serves several versions, and add a new function only where the op's
meaning changed. A model at opset N uses the mapper with the highest ``since`` <= N.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from lite.tools.converter.context import NodeContext

Mapper = Callable[["NodeContext"], None]


def _domain(domain: str) -> str:
    return "" if domain == "ai.onnx" else domain


class MapperRegistry:
    """Versioned mappers keyed by (domain, op type)."""

    def __init__(self) -> None:
        self._mappers: dict[tuple[str, str], dict[int, Mapper]] = {}

    def mapper(self, op_type: str, since: int, domain: str = "") -> Callable[[Mapper], Mapper]:
        """Decorator registering ``fn`` for ``op_type`` from opset ``since`` on.

        Raises:
            ValueError: ``op_type`` already has a mapper for exactly this ``since``.
        """

        def register(fn: Mapper) -> Mapper:
            versions = self._mappers.setdefault((_domain(domain), op_type), {})
            if since in versions:
                raise ValueError(
                    f"{op_type} already has a mapper since opset {since} ({versions[since].__qualname__}); "
                    f"cannot register {fn.__qualname__} for the same version")
            versions[since] = fn
            return fn

        return register

    def find(self, op_type: str, opset: int, domain: str = "") -> Mapper | None:
        """The mapper with the highest ``since`` <= ``opset``, or None."""
        versions = self._mappers.get((_domain(domain), op_type), {})
        usable = [v for v in versions if v <= opset]
        return versions[max(usable)] if usable else None

    def versions(self, op_type: str, domain: str = "") -> list[int]:
        """The opsets at which ``op_type`` has a mapper, ascending."""
        return sorted(self._mappers.get((_domain(domain), op_type), {}))

    def supported_ops(self, domain: str = "") -> dict[str, list[int]]:
        """Every op type of ``domain`` with a mapper -> the opsets where its mappers start."""
        return {op: sorted(v) for (d, op), v in sorted(self._mappers.items()) if d == _domain(domain)}

    def why_missing(self, op_type: str, opset: int, domain: str = "") -> str:
        """A reason (with the fix) why ``op_type`` has no mapper at ``opset``."""
        versions = self.versions(op_type, domain)
        if versions:
            return (f"{op_type} converts from opset {versions[0]}; this model imports opset {opset}: "
                    f"upgrade it with onnx.version_converter.convert_version(model, {versions[0]})")
        return (f"no converter mapping for {op_type}; `lite-convert --list-ops` (in Python "
                "lite.tools.converter.registry.supported_ops()) lists the ops that convert (replace the op in the "
                "source model or add a mapper)")


REGISTRY = MapperRegistry()
mapper = REGISTRY.mapper
supported_ops = REGISTRY.supported_ops
