"""The shape of a command's reply as the co-located helpers hand it to callers.

Replies travel raw (RESP2): bytes, integers, arrays, nil. The helpers that run an
application's own commands (`stampede.atomic`'s MULTI/EXEC results and the reads
inside a WATCH body) give a few commands the Python shape their meaning has:

- `OK` of a command that sets something -> `True` (`SET` with `NX`/`XX` that did
  nothing stays `None`);
- 0/1 answers of yes/no commands (`EXPIRE`, `SETNX`, `SISMEMBER`, ...) -> bool;
- `HGETALL` and `CONFIG GET` -> a dict;
- scores and float increments (`ZSCORE`, `INCRBYFLOAT`, ...) -> float;
- `PING` -> `True`.

Everything else is returned as the server sent it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["shape"]


def _ok(reply: Any) -> Any:
    return True if reply in (b"OK", "OK") else reply


def _bool(reply: Any) -> Any:
    return bool(reply) if isinstance(reply, int) else reply


def _pairs(reply: Any) -> Any:
    if not isinstance(reply, list):
        return reply
    return dict(zip(reply[::2], reply[1::2], strict=False))


def _float(reply: Any) -> Any:
    return float(reply) if isinstance(reply, bytes | str) else reply


def _pong(reply: Any) -> Any:
    return True if reply in (b"PONG", "PONG") else reply


_SHAPES: dict[str, Callable[[Any], Any]] = {
    **dict.fromkeys(
        "SET MSET HMSET SETEX PSETEX RENAME LSET LTRIM FLUSHDB FLUSHALL SELECT WATCH "
        "UNWATCH MULTI RESTORE PFMERGE SWAPDB".split(),
        _ok,
    ),
    **dict.fromkeys(
        "EXPIRE PEXPIRE EXPIREAT PEXPIREAT PERSIST SETNX HSETNX MSETNX MOVE RENAMENX "
        "SISMEMBER SMOVE COPY HEXISTS".split(),
        _bool,
    ),
    **dict.fromkeys("HGETALL CONFIG".split(), _pairs),
    **dict.fromkeys("INCRBYFLOAT HINCRBYFLOAT ZSCORE ZINCRBY".split(), _float),
    "PING": _pong,
}


def shape(command: Sequence[Any], reply: Any) -> Any:
    """`reply` to `command` in the shape described above."""
    if isinstance(reply, BaseException) or not command:
        return reply
    name = command[0]
    if isinstance(name, bytes):
        name = name.decode("ascii", "replace")
    if not isinstance(name, str):
        return reply
    name = name.upper()
    sub = command[1] if len(command) > 1 else b""
    sub = sub.decode("ascii", "replace") if isinstance(sub, bytes) else str(sub)
    if name == "CONFIG" and sub.upper() != "GET":
        return _ok(reply)
    convert = _SHAPES.get(name)
    return reply if convert is None else convert(reply)
