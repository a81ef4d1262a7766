"""The optional compiled build: which modules it compiles, and its pure-Python fallback.

A wheel built with `STAMPEDE_COMPILE=1` (hatch_build.py, docs/performance.md) holds
each module of `MODULES` twice: the mypyc extension (`verdict.cpython-311-...so`)
and the `.py` it was compiled from. Python's import system prefers the extension
when its file name fits the interpreter, and ignores it otherwise (another Python
version, another platform): the `.py` is imported then, with no help from here.

What this module adds is the case in between: an extension whose name fits but
that fails to load (a damaged or partial install, a missing shared library). The
finder `install` puts first on `sys.meta_path` turns that failure into a warning
on the `stampede` logger and imports the `.py` instead; after one failure every
later module of `MODULES` is imported from its `.py` too (compiled modules call
into each other's classes directly, so they load together or not at all). A pure
install has no extension files: `install` then adds no finder at all.

Pure standard library, no stampede import: `stampede/__init__.py` imports it first,
and hatch_build.py reads `MODULES` from this file without importing stampede.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery as machinery
import logging
import sys
from collections.abc import Sequence
from importlib.util import spec_from_file_location
from pathlib import Path
from types import ModuleType

__all__ = ["MODULES", "Fallback", "install", "status"]

MODULES = ("stampede.wire._envelope", "stampede.verdict", "stampede.topology._guard")
"""The modules a compiled build compiles, each after the ones it imports."""

_log = logging.getLogger("stampede")


def _source(name: str) -> Path:
    """The `.py` file of module `name` in this installation."""
    return Path(__file__).parent.joinpath(*name.split(".")[1:]).with_suffix(".py")


class Fallback(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Import each of `MODULES` compiled when it loads, else from its `.py`."""

    def __init__(self) -> None:
        self.failed: dict[str, str] = {}
        """Module name -> why its extension did not load."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> machinery.ModuleSpec | None:
        if fullname not in MODULES:
            return None
        for earlier in MODULES[: MODULES.index(fullname)]:  # load order = dependency order
            if earlier not in sys.modules:
                importlib.import_module(earlier)
        spec = machinery.PathFinder.find_spec(fullname, path)
        if spec is None or not isinstance(spec.loader, machinery.ExtensionFileLoader):
            return spec  # no extension here (pure install, other Python): the usual import
        if self.failed:
            return spec_from_file_location(fullname, _source(fullname))
        spec.loader_state = spec.loader  # the extension's own loader, tried in create_module
        spec.loader = self
        return spec

    def create_module(self, spec: machinery.ModuleSpec) -> ModuleType | None:
        extension: machinery.ExtensionFileLoader = spec.loader_state
        try:
            module = extension.create_module(spec)
        except Exception as exc:  # any failure to load it: the .py still works
            self.failed[spec.name] = f"{type(exc).__name__}: {exc}"
            _log.warning(
                "stampede: the compiled %s did not load (%s: %s); using the pure-Python modules",
                spec.name,
                type(exc).__name__,
                exc,
            )
        else:
            spec.loader = extension  # as if imported without this finder
            return module
        source = _source(spec.name)
        spec.loader = machinery.SourceFileLoader(spec.name, str(source))
        spec.origin = str(source)
        return None  # the default module object, filled by exec_module from the .py

    def exec_module(self, module: ModuleType) -> None:
        """Unused: `create_module` hands the import over to the loader it chose."""
        spec = module.__spec__
        assert spec is not None and spec.loader is not None and spec.loader is not self
        spec.loader.exec_module(module)


def _has_extension(name: str) -> bool:
    source = _source(name)
    stem = source.with_suffix("")
    return any(
        stem.with_name(stem.name + suffix).exists() for suffix in machinery.EXTENSION_SUFFIXES
    )


def install() -> Fallback | None:
    """Put a `Fallback` first on `sys.meta_path` when this installation holds compiled
    modules (once per process); None for a pure install."""
    for finder in sys.meta_path:
        if isinstance(finder, Fallback):
            return finder
    if not any(_has_extension(name) for name in MODULES):
        return None
    finder = Fallback()
    sys.meta_path.insert(0, finder)
    return finder


def status() -> dict[str, str]:
    """Each of `MODULES` (imported here if need be): "compiled" or "pure"."""
    out = {}
    for name in MODULES:
        module = importlib.import_module(name)
        out[name] = "pure" if (module.__file__ or "").endswith(".py") else "compiled"
    return out


install()
