"""Every command-line tool answers --version with Delite's version (lite.tools.add_version), and
explains every option in --help with its default."""

from __future__ import annotations

import argparse

import pytest

import lite
from lite.tools import benchmark, inspector, tune
from lite.tools.converter import cli


@pytest.mark.parametrize("main, prog", [(cli.main, "lite-convert"), (inspector.main, "lite-inspect"),
                                        (benchmark.main, "lite-benchmark"), (tune.main, "lite-tune")])
def test_version(main, prog, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["--version"])
    assert exit_info.value.code == 0
    assert capsys.readouterr().out.strip() == f"{prog} (delite) {lite.__version__}"


def parser(main) -> argparse.ArgumentParser:
    """The ArgumentParser ``main`` builds (caught as it parses)."""
    class Caught(Exception):
        pass

    seen: list[argparse.ArgumentParser] = []

    def catch(self, args=None, namespace=None):
        seen.append(self)
        raise Caught

    original = argparse.ArgumentParser.parse_args
    argparse.ArgumentParser.parse_args = catch
    try:
        main([])
    except Caught:
        pass
    finally:
        argparse.ArgumentParser.parse_args = original
    return seen[0]


@pytest.mark.parametrize("main", [cli.main, inspector.main, benchmark.main, tune.main])
def test_every_option_has_help_and_shows_its_default(main):
    for action in parser(main)._actions:
        assert action.help, f"{action.option_strings or action.dest} has no help text"
        if action.default not in (None, False, [], argparse.SUPPRESS) and action.option_strings:
            assert "%(default)s" in action.help, f"{action.option_strings} does not show its default"
