"""What the wheel ships, and what `import stampede` pulls in."""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
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


def test_the_library_and_its_pytest_plugin_work_without_redis_py() -> None:
    """redis-py is no dependency of the library: with it missing, `import stampede`,
    the facades and the pytest plugin (which pytest loads into every project that
    installs stampede) still import; only asking for a server needs it."""
    code = (
        "import sys; sys.modules['redis'] = None; "
        "import stampede, stampede.repair, stampede.testing, stampede.testing.plugin; "
        "stampede.connect(['redis://a:1'])\n"
        "try:\n    stampede.testing.LocalPrimaries\nexcept ImportError:\n    print('lazy')"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], check=True, capture_output=True, text=True, timeout=60
    )
    assert out.stdout.strip() == "lazy"


def test_redis_py_is_only_in_the_extras_that_need_it() -> None:
    """The install stays lean: hiredis (stampede's parser) is required, redis-py only
    in the extras whose code administers servers (testing, server, cli for the demo)."""
    meta = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())
    project = meta["project"]
    assert not [d for d in project["dependencies"] if d.startswith("redis")]
    assert any(d.startswith("hiredis") for d in project["dependencies"])
    extras = project["optional-dependencies"]
    for extra in ("testing", "server", "cli", "dev"):
        assert any(d.startswith("redis") for d in extras[extra]), extra
