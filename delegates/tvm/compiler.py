"""Targets, devices and compilation: a Relax module -> an executable for one target.

Untuned modules compile with the target's default pipeline (for CPU: legalize, fold
constants, fuse, lower; for GPU also the dlight schedules). With a MetaSchedule database
(``lite-tune``) the tuned kernels replace the matching fused functions.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import os
from collections.abc import Mapping
from pathlib import Path

import tvm
from tvm import relax

from lite.delegates.tvm.targets import TargetSpec, parse_target_string
from lite.errors import InputError, NotSupportedError

DATABASE_FILES = ("database_workload.json", "database_tuning_record.json")


def resolve_target(spec: TargetSpec) -> tvm.target.Target:
    """The tvm Target for a name or dict; "llvm" means this CPU (its mcpu and core count).

    Raises:
        InputError: TVM does not know the target.
        NotSupportedError: the target's device does not exist on this machine.
    """
    if isinstance(spec, str):
        spec = parse_target_string(spec)
    try:
        if spec == "llvm":
            host = dict(tvm.target.Target.from_device(tvm.cpu()).export())
            target = tvm.target.Target({**host, "num-cores": cpu_cores()})
        elif isinstance(spec, Mapping) and spec.get("kind") == "llvm" and "num-cores" not in spec:
            target = tvm.target.Target({**spec, "num-cores": cpu_cores()})
        else:
            target = tvm.target.Target(dict(spec) if isinstance(spec, Mapping) else spec)
    except Exception as exc:  # NOTE: TVM raises ValueError, TypeError or its own errors here
        raise InputError(f"TVM cannot make a target of {spec!r}: {exc}") from exc
    device = device_for(target)
    if not device.exist:
        raise NotSupportedError(f"target {target.kind.name}: no {device} device on this machine "
                                f"(tvm.device({target.kind.name!r}, 0).exist is False); the model runs without TVM")
    if target.kind.name == "cuda" and not (isinstance(spec, Mapping) and "arch" in spec):
        major, minor = str(device.compute_version).split(".")
        target = tvm.target.Target({**dict(target.export()), "arch": f"sm_{major}{minor}"})
    return target


def cpu_cores() -> int:
    """The CPUs this process may run on (MetaSchedule needs a target's num-cores)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def device_for(target: tvm.target.Target) -> tvm.runtime.Device:
    return tvm.device_from_target(target)


def target_key(target: tvm.target.Target) -> str:
    """A stable text form of the target (part of the cache key)."""
    return str(target)


BROKEN_FFI = ("0.1.15",)  # apache-tvm-ffi versions whose JSON graph serialisation segfaults


def check_ffi_for_database() -> None:
    """Refuses (instead of crashing) where MetaSchedule's JSON database would segfault.

    Raises:
        InputError: the installed apache-tvm-ffi is one of ``BROKEN_FFI``.
    """
    try:
        version = importlib.metadata.version("apache-tvm-ffi")
    except importlib.metadata.PackageNotFoundError:
        return
    if version.startswith(BROKEN_FFI):
        raise InputError(f"apache-tvm-ffi {version} segfaults in MetaSchedule's JSON database (ToJSONGraph); "
                         "pip install apache-tvm-ffi==0.1.14.post1")


def open_database(directory: str | os.PathLike):
    """The MetaSchedule JSON database in ``directory`` (written by lite-tune).

    Raises:
        InputError: the directory holds no database, or the installed tvm-ffi cannot read it safely.
    """
    from tvm.s_tir import meta_schedule as ms

    check_ffi_for_database()
    path = Path(directory)
    missing = [name for name in DATABASE_FILES if not (path / name).is_file()]
    if missing:
        raise InputError(f"tuning_db {str(path)!r} has no MetaSchedule database ({', '.join(missing)} missing); "
                         "create it with lite-tune")
    return ms.database.JSONDatabase(work_dir=str(path), allow_missing=False)


def database_fingerprint(directory: str | os.PathLike | None) -> str:
    """A hash of the database's files: a re-tuned database gives new cache keys."""
    if directory is None:
        return "untuned"
    h = hashlib.sha256()
    for name in DATABASE_FILES:
        h.update((Path(directory) / name).read_bytes())
    return h.hexdigest()[:32]


def compile_module(mod: tvm.IRModule, target: tvm.target.Target, database=None):
    """Compiles ``mod`` for ``target``; with a MetaSchedule database, its tuned kernels are applied."""
    if database is not None:
        from tvm.s_tir import meta_schedule as ms

        return ms.relax_integration.compile_relax(database, mod, target, None)
    return tvm.compile(mod, target, relax_pipeline=relax.get_default_pipeline(target))
