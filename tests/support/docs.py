"""The docs pages' fenced code blocks, for the tests that run them (tests/test_readme.py) and for
tests that run one page's blocks themselves (tests/test_generate.py)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
NO_TEST = re.compile(r"<!--\s*no-test:\s*(.*?)\s*-->")


@dataclass(frozen=True)
class Block:
    """A fenced code block of a page: its language, code, the heading above it and its no-test reason."""

    page: Path
    line: int
    heading: str
    language: str
    code: str
    skip: str | None

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def blocks(page: Path) -> list[Block]:
    """Every fenced block of ``page``, in order."""
    found, heading, lines = [], "", page.read_text().splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("#"):
            heading = line.strip()
        elif line.startswith("```"):
            start, language = i, line[3:].strip()
            i += 1
            while i < len(lines) and not lines[i].startswith("```"):
                i += 1
            before = next((lines[j] for j in range(start - 1, -1, -1) if lines[j].strip()), "")
            marked = NO_TEST.fullmatch(before.strip())
            found.append(Block(page, start + 1, heading, language, "\n".join(lines[start + 1:i]) + "\n",
                               marked.group(1) if marked else None))
        i += 1
    return found
