"""stampede's Lua, kept in `.lua` files beside this module and loaded once.

A file may start with directives, each on a line of its own:

```
--! idempotent          running it twice does what running it once does
--! fragment            not a script: a piece other scripts include
--! include <name>      (anywhere) the text of <name>.lua goes here
```

`script(name)` gives the composed `Script` (source and SHA1), cached; topologies
run it with EVALSHA and fall back to EVAL once on NOSCRIPT (one helper:
`topology._node_ops.eval_fallback`),
and resend it after a lost reply only when it is idempotent.
"""

from __future__ import annotations

import hashlib
import re
from functools import cache
from importlib.resources import files
from typing import Any

__all__ = ["IDEMPOTENT_SHAS", "Script", "as_eval", "script", "source"]

_SOURCES: dict[str, bytes] = {}
IDEMPOTENT_SHAS: set[str] = set()
"""The SHA1s of the loaded scripts marked `--! idempotent` (safe to resend)."""

_INCLUDE = re.compile(rb"^[ \t]*--! include ([a-z0-9_]+)[ \t]*$", re.MULTILINE)
_IDEMPOTENT = re.compile(rb"^--! idempotent[ \t]*\n", re.MULTILINE)
_FRAGMENT = re.compile(rb"^--! fragment[ \t]*\n", re.MULTILINE)


class Script:
    """A Lua script: its source and the SHA1 EVALSHA names it by."""

    __slots__ = ("idempotent", "name", "sha", "source")

    def __init__(self, source: bytes | str, *, name: str = "", idempotent: bool = False) -> None:
        self.source = source.encode() if isinstance(source, str) else source
        self.sha = hashlib.sha1(self.source).hexdigest()
        self.name = name
        self.idempotent = idempotent
        _SOURCES.setdefault(self.sha, self.source)

    def __repr__(self) -> str:
        return f"Script({self.name or 'inline'}, sha={self.sha[:12]}...)"


@cache
def source(name: str) -> bytes:
    """The text of `<name>.lua` with its includes expanded and directives removed."""
    raw = (files(__name__) / f"{name}.lua").read_bytes()
    raw = _FRAGMENT.sub(b"", _IDEMPOTENT.sub(b"", raw))
    return _INCLUDE.sub(lambda m: source(m.group(1).decode()).rstrip(b"\n"), raw)


@cache
def script(name: str) -> Script:
    """The script in `<name>.lua`, composed and hashed once."""
    raw = (files(__name__) / f"{name}.lua").read_bytes()
    loaded = Script(source(name), name=name, idempotent=_IDEMPOTENT.search(raw) is not None)
    if loaded.idempotent:
        IDEMPOTENT_SHAS.add(loaded.sha)
    return loaded


def as_eval(command: tuple[Any, ...]) -> tuple[Any, ...] | None:
    """The EVAL form of an EVALSHA of a script made in this process, else None."""
    if not command or command[0] != "EVALSHA":
        return None
    source = _SOURCES.get(str(command[1]))
    return None if source is None else ("EVAL", source, *command[2:])
