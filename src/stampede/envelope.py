"""The `<version>:<token>:<payload>` envelope stored as the value of each data key.

```
version  unsigned decimal, no sign, no leading zeros ("0" allowed), < 2**63
token    ULID, 26 characters of Crockford base32, upper case
payload  any bytes, colons included (split at the first two colons only)
```

Pure: no I/O, no clock. `Envelope.decode` accepts exactly that shape and raises
`MalformedEnvelope` (naming the key, never echoing the payload) for anything else.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .errors import MalformedEnvelope

__all__ = ["MAX_VERSION", "TOKEN_LENGTH", "Envelope", "is_token"]

MAX_VERSION = 2**63 - 1
TOKEN_LENGTH = 26
_CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
# A ULID is 128 bits in 26 base32 digits: the first digit carries only 3 bits.
_TOKEN = r"[0-7][0-9A-HJKMNP-TV-Z]{25}"
_VERSION = r"0|[1-9][0-9]{0,18}"
_HEAD = re.compile(rf"({_VERSION}):({_TOKEN}):".encode("ascii"))
_TOKEN_RE = re.compile(_TOKEN)
_DIGITS = re.compile(rb"[0-9]+")


def is_token(token: str) -> bool:
    """True when `token` is a canonical (upper-case) ULID string."""
    return len(token) == TOKEN_LENGTH and _TOKEN_RE.fullmatch(token) is not None


@dataclass(frozen=True, slots=True)
class Envelope:
    """One stamped value: the write's version and token, and the caller's payload."""

    version: int
    token: str
    payload: bytes = b""

    def __post_init__(self) -> None:
        if not 0 <= self.version <= MAX_VERSION:
            raise ValueError(f"version must be in 0..2**63-1, got {self.version}")
        if not is_token(self.token):
            raise ValueError(f"token must be a 26-character upper-case ULID, got {self.token!r}")
        if not isinstance(self.payload, bytes):
            raise TypeError(f"payload must be bytes, got {type(self.payload).__name__}")

    @property
    def stamp(self) -> str:
        """`<version>:<token>`: what identifies the write, without the payload."""
        return f"{self.version}:{self.token}"

    def newer_than(self, other: Envelope) -> bool:
        """True when this envelope's write is ordered after `other`'s."""
        return (self.version, self.token) > (other.version, other.token)

    def encode(self) -> bytes:
        """The bytes stored in Redis."""
        return b"%d:%s:%s" % (self.version, self.token.encode("ascii"), self.payload)

    @classmethod
    def decode(cls, raw: bytes, *, key: bytes | str | None = None) -> Envelope:
        """Parse stored bytes; `MalformedEnvelope` (naming `key`) for any other shape."""
        if not isinstance(raw, bytes):
            raise MalformedEnvelope(f"expected bytes, got {type(raw).__name__}", key=key)
        match = _HEAD.match(raw)
        if match is None:
            raise MalformedEnvelope(_diagnose(raw), key=key)
        version = int(match.group(1))
        if version > MAX_VERSION:
            raise MalformedEnvelope("version is 2**63 or more", key=key)
        env = object.__new__(cls)  # fields are already valid: skip __post_init__
        object.__setattr__(env, "version", version)
        object.__setattr__(env, "token", match.group(2).decode("ascii"))
        object.__setattr__(env, "payload", raw[match.end() :])
        return env


def _diagnose(raw: bytes) -> str:
    """Say which part of a non-envelope is wrong, without quoting its content."""
    parts = bytes(raw).split(b":", 2)
    if len(parts) < 3:
        return f"it has {len(parts) - 1} colon(s), an envelope has at least two"
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
