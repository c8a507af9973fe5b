"""Target specs as users write them, read without TVM: a name, a JSON dict or the old CLI form."""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping
from typing import Any

from lite.errors import InputError

TargetSpec = str | Mapping[str, Any]


def parse_target_string(text: str) -> dict[str, Any] | str:
    """A target name stays a name; JSON and the old CLI form "llvm -mcpu=x -num-cores=2" become a dict."""
    if text.lstrip().startswith("{"):
        try:
            return json.loads(text)
        except ValueError as exc:
            raise InputError(f"target {text!r} is not valid JSON: {exc}") from exc
    parts = shlex.split(text)
    if len(parts) <= 1:
        return text.strip()
    spec: dict[str, Any] = {"kind": parts[0]}
    for part in parts[1:]:
        key, sep, value = part.lstrip("-").partition("=")
        if not part.startswith("-") or not sep:
            raise InputError(f"target {text!r}: expected -key=value options after the kind, got {part!r}")
        spec[key] = int(value) if value.isdigit() else value.split(",") if key in ("mattr", "keys") else value
    return spec


def target_kind(spec: TargetSpec) -> str:
    """The target's kind ("llvm", "cuda", ...) from any form of spec."""
    parsed = parse_target_string(spec) if isinstance(spec, str) else spec
    kind = parsed if isinstance(parsed, str) else parsed.get("kind", "")
    return str(kind).strip()
