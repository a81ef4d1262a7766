"""The documentation: every Python sample compiles, complete programs run, the site builds.

Convention for ```python blocks in docs/**/*.md and README.md:

- a block that starts with an import and defines `async def main` is a complete
  program: it runs as a child process against the `stampede_primaries` fixture, each
  distinct `redis://localhost:PORT` in it replaced by one of the primaries' URLs;
- a block that is a bare call signature (`Name(arg: type = default, ...)`) is
  checked as the parameter list of a function;
- every other block is a fragment: it must compile (top-level `await` allowed).
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest

from stampede.testing import LocalPrimaries

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
PAGES = [*sorted(DOCS.rglob("*.md")), ROOT / "README.md"]
FENCE = re.compile(r"^(?P<indent>[ \t]*)```python[^\n]*\n(?P<body>.*?)^(?P=indent)```", re.S | re.M)
SIGNATURE = re.compile(r"(?P<name>[A-Za-z_][\w.]*)\((?P<params>.*)\)", re.S)
LOCAL_URL = re.compile(r"redis://localhost:(\d+)")


@dataclass(frozen=True)
class Block:
    page: Path
    line: int
    source: str

    @property
    def id(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"

    @property
    def is_program(self) -> bool:
        first = self.source.lstrip().splitlines()[0] if self.source.strip() else ""
        return first.startswith(("import ", "from ")) and "async def main" in self.source


def blocks() -> list[Block]:
    """Every ```python block of every page, dedented, with its first line number."""
    found = []
    for page in PAGES:
        if not page.exists():
            continue
        text = page.read_text(encoding="utf-8")
        for match in FENCE.finditer(text):
            line = text.count("\n", 0, match.start("body")) + 1
            found.append(Block(page, line, textwrap.dedent(match.group("body"))))
    return found


BLOCKS = blocks()
PROGRAMS = [b for b in BLOCKS if b.is_program]


def check_compiles(block: Block) -> None:
    """Compile a fragment (top-level await allowed) or a bare call signature."""
    try:
        compile(block.source, block.id, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    except SyntaxError:
        signature = SIGNATURE.fullmatch(block.source.strip())
        if signature is None:
            raise
        name = signature.group("name").replace(".", "_")
        compile(f"def {name}({signature.group('params')}): ...", block.id, "exec")


@pytest.mark.parametrize("block", BLOCKS, ids=[b.id for b in BLOCKS])
def test_python_sample_compiles(block: Block) -> None:
    """The sample is valid Python: a program, a fragment, or a call signature."""
    check_compiles(block)


def test_getting_started_holds_complete_programs() -> None:
    """The getting-started page has runnable programs, so the convention is in use."""
    assert [b for b in PROGRAMS if b.page.name == "getting-started.md"]


@pytest.mark.parametrize("block", PROGRAMS, ids=[b.id for b in PROGRAMS])
def test_program_runs(block: Block, stampede_primaries: LocalPrimaries, tmp_path: Path) -> None:
    """The complete program exits 0 against three real primaries."""
    ports: dict[str, str] = {}
    urls = stampede_primaries.urls

    def local(match: re.Match[str]) -> str:
        return ports.setdefault(match.group(1), urls[len(ports) % len(urls)])

    program = tmp_path / "program.py"
    program.write_text(LOCAL_URL.sub(local, block.source), encoding="utf-8")
    proc = subprocess.run(
        [sys.executable, str(program)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
        check=False,
    )
    assert proc.returncode == 0, f"{block.id} failed:\n{proc.stdout}\n{proc.stderr}"


def test_site_builds_strictly(tmp_path: Path) -> None:
    """`mkdocs build --strict` succeeds: no broken link, missing page or docstring problem."""
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert (tmp_path / "reference" / "stampede" / "index.html").exists()
    assert (tmp_path / "examples" / "user_module.py").exists()
