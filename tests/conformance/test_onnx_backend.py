"""ONNX's own node conformance cases (``onnx.backend.test``), converted and run natively.

Every case whose nodes are all ops the converter claims, on dtypes .lite stores, runs here
(``lite.tools.support.run_case``): its model goes through the converter and ``lite.Model`` and
every output must match the case's expected output (dtype, shape, and values within the case's
rtol/atol, as onnx's backend runner compares them). A case listed in ``exclusions.txt`` is
expected to fail, with its reason beside it (strict: an excluded case that passes fails the
run, so the list shrinks).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from lite.tools.support import claimed, claimed_ops, node_cases, run_case

EXCLUSIONS_FILE = Path(__file__).with_name("exclusions.txt")
MAX_EXCLUDED_SHARE = 0.05


def read_exclusions(path: Path = EXCLUSIONS_FILE) -> dict[str, str]:
    """``case name -> reason`` from lines ``test_name  reason`` (``#`` starts a comment line)."""
    excluded = {}
    for line in path.read_text().splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            name, _, reason = line.strip().partition(" ")
            excluded[name] = reason.strip()
    return excluded


CASES = node_cases(claimed_ops())  # NOTE: every claimed case has a node of these ops
CLAIMED = sorted(name for name, case in CASES.items() if claimed(case))
EXCLUDED = read_exclusions()


def _params():
    for name in CLAIMED:
        marks = [pytest.mark.xfail(strict=True, reason=EXCLUDED[name])] if name in EXCLUDED else []
        yield pytest.param(name, marks=marks, id=name)


@pytest.mark.parametrize("name", list(_params()))
def test_node_case(name):
    run_case(CASES[name])


def test_exclusions_name_claimed_cases_with_reasons():
    stale = sorted(set(EXCLUDED) - set(CLAIMED))
    assert not stale, f"exclusions.txt lists cases that do not run here (remove them): {stale}"
    unexplained = sorted(name for name, reason in EXCLUDED.items() if not reason)
    assert not unexplained, f"exclusions without a reason: {unexplained}"


def test_at_most_five_percent_excluded():
    assert len(EXCLUDED) <= MAX_EXCLUDED_SHARE * len(CLAIMED), (
        f"{len(EXCLUDED)} of {len(CLAIMED)} claimed cases are excluded, over {MAX_EXCLUDED_SHARE:.0%}")
