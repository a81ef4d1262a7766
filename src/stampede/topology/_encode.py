"""RESP request encoding (hiredis's C encoder) and what a pipeline may block for."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import hiredis

from ..errors import InvalidValueError

__all__ = ["Packed", "blocking", "check_arg", "pack"]


def pack(commands: Sequence[Sequence[Any]]) -> bytes:
    """The RESP wire bytes of `commands` (hiredis's C encoder).

    Arguments are bytes, str (UTF-8), int or float; bytearray and memoryview are
    copied to bytes; anything else (None, a bool, a str that is not UTF-8) is an
    `InvalidValueError` (a `TypeError`) naming the command and the argument, raised
    before any of `commands` is sent.
    """
    out = []
    for command in commands:
        if type(command) is Packed:  # its wire bytes made already
            out.append(command.resp)
            continue
        try:
            out.append(hiredis.pack_command(tuple(command)))
        except (TypeError, UnicodeEncodeError):
            name = _name(command)
            coerced: tuple[Any, ...] = tuple(
                check_arg(a, f"argument {i} of {name}" if i else "a command's name")
                for i, a in enumerate(command)
            )
            out.append(hiredis.pack_command(coerced))
    return b"".join(out)


class Packed(tuple[Any, ...]):
    """A command (its arguments, as a tuple) with its RESP bytes made already, `resp`:
    `pack` sends those as they are. Whoever makes one makes them exactly what
    `hiredis.pack_command` gives for the same arguments (stampede's guarded writes,
    `_shard_io.guard_call`, which a test compares byte for byte); anything that
    rebuilds the command (`tuple(command)`, EVAL after NOSCRIPT) gets a plain tuple."""

    resp: bytes


def check_arg(value: Any, what: str) -> bytes | str | int | float:
    """`value` as a Redis command argument (bytearray and memoryview copied to bytes);
    `InvalidValueError` naming `what` (e.g. "argument 3 of SET") when it cannot be one."""
    if isinstance(value, bytearray | memoryview):
        return bytes(value)
    if isinstance(value, bool) or not isinstance(value, bytes | str | int | float):
        raise InvalidValueError(
            f"{what} must be bytes, str, int or float, got {type(value).__name__}; "
            "convert it first (nothing was sent)"
        )
    if isinstance(value, str):
        try:
            value.encode()
        except UnicodeEncodeError as exc:
            raise InvalidValueError(
                f"{what} is a str that cannot be encoded as UTF-8 ({exc.reason}); "
                "pass its raw bytes instead (nothing was sent)"
            ) from None
    return value


def _name(command: Sequence[Any]) -> str:
    """The command's name for a message (its first argument, when it is text)."""
    head = command[0] if len(command) else None
    if isinstance(head, bytes):
        head = head.decode("utf-8", "backslashreplace")
    return head.upper() if isinstance(head, str) else "a command"


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
