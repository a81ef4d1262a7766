"""The one retry policy: what may be sent again after its reply was lost.

A command whose connection died after it was sent may or may not have run. It
is sent again only when running it twice does what running it once does:

- read-only commands (`GET`, `MGET`, `SCAN`, `XRANGE`, `CLUSTER SLOTS`, ...);
- stampede's own stamp-guarded scripts: a guarded write sent again with the same
  stamp is a no-op (`idempotent_script` registers such a script).

Anything else is never sent again once it may have reached the server: the
failure becomes `OutcomeUnknownError` naming the operation. A connection error
while *connecting* (nothing sent yet) may always be retried. MULTI/EXEC
transactions are made exactly-once instead, with an operation marker and a fence
(`node_ops`), so they can be retried safely.

A stampede script whose `.lua` file says `--! idempotent` counts as idempotent
without being declared.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from .._backoff import backoff as shared_backoff
from .._lua import IDEMPOTENT_SHAS
from ..errors import ConfigurationError
from ..keys import hash_tag

__all__ = [
    "MARKER_PREFIX",
    "MARKER_TTL_MS",
    "READ_ONLY",
    "Losses",
    "Markers",
    "all_idempotent",
    "backoff",
    "describe",
    "idempotent_script",
    "is_idempotent",
    "note_loss",
    "read_only",
    "watch_losses",
]

READ_ONLY: frozenset[str] = frozenset(
    """GET MGET EXISTS TYPE TTL PTTL EXPIRETIME PEXPIRETIME STRLEN GETRANGE GETBIT BITCOUNT
    BITPOS SUBSTR LCS HGET HMGET HGETALL HKEYS HVALS HLEN HEXISTS HSTRLEN HRANDFIELD HSCAN
    LRANGE LLEN LINDEX LPOS SMEMBERS SISMEMBER SMISMEMBER SCARD SRANDMEMBER SINTER SINTERCARD
    SUNION SDIFF SSCAN ZRANGE ZREVRANGE ZRANGEBYSCORE ZREVRANGEBYSCORE ZRANGEBYLEX
    ZREVRANGEBYLEX ZSCORE ZMSCORE ZCARD ZCOUNT ZLEXCOUNT ZRANK ZREVRANK ZRANDMEMBER ZSCAN
    ZINTER ZUNION ZDIFF ZINTERCARD XLEN XRANGE XREVRANGE XPENDING XINFO PFCOUNT GEOPOS
    GEODIST GEOHASH GEOSEARCH DUMP OBJECT TOUCH SCAN KEYS RANDOMKEY DBSIZE INFO PING ECHO
    TIME LASTSAVE ROLE COMMAND ASKING READONLY READWRITE EVAL_RO EVALSHA_RO FCALL_RO WAIT
    WAITAOF""".split()
)
"""Commands that change nothing: resending one after a lost reply is harmless."""

# Commands read-only only with these subcommands.
_READ_ONLY_SUB: dict[str, frozenset[str]] = {
    "CLUSTER": frozenset(
        "SLOTS SHARDS NODES INFO MYID MYSHARDID KEYSLOT COUNTKEYSINSLOT GETKEYSINSLOT "
        "REPLICAS LINKS".split()
    ),
    "CLIENT": frozenset("ID INFO LIST GETNAME".split()),
    "CONFIG": frozenset({"GET"}),
    "SCRIPT": frozenset({"EXISTS", "LOAD"}),
    "MEMORY": frozenset({"USAGE", "STATS"}),
}

_SCRIPT_SHAS: set[str] = set()
_SCRIPT_SOURCES: set[bytes] = set()

MARKER_PREFIX = b"stampede:op:"
"""Operation markers are `stampede:op:{<tag>}:<token>` (see `Markers`)."""
MARKER_TTL_MS = 600_000
"""How long an operation marker lives: ten minutes, far beyond any fence."""


def idempotent_script(source: bytes | str) -> str:
    """Declare a Lua script idempotent (safe to resend after a lost reply); its SHA1."""
    raw = source.encode() if isinstance(source, str) else source
    sha = hashlib.sha1(raw).hexdigest()
    _SCRIPT_SHAS.add(sha)
    _SCRIPT_SOURCES.add(raw)
    return sha


def _name(part: Any) -> str:
    if isinstance(part, bytes | bytearray | memoryview):
        return bytes(part).decode("ascii", "replace").upper()
    return str(part).upper()


def read_only(command: Sequence[Any]) -> bool:
    """True when `command` changes nothing (`READ_ONLY`, or a read-only subcommand)."""
    if not command:
        return False
    words = _name(command[0]).split()
    if words[0] in READ_ONLY:
        return True
    subs = _READ_ONLY_SUB.get(words[0])
    if subs is None:
        return False
    sub = words[1] if len(words) > 1 else (_name(command[1]) if len(command) > 1 else "")
    return sub in subs


def is_idempotent(command: Sequence[Any]) -> bool:
    """True when sending `command` twice does what sending it once does."""
    if not command:
        return False
    if read_only(command):
        return True
    name = _name(command[0]).split()[0]
    if name == "EVALSHA":
        if len(command) < 2:
            return False
        sha = _name(command[1]).lower()
        return sha in _SCRIPT_SHAS or sha in IDEMPOTENT_SHAS
    if name == "EVAL":
        if len(command) < 2:
            return False
        body = command[1]
        raw = body.encode() if isinstance(body, str) else bytes(body)
        return raw in _SCRIPT_SOURCES or hashlib.sha1(raw).hexdigest() in IDEMPOTENT_SHAS
    return False


def all_idempotent(commands: Sequence[Sequence[Any]]) -> bool:
    """True when every command of a pipeline may be resent."""
    return all(is_idempotent(c) for c in commands)


def describe(commands: Sequence[Sequence[Any]]) -> str:
    """The operation in an error message: command names only, never keys or values."""
    names = [_name(c[0]) if c else "?" for c in commands]
    if names and names[0] == "MULTI":
        inner = [n for n in names[1:] if n != "EXEC"]
        return f"MULTI/EXEC ({', '.join(inner[:8])}{', ...' if len(inner) > 8 else ''})"
    shown = []
    for cmd, name in zip(commands, names, strict=True):
        if name in ("EVALSHA", "EVAL") and len(cmd) > 1 and name == "EVALSHA":
            shown.append(f"EVALSHA {str(cmd[1])[:12]}")
        else:
            shown.append(name)
    return ", ".join(shown[:8]) + (", ..." if len(shown) > 8 else "")


class Losses:
    """The replies lost (a dropped connection, a timeout) under `watch_losses`: a
    call resent after one and then refused may have applied all the same (its
    refusal says nothing of the send whose reply was lost)."""

    __slots__ = ("count",)

    def __init__(self) -> None:
        self.count = 0


_LOSSES: ContextVar[Losses | None] = ContextVar("stampede_losses", default=None)


@contextmanager
def watch_losses() -> Iterator[Losses]:
    """Inside: every reply a lane loses in this context (its tasks too) is counted."""
    token = _LOSSES.set(losses := Losses())
    try:
        yield losses
    finally:
        _LOSSES.reset(token)


def note_loss() -> None:
    """A lane lost a reply (`Lane.pipeline`): counted for `watch_losses`, if any."""
    if (losses := _LOSSES.get()) is not None:
        losses.count += 1


def backoff(attempt: int, base: float, cap: float, rng: random.Random | None = None) -> float:
    """The full-jitter sleep before retry number `attempt` (1-based)."""
    return shared_backoff(attempt, base, cap, rng=rng)


class Markers:
    """Operation-marker keys in a given slot, under one topology's hashing rule.

    The marker of an operation on slot `s` is `stampede:op:{<tag>}:<token>`:
    `<tag>` is the watched key's own hash tag when it has one, else the first
    decimal `n` whose key lands in `s` (searched once per slot, then cached). Under
    a hashing rule (a `HashPolicy`) that hashes every `stampede:op:{<n>}:...` by the
    same part, no `n` moves it: the marker is then `<key>:stampede:op:<token>`, which
    the rule hashes as it hashes the key, if it lands in `s` (else `ConfigurationError`).
    """

    def __init__(self, slot_of: Callable[[bytes], int]) -> None:
        self._slot_of = slot_of
        self._prefixes: dict[int, bytes | None] = {}

    def key(self, near: bytes, token: str) -> bytes:
        """A marker key for `token` in the slot of `near`."""
        slot = self._slot_of(near)
        tail = b":" + token.encode()
        tag = hash_tag(near)
        if tag is not None:
            candidate = MARKER_PREFIX + b"{" + tag + b"}" + tail
            if self._slot_of(candidate) == slot:
                return candidate
        prefix = self._prefixes.get(slot)
        if prefix is None or self._slot_of(prefix + tail) != slot:
            prefix = self._search(slot, tail)
        if prefix is not None:
            return prefix + tail
        beside = near + b":" + MARKER_PREFIX[:-1] + tail
        if self._slot_of(beside) == slot:
            return beside
        raise ConfigurationError(
            f"no operation-marker key lands in slot {slot} of {near!r} under this hashing "
            "rule: it hashes every stampede:op:{<n>}:... alike, and <key>:stampede:op:... "
            "elsewhere; give the hash_pattern a first rule for markers, e.g. "
            r"r'stampede:op:\{(?P<tag>\d+)\}'"
        )

    def _search(self, slot: int, tail: bytes) -> bytes | None:
        """The first `stampede:op:{<n>}` prefix in `slot`; None when the hashing rule
        pins them (`{0}` and `{1}`, two slots under the standard rule, share one)."""
        slot_of = self._slot_of
        first, second = (slot_of(MARKER_PREFIX + b"{%d}" % n + tail) for n in (0, 1))
        if first == second != slot:
            return None
        for n in range(1 << 22):
            prefix = MARKER_PREFIX + b"{%d}" % n
            found = slot_of(prefix + tail)
            if found == slot:
                return prefix
        return None  # pragma: no cover - every slot is reached long before
