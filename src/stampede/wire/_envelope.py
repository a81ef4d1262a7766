"""The `<version>:<token>:<payload>` envelope stored as the value of each data key.

```
version    unsigned decimal, no sign, no leading zeros ("0" allowed), < 2**63
token      ULID, 26 characters of Crockford base32, upper case
payload    any bytes, colons included (split at the first two colons only)
tombstone  <version>:<token>   (no third part: the write deleted the key; format 2)
```

Versions come in two kinds that cannot be ordered against each other: *sequence*
versions (below 2**56: a `Counter`, or the application's own row version or log
position) and *clock* versions (2**56 and above: nanoseconds since the epoch from
a `HybridClock`). Version 0 orders below both.

Pure: no I/O, no clock. `Envelope.decode` accepts exactly those shapes and raises
`MalformedEnvelope` (naming the key, never echoing the payload) for anything else.
"""

from __future__ import annotations

import os
import random
import re
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from enum import IntEnum
from typing import Final

from ..errors import ConfigurationError, InvalidValueError, MalformedEnvelope

__all__ = [
    "CLOCK_FLOOR",
    "MAX_VERSION",
    "TOKEN_LENGTH",
    "Envelope",
    "VersionKind",
    "decode_all",
    "is_token",
    "kind_of",
    "new_token",
    "token_after",
]

MAX_VERSION: Final = 2**63 - 1
CLOCK_FLOOR: Final = 2**56
"""Versions from here up are clock readings; below, sequence numbers."""
TOKEN_LENGTH: Final = 26
_CROCKFORD: Final = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
_VALUE: Final = {c: i for i, c in enumerate(_CROCKFORD)}
_PAIRS: Final = [a + b for a in _CROCKFORD for b in _CROCKFORD]  # every 10-bit value, 2 chars
_head: tuple[int, str] = (-1, "")


class VersionKind(IntEnum):
    """Where a version comes from; versions of different kinds cannot be ordered."""

    ZERO = 0  # version 0: below every write (a repair of a group that had no stamp)
    SEQUENCE = 1  # 1 .. 2**56-1: a Counter, a row version, a log position
    CLOCK = 2  # 2**56 .. 2**63-1: a HybridClock (nanoseconds since the epoch)


def kind_of(version: int) -> VersionKind:
    """The kind of `version` (see `VersionKind`)."""
    if version == 0:
        return VersionKind.ZERO
    return VersionKind.CLOCK if version >= CLOCK_FLOOR else VersionKind.SEQUENCE


def new_token() -> str:
    """A fresh ULID token for one logical write: 48-bit milliseconds, 80 random bits.

    The same 26 characters `str(ulid.ULID())` gives, made several times faster (it
    is on every write's path): the time part is encoded once per millisecond, and
    the random parts come from one `os.urandom` call per `_DRAWN` tokens, each
    handed out once (an iterator's `next`: one step under the GIL even with
    threads; a forked child drops what its parent drew).
    """
    global _head
    ms = time.time_ns() // 1_000_000
    if _head[0] != ms:
        p = _PAIRS
        _head = (
            ms,
            p[ms >> 40 & 1023] + p[ms >> 30 & 1023] + p[ms >> 20 & 1023] + p[ms >> 10 & 1023]
            + p[ms & 1023],
        )  # fmt: skip
    tail = next(_tails, None)
    if tail is None:
        tail = _draw()
    return _head[1] + tail


def _draw() -> str:
    """A fresh batch of random token tails in `_tails`; one of them, not kept there.

    Each character is one random byte's low five bits (256 is a multiple of 32, so
    each of the 32 characters is as likely): 80 random bits a tail, 64 tails from
    one `os.urandom` call and one `bytes.translate`.
    """
    global _tails
    chars = os.urandom(16 * _DRAWN).translate(_FIVE_BITS).decode("ascii")
    tails = [chars[at : at + 16] for at in range(16, 16 * _DRAWN, 16)]
    _tails = iter(tails)
    return chars[:16]


def _forget_tails() -> None:
    """In a forked child: never reuse a random part the parent drew (or will use)."""
    global _tails
    _tails = iter(())


