"""The instruction-set levels compiled kernels target, and how one is chosen."""

from __future__ import annotations

import os

import pytest

from lite.errors import InputError
from lite.kernels import fast
from lite.kernels.fast import targets

ZEN3 = "+64bit,+avx,+avx2,+bmi,+bmi2,+cmov,+cx16,+cx8,+f16c,+fma,+fxsr,+lzcnt,+mmx,+movbe,+popcnt,+sahf,+sse,+sse2," \
       "+sse3,+sse4.1,+sse4.2,+ssse3,+xsave,-avx512f,-avx512vnni"
SKYLAKE_X = ZEN3.replace("-avx512f,-avx512vnni", "+avx512f,+avx512bw,+avx512cd,+avx512dq,+avx512vl,-avx512vnni")
ZEN4 = SKYLAKE_X.replace("-avx512vnni", "+avx512vnni")
SANDY_BRIDGE = "+64bit,+avx,+cmov,+cx16,+sse,+sse2,+sse3,+sse4.1,+sse4.2,+ssse3,-avx2,-fma"


@pytest.mark.parametrize(("cpu", "features", "level"), [
    ("znver3", ZEN3, "x86-64-v3"),
    ("alderlake", ZEN3 + ",+avxvnni", "x86-64-v3-vnni"),
    ("icelake-server", ZEN4, "x86-64-v4-vnni"),
    ("znver4", ZEN4, "x86-64-v4-vnni"),
    ("sapphirerapids", SKYLAKE_X, "x86-64-v4"),  # NOTE: features, not the name, decide
    ("skylake-avx512", SKYLAKE_X, None),  # slows its clock for 512-bit code: compiled for the host
    ("sandybridge", SANDY_BRIDGE, None),
    ("", "", None),  # llvmlite could not read the host
])
def test_the_host_gets_its_highest_level(cpu, features, level):
    assert targets.host_level(cpu, features) == level


@pytest.mark.parametrize(("environ", "level"), [
    ({}, "x86-64-v4-vnni"),
    ({"DELITE_KERNEL_TARGET": "auto"}, "x86-64-v4-vnni"),
    ({"DELITE_KERNEL_TARGET": "host"}, "host"),
    ({"DELITE_KERNEL_TARGET": "x86-64-v3"}, "x86-64-v3"),  # an AVX2 build on an AVX-512 machine
    ({"NUMBA_CPU_NAME": "znver4"}, "host"),  # the user named numba's target
    ({"NUMBA_CPU_FEATURES": "+avx2", "DELITE_KERNEL_TARGET": "x86-64-v3"}, "host"),
])
def test_the_environment_chooses_the_target(environ, level):
    assert targets.chosen("znver4", ZEN4, environ) == level


def test_a_level_the_host_lacks_falls_back_to_the_host_level():
    assert targets.chosen("znver3", ZEN3, {"DELITE_KERNEL_TARGET": "x86-64-v4-vnni"}) == "x86-64-v3"
    assert targets.chosen("znver4", ZEN4, {"DELITE_KERNEL_TARGET": "x86-64-v3-vnni"}) == "x86-64-v4-vnni"
    assert targets.chosen("znver5", ZEN4 + ",+avxvnni", {"DELITE_KERNEL_TARGET": "x86-64-v3-vnni"}) == \
        "x86-64-v3-vnni"  # NOTE: a lower level than the CPU's that it has every feature of


def test_an_unknown_target_is_refused():
    with pytest.raises(InputError, match="DELITE_KERNEL_TARGET='avx9'.*x86-64-v3"):
        targets.chosen("znver4", ZEN4, {"DELITE_KERNEL_TARGET": "avx9"})


def test_each_level_is_one_fixed_feature_string():
    """numba's cache keys on the exact string: it must not depend on the machine compiling."""
    strings = {name: level.feature_string for name, level in targets.LEVELS.items()}
    assert "+avx512f" not in strings["x86-64-v3"] and "+avx2" in strings["x86-64-v3"]
    assert strings["x86-64-v4"].endswith(",-prefer-256-bit") and "+avx512vnni" not in strings["x86-64-v4"]
    assert "+avx512vnni" in strings["x86-64-v4-vnni"]
    assert "+avxvnni" in strings["x86-64-v3-vnni"] and "+avx512f" not in strings["x86-64-v3-vnni"]
    assert len(set(strings.values())) == len(strings)


def test_this_process_targets_what_the_environment_chooses():
    numba = fast.numba_module()
    level = fast.target_level()
    if level == targets.HOST:
        pytest.skip("compiled for the host here (no level, or chosen so)")
    assert targets.LEVELS[level].cpu == numba.config.CPU_NAME
    assert targets.LEVELS[level].feature_string == numba.config.CPU_FEATURES
    assert os.environ.get("NUMBA_CACHE_DIR") or str(numba.config.CACHE_DIR).endswith(f"-{level}")
    assert fast.wide_registers() == targets.LEVELS[level].wide
