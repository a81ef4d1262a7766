"""hatchling build hook: with `STAMPEDE_COMPILE=1`, a wheel with mypyc-compiled hot modules.

Without that variable (the default: `pip install .`, the sdist, the published pure
wheel) this hook does nothing and asks for nothing: the wheel is `py3-none-any`
and needs no compiler. With it, `pip wheel .` / `pip install .` compile the
modules listed in `stampede._compiled.MODULES` with mypyc (asking the build
environment for mypy and setuptools, and a C compiler with the Python headers),
and the wheel gets a platform tag. The `.py` files stay in the wheel beside their
extensions: Python prefers the extension, and `stampede._compiled` falls back to the
`.py` when an extension cannot load. Everything is built in a temporary directory,
never in src/, so no stale extension can shadow an edited `.py`.

Why not the `hatch-mypyc` plugin: it builds in place (extensions left in src/
unless cleaned), renames pyproject.toml for the length of the build, is enabled
by `HATCH_BUILD_HOOK_ENABLE_MYPYC` rather than a variable of ours, and its last
release predates mypy 2. This hook is the part of it stampede needs.
"""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

ENV = "STAMPEDE_COMPILE"
BUILD_REQUIRES = ["mypy>=1.11", "setuptools>=61"]
GROUP = "stampede._native"  # the shared library: stampede/_native__mypyc.<suffix>

_SETUP = """\
import sys
from setuptools import setup
from mypyc.build import mypycify

setup(
    name="stampede-compiled",
    script_args=["build_ext", "--build-lib", sys.argv[1], "--build-temp", sys.argv[2]],
    ext_modules=mypycify(
        ["--config-file", sys.argv[3], "--cache-dir", sys.argv[4], *sys.argv[5:]],
        target_dir=sys.argv[2] + "/c",
        group_name={group!r},
        opt_level="3",
    ),
)
"""

_MYPY_CONFIG = """\
[mypy]
strict = True
warn_unreachable = True
"""


def requested() -> bool:
    """True when the environment asks for a compiled wheel."""
    return os.environ.get(ENV, "").strip().lower() in {"1", "true", "yes", "on"}


def compiled_modules(root: Path) -> tuple[str, ...]:
    """`stampede._compiled.MODULES`, read without importing stampede."""
    tree = ast.parse((root / "src" / "stampede" / "_compiled.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and ast.unparse(node.targets[0]) == "MODULES":
            modules = ast.literal_eval(node.value)
            if isinstance(modules, tuple) and modules:
                return modules
    raise RuntimeError("src/stampede/_compiled.py defines no MODULES tuple")


def compile_modules(root: Path, work: Path) -> dict[str, str]:
    """mypyc-compile the modules into `work`; {built file: its path in the wheel}."""
    sources = [
        str(root / "src" / Path(*name.split(".")).with_suffix(".py"))
        for name in compiled_modules(root)
    ]
    lib, temp = work / "lib", work / "temp"
    setup, config = work / "setup.py", work / "mypy.ini"
    setup.write_text(_SETUP.format(group=GROUP))
    config.write_text(_MYPY_CONFIG)
    command = [sys.executable, str(setup), str(lib), str(temp), str(config), str(work / "cache")]
    # Run in `work`: mypy and setuptools write their caches and build/ there, not in src/.
    done = subprocess.run(
        [*command, *sources], cwd=work, capture_output=True, text=True, check=False
    )
    if done.returncode:
        raise RuntimeError(f"{ENV}=1: mypyc failed:\n{done.stdout}\n{done.stderr}")
    built = {
        str(path): path.relative_to(lib).as_posix() for path in lib.rglob("*") if path.is_file()
    }
    if len(built) < len(sources):
        raise RuntimeError(f"{ENV}=1: mypyc built {sorted(built.values())} for {sources}")
    return built


class CompileHook(BuildHookInterface):  # type: ignore[type-arg]
    """Compiles the hot modules into the wheel when `STAMPEDE_COMPILE=1`."""

    PLUGIN_NAME = "custom"

    def _active(self, version: str) -> bool:
        return self.target_name == "wheel" and version == "standard" and requested()

    def dependencies(self) -> list[str]:
        return list(BUILD_REQUIRES) if self.target_name == "wheel" and requested() else []

    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        if not self._active(version):
            return
        self._work = Path(tempfile.mkdtemp(prefix="stampede-mypyc-"))
        built = compile_modules(Path(self.root), self._work)
        build_data["force_include"].update(built)
        build_data["pure_python"] = False
        build_data["infer_tag"] = True
        self.app.display_info(f"{ENV}=1: compiled {', '.join(sorted(built.values()))}")

    def finalize(self, version: str, build_data: dict[str, Any], artifact_path: str) -> None:
        work = getattr(self, "_work", None)
        if work is not None:
            shutil.rmtree(work, ignore_errors=True)
