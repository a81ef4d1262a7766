"""What the wheel ships, and what `import stampede` pulls in."""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_wheel_holds_the_library_and_its_lua_but_no_test_tooling(tmp_path: Path) -> None:
    """`pip wheel .`: stampede with its .lua files; no chaos harness, no demo API."""
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
         "-w", str(tmp_path), str(ROOT)],
        check=True,
        timeout=120,
    )  # fmt: skip
    (wheel,) = tmp_path.glob("stampede_redis-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "stampede/__init__.py" in names
    assert "stampede/_lua/guard.lua" in names or any(n.endswith(".lua") for n in names)
    assert not [n for n in names if n.startswith("chaos/") or "/chaos/" in n]
    assert not [n for n in names if n.startswith("stampede/demo/")]
    assert not [n for n in names if n.startswith(("tests/", "benchmarks/"))]


def test_importing_stampede_imports_no_cli_or_test_library() -> None:
    """click, rich, hypothesis and pytest stay out of `import stampede` (and of the
    facades a service imports)."""
    code = (
        "import json, sys; import stampede, stampede.repair, stampede.keys, stampede.wire; "
        "print(json.dumps(sorted(m for m in ('click', 'rich', 'hypothesis', 'pytest', "
        "'redis', 'chaos') if m in sys.modules)))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], check=True, capture_output=True, text=True, timeout=60
    )
    assert json.loads(out.stdout) == []
