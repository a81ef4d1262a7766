"""Redis Cluster hash slots: hash tags, CRC16, regex hashing policies and slot maps.

Everything here is pure: no client, no I/O. `keyslot` is exactly Redis Cluster's
rule, so a key lands in the same slot whether a Redis Cluster or stampede's
client-side sharding (`SlotMap`) routes it.

The rule, from the cluster specification: if the key contains a `{`, and a `}`
follows it, and at least one byte lies between them, only those bytes (the *hash
tag*) are hashed; otherwise the whole key is. The slot is CRC16 (XMODEM) mod 16384.
"""

from __future__ import annotations

import re
from binascii import crc_hqx
from collections.abc import Iterable
from typing import Any, Final, TypeAlias

from ..errors import ConfigurationError, InvalidKeyError

__all__ = [
    "SLOTS",
    "HashPolicy",
    "PatternLike",
    "hash_tag",
    "hashed_part",
    "keyslot",
    "keyslots",
    "to_bytes",
]

SLOTS: Final = 16384
"""Number of hash slots in Redis Cluster (and in stampede's client-side sharding)."""

_MASK: Final = SLOTS - 1  # 16384 is a power of two: `& 0x3FFF` is `% 16384`


def to_bytes(key: bytes | str) -> bytes:
    """Return `key` as the bytes Redis sees: `str` is UTF-8 encoded, `bytes` kept.

    Raises `InvalidKeyError` for any other type, and for a `str` that UTF-8 cannot
    encode (lone surrogates).
    """
    if isinstance(key, bytes):
        return key
    if isinstance(key, str):
        try:
            return key.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise InvalidKeyError(
                f"key {key!r} cannot be encoded as UTF-8 ({exc.reason}); "
                "pass the raw bytes instead",
                key=key,
            ) from None
    raise InvalidKeyError(
        f"a key must be bytes or str, not {type(key).__name__}; "
        "format numbers into a str first, e.g. f'user:{42}'",
        key=None,
    )


def key_sample(keys: Any, what: str) -> Iterable[bytes | str]:
    """`keys` if it is an iterable of keys; `InvalidKeyError` for one str or bytes
    (iterated, it would be one key per character) and for anything not iterable."""
    if isinstance(keys, str | bytes | bytearray):
        raise InvalidKeyError(
            f"{what} takes a list of keys, not one {type(keys).__name__}; write [{keys!r:.60}]",
            key=None,
        )
    if not isinstance(keys, Iterable):
        raise InvalidKeyError(f"{what} takes a list of keys, got {type(keys).__name__}", key=None)
    return keys


def _encode(key: bytes | str) -> bytes:
    """`to_bytes` with the str case first: the slot functions' slow path."""
    if type(key) is str:
        try:
            return key.encode()
        except UnicodeEncodeError:
            pass
    return to_bytes(key)


def keyslot(key: bytes | str) -> int:
    """Return the Redis Cluster hash slot (0..16383) of `key`.

    Identical to `CLUSTER KEYSLOT`: CRC16 (XMODEM) of the hash tag if the key has
    a non-empty one, else of the whole key, mod 16384. `str` keys are UTF-8
    encoded; other types raise `InvalidKeyError`. The empty key is allowed, as
    Redis allows it, and is in slot 0.

    `bytes` is the fast path (stampede hands its own keys over as bytes): no type
    check, so it runs as fast as redis-py's `key_slot` (a `bytearray` or
    `memoryview` is refused, as everywhere keys are taken). A `str` costs about a
    microsecond more; to hash many str keys, use `keyslots`.

    >>> keyslot("123456789")
    12739
    >>> keyslot("{user1000}.following") == keyslot("{user1000}.followers")
    True
    """
    # Hot path: the same C calls as redis-py's key_slot (find, find, crc_hqx) and
    # nothing else. A type check costs ~5% per call, so anything but bytes (a str,
    # a bytearray, a memoryview) is caught by the TypeError that `bytes.find`
    # raises for it (try is free in 3.11 until it raises): `key.find` would take a
    # bytearray, which every other key function refuses. `b"{" in key` measures
    # slower than `find`, which also gives the position; 0x3FFF is SLOTS - 1 as a
    # constant (a global would be one more lookup).
    raw: bytes = key  # type: ignore[assignment]  # not bytes: raises in find, see except
    try:
        start = bytes.find(raw, b"{")
    except (TypeError, AttributeError):
        raw = _encode(key)
        start = raw.find(b"{")
    if start < 0:
        return crc_hqx(raw, 0) & 0x3FFF
    end = raw.find(b"}", start + 1)
    if end > start + 1:
        return crc_hqx(raw[start + 1 : end], 0) & 0x3FFF
    return crc_hqx(raw, 0) & 0x3FFF


def keyslots(keys: Iterable[bytes | str]) -> list[int]:
    """Return `keyslot(k)` for every key, in order: faster than one call per key.

    Unlike `keyslot`, it checks each key's type, so `str` keys cost no more than
    an encode.
    """
    out: list[int] = []
    append = out.append
    for key in key_sample(keys, "keyslots()"):
        if type(key) is not bytes:
            key = _encode(key)
        start = key.find(b"{")
        if start >= 0:
            end = key.find(b"}", start + 1)
            if end > start + 1:
                key = key[start + 1 : end]
        append(crc_hqx(key, 0) & 0x3FFF)
    return out


