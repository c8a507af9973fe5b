"""A pytest plugin that runs lite-delegate-test's cases as test items, for a vendor's own CI.

``pytest --lite-delegate package.module:Class`` adds one item per case (``lite_delegate/op:test_relu``,
``lite_delegate/model:resnet18:resize``, ...). An item fails with the case's category and message on an
unexpected outcome, is an xfail for a failure the ``--lite-delegate-expected-failures`` file lists,
skips for a case the native reference cannot run, and passes otherwise (a declined case too: its
reason is in the item's report sections). Items run one at a time in one worker process, each bounded
by ``--lite-delegate-timeout``. Installed as a ``pytest11`` entry point, so ``pip install delite``
enables it; without ``--lite-delegate`` it adds nothing.
"""

from __future__ import annotations

from typing import Any

import pytest

_RUNNER_KEY = "lite_delegate_runner"


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("lite-delegate", "lite-delegate-test: check a Delite delegate against native kernels")
    group.addoption("--lite-delegate", metavar="NAME|module:Class",
                    help="run lite-delegate-test's cases for this delegate as test items")
    group.addoption("--lite-delegate-option", action="append", default=[], metavar="KEY=VALUE",
                    help="constructor option for the delegate (repeatable)")
    group.addoption("--lite-delegate-suite", choices=("ops", "models", "all"), default="ops",
                    help="which cases (default: ops)")
    group.addoption("--lite-delegate-ops", metavar="OP,...", help="ONNX op types of the node cases (default: all)")
    group.addoption("--lite-delegate-models", metavar="NAME,...", help="zoo models of the model cases")
    group.addoption("--lite-delegate-quantized", action="store_true", help="also the models' int8 forms")
    group.addoption("--lite-delegate-expected-failures", metavar="FILE",
                    help="'case_id  reason' lines: failures that become xfails")
    group.addoption("--lite-delegate-timeout", type=float, default=300.0, metavar="SECONDS",
                    help="most seconds one case may take (default: 300)")


def _arguments(config: pytest.Config) -> list[str]:
    """The lite-delegate-test command line the pytest options stand for."""
    get = config.getoption
    argv = ["--delegate", get("lite_delegate"), "--suite", get("lite_delegate_suite"),
            "--timeout", str(get("lite_delegate_timeout"))]
    for option in get("lite_delegate_option"):
        argv += ["--delegate-option", option]
    for flag, name in (("--ops", "lite_delegate_ops"), ("--models", "lite_delegate_models"),
                       ("--expected-failures", "lite_delegate_expected_failures")):
        if get(name):
            argv += [flag, get(name)]
    return argv + (["--quantized"] if get("lite_delegate_quantized") else [])


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list) -> None:
    """Adds the cases' items (before -k and -m select among them)."""
    if not config.getoption("lite_delegate"):
        return
    from lite.delegate import saves_graph_kernels
    from lite.tools import delegate_test

    args = delegate_test.parse_args(_arguments(config))
    try:
        settings, _ = delegate_test.prepare_settings(args)
        cases = delegate_test.collect(args, saves_graph_kernels(settings.load()))
    except Exception as exc:
        raise pytest.UsageError(f"--lite-delegate: {type(exc).__name__}: {exc}") from exc
    listed = delegate_test.read_expected_failures(args.expected_failures) if args.expected_failures else {}
    suite = DelegateSuite.from_parent(session, name="lite_delegate", nodeid="lite_delegate")
    suite.settings, suite.cases, suite.listed = settings, cases, listed
    items.extend(suite.collect())


def pytest_unconfigure(config: pytest.Config) -> None:
    runner = getattr(config, _RUNNER_KEY, None)
    if runner is not None:
        runner.close()


class DelegateSuite(pytest.Collector):
    """The cases of one delegate, as items."""

    settings: Any = None
    cases: list = []
    listed: dict[str, str] = {}

    def collect(self) -> list[DelegateCase]:
        return [DelegateCase.from_parent(self, name=case.id, case=case) for case in self.cases]


class CaseFailure(Exception):
    """An unexpected outcome: its category and message."""


class DelegateCase(pytest.Item):
    """One lite-delegate-test case."""

    def __init__(self, *, case: Any, **kwargs: Any):
        super().__init__(**kwargs)
        self.case = case

    def runtest(self) -> None:
        from lite.tools import delegate_test

        suite: DelegateSuite = self.parent
        result = self._runner(suite.settings).run_one(self.case)
        delegate_test.mark_expected([result], suite.listed)
        if result.unexpected:
            raise CaseFailure(f"{result.category}: {result.message}")
        self.add_report_section("call", "lite-delegate", f"{result.category}: {result.message}".strip(": "))
        if result.failed:
            pytest.xfail(f"{result.category} (expected: {result.expected}): {result.message}")
        if result.category == "SKIPPED":
            pytest.skip(result.message)

    def _runner(self, settings: Any):
        runner = getattr(self.config, _RUNNER_KEY, None)
        if runner is None:
            from lite.tools.delegate_test import Runner

            runner = Runner(settings, 1)
            setattr(self.config, _RUNNER_KEY, runner)
        return runner

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> str:
        if isinstance(excinfo.value, CaseFailure):
            return f"{self.case.id}: {excinfo.value}"
        return super().repr_failure(excinfo)

    def reportinfo(self) -> tuple[str, int | None, str]:
        return "lite-delegate", None, self.case.id
