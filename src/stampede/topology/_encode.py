"""RESP request encoding (hiredis's C encoder) and what a pipeline may block for."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import hiredis

from ..errors import InvalidValueError

__all__ = ["Packed", "blocking", "pack"]


def pack(commands: Sequence[Sequence[Any]]) -> bytes:
    """The RESP wire bytes of `commands` (hiredis's C encoder).

    Arguments are bytes, str (UTF-8), int or float; bytearray and memoryview are
    copied to bytes; anything else is an `InvalidValueError` (a `TypeError`) naming
    the argument's type.
    """
    out = []
    for command in commands:
        if type(command) is Packed:  # its wire bytes made already
            out.append(command.resp)
            continue
        try:
            out.append(hiredis.pack_command(tuple(command)))
        except TypeError:
            coerced: tuple[Any, ...] = tuple(_arg(a) for a in command)
            out.append(hiredis.pack_command(coerced))
    return b"".join(out)


class Packed(tuple[Any, ...]):
    """A command (its arguments, as a tuple) with its RESP bytes made already, `resp`:
    `pack` sends those as they are. Whoever makes one makes them exactly what
    `hiredis.pack_command` gives for the same arguments (stampede's guarded writes,
    `_shard_io.guard_call`, which a test compares byte for byte); anything that
    rebuilds the command (`tuple(command)`, EVAL after NOSCRIPT) gets a plain tuple."""

    resp: bytes


def _arg(value: Any) -> bytes | str | int | float:
    if isinstance(value, bytearray | memoryview):
        return bytes(value)
    if isinstance(value, bool) or not isinstance(value, bytes | str | int | float):
        raise InvalidValueError(
            f"a Redis command argument must be bytes, str, int or float, got "
            f"{type(value).__name__}; convert it first"
        )
    return value


_BLOCKING = {"WAIT": 2, b"WAIT": 2, "WAITAOF": 3, b"WAITAOF": 3}
"""Commands the server holds for up to a time they carry: -> the position of its ms."""


def blocking(commands: Sequence[Sequence[Any]]) -> float:
    """Seconds the server may hold `commands` on purpose (`WAIT`, `WAITAOF`): added to
    the socket timeout, so a wait for replicas is not cut short as a dead server."""
    extra = 0
    for command in commands:
        at = _BLOCKING.get(command[0]) if command else None
        if at is not None and len(command) > at:
            try:
                extra += max(0, int(command[at]))
            except (TypeError, ValueError):
                continue  # the server will refuse it: nothing to wait for
    return extra / 1000