def hash_tag(key: bytes | str) -> bytes | None:
    """Return the hash tag of `key`, or None when the whole key is hashed.

    The tag is the bytes between the first `{` and the first `}` after it, and
    only counts when non-empty: `foo{}{bar}` has no tag (the whole key is
    hashed), `foo{{bar}}zap` has the tag `{bar`, `foo{bar}{zap}` has `bar`.
    """
    key = to_bytes(key)
    start = key.find(b"{")
    if start < 0:
        return None
    end = key.find(b"}", start + 1)
    if end > start + 1:
        return key[start + 1 : end]
    return None


def hashed_part(key: bytes | str) -> bytes:
    """Return the bytes Redis hashes for `key`: its hash tag, else the whole key."""
    key = to_bytes(key)
    tag = hash_tag(key)
    return key if tag is None else tag


# Redis Enterprise writes named groups the PCRE way, `(?<tag>...)`; Python 3.11
# only knows `(?P<tag>...)`. Rewrite an unescaped `(?<name>` (never a lookbehind,
# which is `(?<=` or `(?<!`).
_PCRE_GROUP = r"(?<!\\)((?:\\\\)*)\(\?<([A-Za-z_]\w*)>"
_PCRE_GROUP_STR = re.compile(_PCRE_GROUP)
_PCRE_GROUP_BYTES = re.compile(_PCRE_GROUP.encode())

PatternLike: TypeAlias = str | bytes | re.Pattern[bytes] | re.Pattern[str]
"""A hashing rule as given: source text (`str` or `bytes`) or a compiled pattern."""


def _compile_rule(pattern: PatternLike) -> re.Pattern[bytes] | re.Pattern[str]:
    compiled: re.Pattern[bytes] | re.Pattern[str]
    if isinstance(pattern, re.Pattern):
        compiled = pattern
    elif isinstance(pattern, str | bytes):
        # PCRE's (?<name>...) as Python's (?P<name>...)
        source: str | bytes = (
            _PCRE_GROUP_STR.sub(r"\1(?P<\2>", pattern)
            if isinstance(pattern, str)
            else _PCRE_GROUP_BYTES.sub(rb"\1(?P<\2>", pattern)
        )
        try:
            compiled = re.compile(source)
        except re.error as exc:
            raise ConfigurationError(
                f"hashing pattern {pattern!r} is not a valid regular expression: {exc}"
            ) from None
    else:
        raise ConfigurationError(
            f"a hashing pattern must be str, bytes or re.Pattern, not {type(pattern).__name__}"
        )
    if "tag" not in compiled.groupindex:
        raise ConfigurationError(
            f"hashing pattern {compiled.pattern!r} has no group named 'tag'; mark the part "
            r"to hash, e.g. r'user:(?P<tag>\d+):.*'"
        )
    return compiled


class HashPolicy:
    """Ordered regex rules that choose the hashed part of a key (a custom hashing policy).

    Modelled on Redis Enterprise's custom hashing policy: each rule is a regular
    expression with a named group `tag`; the rules are tried in order, each
    anchored at the start of the key (`re.match`, as PCRE_ANCHORED), and the first
    rule that matches *and* sets `tag` decides: the bytes of `tag` are hashed, even
    when empty (an empty tag puts every such key in slot 0, as Redis Enterprise
    does). A key no rule matches falls back to the standard rule (hash tag, else
    the whole key) instead of raising.

    Rules may be written with Python's `(?P<tag>...)` or PCRE's `(?<tag>...)`.
    A `str` rule sees the key decoded as UTF-8 (undecodable bytes as surrogate
    escapes), so `\\w` and `.` mean characters; a `bytes` rule sees the raw bytes.
    Either way the hashed part is exactly the matched bytes of the key.

    >>> policy = HashPolicy(r"order:(?P<tag>\\d+):")
    >>> policy.hashed_part("order:42:lines")
    b'42'
    >>> policy.hashed_part("user:{7}:cart")  # no rule matches: standard rule
    b'7'
    """

    __slots__ = ("_rules",)

    def __init__(self, pattern: PatternLike, *more: PatternLike) -> None:
        self._rules = tuple(_compile_rule(p) for p in (pattern, *more))

    @property
    def patterns(self) -> tuple[str | bytes, ...]:
        """The source of each rule, in the order they are tried."""
        return tuple(rule.pattern for rule in self._rules)

    def tag(self, key: bytes | str) -> bytes | None:
        """Return the part the first matching rule selects, or None if no rule applies."""
        key = to_bytes(key)
        text: str | None = None
        for rule in self._rules:
            if isinstance(rule.pattern, bytes):
                match_b = rule.match(key)
                if match_b is not None and match_b.group("tag") is not None:
                    part: bytes = match_b.group("tag")
                    return part
            else:
                if text is None:
                    text = key.decode("utf-8", "surrogateescape")
                match_s = rule.match(text)
                if match_s is not None and match_s.group("tag") is not None:
                    found: str = match_s.group("tag")
                    return found.encode("utf-8", "surrogateescape")
        return None

    def hashed_part(self, key: bytes | str) -> bytes:
        """Return the bytes hashed for `key`: the rule's tag, else the standard rule's."""
        key = to_bytes(key)
        tag = self.tag(key)
        return hashed_part(key) if tag is None else tag

    def keyslot(self, key: bytes | str) -> int:
        """Return the slot of `key` under this policy."""
        key = to_bytes(key)
        tag = self.tag(key)
        return keyslot(key) if tag is None else crc_hqx(tag, 0) & _MASK

    def __repr__(self) -> str:
        return f"HashPolicy({', '.join(repr(p) for p in self.patterns)})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, HashPolicy):
            return NotImplemented
        return [(r.pattern, r.flags) for r in self._rules] == [
            (r.pattern, r.flags) for r in other._rules
        ]

    def __hash__(self) -> int:
        return hash(tuple((r.pattern, r.flags) for r in self._rules))