_FIVE_BITS: Final = bytes(ord(_CROCKFORD[b & 31]) for b in range(256))
"""A byte -> the Crockford character of its low five bits (`bytes.translate`)."""
_DRAWN: Final = 64
"""Token tails (80 random bits each, 16 characters) drawn per `os.urandom` call."""
_tails: Iterator[str] = iter(())
os.register_at_fork(after_in_child=_forget_tails)


def token_after(token: str) -> str:
    """A fresh random token that sorts after `token` (a repair's own token).

    The 128-bit value of `token` plus one plus 63 random bits (fewer near the top
    of the range): ordered after it, and unique to the caller, so two repairs of
    one group never share a stamp. `ValueError` for the largest ULID itself.
    """
    value = 0
    for char in token:
        value = value * 32 + _VALUE[char]
    room = (1 << 128) - 1 - value  # how many tokens sort after it
    if room < 1:
        raise ConfigurationError("no token sorts after the largest ULID")
    value += 1 + random.randrange(min(1 << 63, room))
    chars = []
    for _ in range(TOKEN_LENGTH):
        value, digit = divmod(value, 32)
        chars.append(_CROCKFORD[digit])
    return "".join(reversed(chars))


# A ULID is 128 bits in 26 base32 digits: the first digit carries only 3 bits.
_TOKEN = r"[0-7][0-9A-HJKMNP-TV-Z]{25}"
_VERSION = r"0|[1-9][0-9]{0,18}"
# `<version>:<token>:<payload>`, or a tombstone `<version>:<token>` (nothing after).
_ENVELOPE: Final = re.compile(rf"({_VERSION}):({_TOKEN})(:|\Z)".encode("ascii")).match
_TOKEN_RE: Final = re.compile(_TOKEN)
_DIGITS: Final = re.compile(rb"[0-9]+")


def is_token(token: str) -> bool:
    """True when `token` is a canonical (upper-case) ULID string."""
    return len(token) == TOKEN_LENGTH and _TOKEN_RE.fullmatch(token) is not None


@dataclass(frozen=True, slots=True)
class Envelope:
    """One stamped value: the write's version and token, and the caller's payload.

    A `tombstone` records that the write deleted the key: it has no payload and
    is stored as `<version>:<token>`, so a late older write is still kept out.
    """

    version: int
    token: str
    payload: bytes = b""
    tombstone: bool = False

    def __post_init__(self) -> None:
        version: object = self.version
        if not isinstance(version, int) or isinstance(version, bool):
            raise InvalidValueError(f"version must be an int in 0..2**63-1, got {version!r}")
        if version < 0:
            raise ConfigurationError(f"version must be an int in 0..2**63-1, got {version!r}")
        if version > MAX_VERSION:  # (apart: mypyc compares a checked int only)
            raise ConfigurationError(f"version must be an int in 0..2**63-1, got {version!r}")
        if not is_token(self.token):
            problem = f"token must be a 26-character upper-case ULID, got {self.token!r}"
            raise ConfigurationError(problem)
        if not isinstance(self.payload, bytes):
            raise InvalidValueError(f"payload must be bytes, got {type(self.payload).__name__}")
        if self.tombstone and self.payload:
            raise ConfigurationError("a tombstone has no payload")

    @property
    def stamp(self) -> str:
        """`<version>:<token>`: what identifies the write, without the payload."""
        return f"{self.version}:{self.token}"

    def newer_than(self, other: Envelope) -> bool:
        """True when this envelope's write is ordered after `other`'s."""
        return (self.version, self.token) > (other.version, other.token)

    @property
    def kind(self) -> VersionKind:
        return kind_of(self.version)

    @property
    def value(self) -> bytes | None:
        """The payload, or None for a tombstone (the key was deleted)."""
        return None if self.tombstone else self.payload

    def __reduce__(self) -> tuple[type[Envelope], tuple[int, str, bytes, bool]]:
        # copy and pickle through the constructor: a compiled build's frozen classes
        # cannot have their fields restored one by one, as the default way does
        return (type(self), (self.version, self.token, self.payload, self.tombstone))

    def encode(self) -> bytes:
        """The bytes stored in Redis."""
        if self.tombstone:
            return b"%d:%s" % (self.version, self.token.encode("ascii"))
        return b"%d:%s:%s" % (self.version, self.token.encode("ascii"), self.payload)

    @classmethod
    def decode(cls, raw: bytes, *, key: bytes | str | None = None) -> Envelope:
        """Parse stored bytes; `MalformedEnvelope` (naming `key`) for any other shape."""
        return _parse(cls, raw, key)[0]


