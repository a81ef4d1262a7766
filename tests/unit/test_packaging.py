"""What the wheel ships, and what `import stampede` pulls in."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tarfile
import tomllib
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _pure_env() -> dict[str, str]:
    """This environment without the variable that asks for a compiled wheel."""
    return {k: v for k, v in os.environ.items() if k != "STAMPEDE_COMPILE"}


def test_the_wheel_holds_the_library_and_its_lua_but_no_test_tooling(tmp_path: Path) -> None:
    """`pip wheel .`: stampede with its .lua files; no chaos harness, no demo API; pure
    Python (`py3-none-any`, no extension) unless STAMPEDE_COMPILE=1 asks otherwise."""
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
         "-w", str(tmp_path), str(ROOT)],
        check=True,
        timeout=120,
        env=_pure_env(),
    )  # fmt: skip
    (wheel,) = tmp_path.glob("stampede_redis-*.whl")
    assert wheel.name.endswith("-py3-none-any.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert not [n for n in names if n.endswith((".so", ".pyd", ".c"))]
    assert "stampede/_compiled.py" in names and "hatch_build.py" not in names
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


def test_only_a_compiled_build_asks_for_mypy(tmp_path: Path) -> None:
    """The build hook (hatch_build.py) asks the build environment for nothing unless
    STAMPEDE_COMPILE=1; the sdist carries the hook, so a build from it can compile."""
    code = (
        "import json, sys; from hatchling.build import build_sdist, "
        "get_requires_for_build_wheel as wheel, get_requires_for_build_sdist as sdist; "
        "print(json.dumps([wheel(), sdist(), build_sdist(sys.argv[1])]))"
    )

    def requires(env: dict[str, str]) -> tuple[list[str], list[str], str]:
        out = subprocess.run(
            [sys.executable, "-c", code, str(tmp_path)],
            cwd=ROOT, env=env, check=True, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        wheel, sdist, built = json.loads(out.stdout)
        return wheel, sdist, built

    wheel, sdist, built = requires(_pure_env())
    assert (wheel, sdist) == ([], [])
    names = tarfile.open(tmp_path / built).getnames()
    assert [n for n in names if n.endswith(("/hatch_build.py", "/stampede/_compiled.py"))]
    wheel, sdist, _ = requires({**_pure_env(), "STAMPEDE_COMPILE": "1"})
    assert [r.split(">")[0] for r in wheel] == ["mypy", "setuptools"]
    assert sdist == []


def test_every_pip_install_names_this_distribution_and_its_extras() -> None:
    """What docs, messages and build files tell users to `pip install` exists: the
    distribution is `stampede-redis` (a bare `stampede` is another project's name) and
    every extra is one pyproject.toml declares."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = set(project["optional-dependencies"])
    files = [ROOT / "README.md", ROOT / "Makefile", *(ROOT / "docs").rglob("*.md")]
    files += [*(ROOT / "src").rglob("*.py"), *(ROOT / "docker").rglob("*")]
    named = re.compile(r"pip install[^\n`\"]*?'?([A-Za-z0-9_.-]+)\[([A-Za-z0-9_,-]+)\]")
    wrong = []
    for path in files:
        if not path.is_file() or path.suffix not in (".md", ".py", ".sh", "", ".yml"):
            continue
        for dist, wanted in named.findall(path.read_text(errors="replace")):
            if dist not in (project["name"], "."):
                wrong.append(f"{path.relative_to(ROOT)}: {dist}[{wanted}]")
            wrong += [
                f"{path.relative_to(ROOT)}: no extra {extra!r}"
                for extra in wanted.split(",")
                if extra not in extras
            ]
    assert wrong == []