# object.__new__ (a compiled build's own: object.__new__ refuses a compiled class).
_new: Final = Envelope.__new__
# The slots' own setters: a frozen dataclass refuses `env.version = ...`, these do not.
_set_version: Final = vars(Envelope)["version"].__set__
_set_token: Final = vars(Envelope)["token"].__set__
_set_payload: Final = vars(Envelope)["payload"].__set__
_set_tombstone: Final = vars(Envelope)["tombstone"].__set__


def _parse(cls: type[Envelope], raw: bytes, key: bytes | str | None) -> tuple[Envelope, int]:
    """`Envelope.decode`, and how long the `<version>:<token>` stamp at its start is."""
    if type(raw) is not bytes:
        if not isinstance(raw, bytes):
            raise MalformedEnvelope(f"expected bytes, got {type(raw).__name__}", key=key)
        raw = bytes(raw)
    match = _ENVELOPE(raw)
    if match is None:
        raise MalformedEnvelope(_diagnose(raw), key=key)
    digits, token, colon = match.groups()
    version = int(digits)
    if version > MAX_VERSION:
        raise MalformedEnvelope("version is 2**63 or more", key=key)
    # The fields are valid by the match: set them without __post_init__'s checks.
    env = _new(cls)
    _set_version(env, version)
    _set_token(env, token.decode("ascii"))
    if colon:
        _set_payload(env, raw[match.end() :])
        _set_tombstone(env, False)
    else:
        _set_payload(env, b"")
        _set_tombstone(env, True)
    return env, match.end(2)


def decode_all(raws: Sequence[bytes | None]) -> list[Envelope | None]:
    """Each value as `Envelope.decode` gives it (None, a missing key, stays None);
    `MalformedEnvelope` (naming no key) at the first value that is not an envelope.

    The values of one group mostly carry one write's stamp: a value that starts with
    the stamp of the one decoded before it (and then a colon, or nothing: a
    tombstone) is that stamp's envelope without parsing it again.
    """
    out: list[Envelope | None] = []
    stamp = b""
    size = 0
    version = 0
    token = ""
    for raw in raws:
        if raw is None:
            out.append(None)
            continue
        if size and type(raw) is bytes and raw.startswith(stamp):
            tombstone = len(raw) == size
            if tombstone or raw[size] == _COLON:
                env = _new(Envelope)
                _set_version(env, version)
                _set_token(env, token)
                _set_payload(env, b"" if tombstone else raw[size + 1 :])
                _set_tombstone(env, tombstone)
                out.append(env)
                continue
        env, size = _parse(Envelope, raw, None)
        stamp = bytes(raw[:size])
        version, token = env.version, env.token
        out.append(env)
    return out


_COLON: Final = ord(":")


def _diagnose(raw: bytes) -> str:
    """Say which part of a non-envelope is wrong, without quoting its content."""
    parts = bytes(raw).split(b":", 2)
    if len(parts) < 2:
        return "it has no colon; an envelope is <version>:<token>:<payload>"
    if len(parts) == 2 and len(parts[1]) != TOKEN_LENGTH:
        return (
            "it has one colon, and what follows is not a token (a tombstone is <version>:<token>)"
        )
    version, token = parts[0], parts[1]
    if not version:
        return "the version is empty"
    if _DIGITS.fullmatch(version) is None:
        return "the version is not an unsigned decimal number"
    if len(version) > 1 and version.startswith(b"0"):
        return "the version has leading zeros"
    if len(version) > 19 or int(version) > MAX_VERSION:
        return "the version is 2**63 or more"
    if len(token) != TOKEN_LENGTH:
        return f"the token has {len(token)} characters, a ULID has {TOKEN_LENGTH}"
    if token.upper() != token:
        return "the token is not upper case"
    return "the token is not a ULID (Crockford base32, first digit 0-7)"
