"""Redis Cluster hash slots: hash tags, CRC16, regex hashing policies and slot maps.

Everything here is pure: no client, no I/O. `keyslot` is exactly Redis Cluster's
rule, so a key lands in the same slot whether a Redis Cluster or stampede's
client-side sharding (`SlotMap`) routes it.

The rule, from the cluster specification: if the key contains a `{`, and a `}`
follows it, and at least one byte lies between them, only those bytes (the *hash
tag*) are hashed; otherwise the whole key is. The slot is CRC16 (XMODEM) mod 16384.
"""

from __future__ import annotations

import math
import re
import struct
from array import array
from binascii import crc_hqx
from collections.abc import Iterable, Mapping, Sequence
from typing import Final, TypeAlias

from ..errors import ConfigurationError, InvalidKeyError

__all__ = [
    "SLOTS",
    "HashPolicy",
    "PatternLike",
    "SlotMap",
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
    check, so it runs as fast as redis-py's `key_slot`. A `str` costs about a
    microsecond more; to hash many str keys, use `keyslots`.

    >>> keyslot("123456789")
    12739
    >>> keyslot("{user1000}.following") == keyslot("{user1000}.followers")
    True
    """
    # Hot path: the same C calls as redis-py's key_slot (find, find, crc_hqx) and
    # nothing else. A type check costs ~5% per call, so a str is caught by the
    # TypeError its find(b"{") raises (try is free in 3.11 until it raises).
    # `b"{" in key` measures slower than `find`, which also gives the position;
    # 0x3FFF is SLOTS - 1 as a constant (a global would be one more lookup).
    raw: bytes = key  # type: ignore[assignment]  # a str raises in find: see except
    try:
        start = raw.find(b"{")
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
    for key in keys:
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
    elif isinstance(pattern, str):
        try:
            compiled = re.compile(_PCRE_GROUP_STR.sub(r"\1(?P<\2>", pattern))
        except re.error as exc:
            raise ConfigurationError(
                f"hashing pattern {pattern!r} is not a valid regular expression: {exc}"
            ) from None
    elif isinstance(pattern, bytes):
        try:
            compiled = re.compile(_PCRE_GROUP_BYTES.sub(rb"\1(?P<\2>", pattern))
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


def _f32(value: float) -> float:
    """Round to IEEE single precision, as C `float` arithmetic does."""
    result: float = struct.unpack("f", struct.pack("f", value))[0]
    return result


def _lround(value: float) -> int:
    """C `lround` for non-negative values: halves round away from zero."""
    return math.floor(value + 0.5)


def _redis_cli_lasts(shards: int) -> list[int] | None:
    """The last slot of each shard as redis-cli plans it, or None if that overflows."""
    per_shard = _f32(SLOTS / shards)
    cursor = 0.0
    first = 0
    lasts = []
    for shard in range(shards):
        last = _lround(_f32(_f32(cursor + per_shard) - 1))
        if last > SLOTS or shard == shards - 1:
            last = SLOTS - 1
        last = max(last, first)
        if last >= SLOTS:
            return None
        lasts.append(last)
        first = last + 1
        cursor = _f32(cursor + per_shard)
    return lasts


def _describe(start: int, end: int) -> str:
    return f"slot {start}" if start == end else f"slots {start}-{end}"


_UNOWNED: Final = 0xFFFF


class SlotMap:
    """Which shard (0..n-1) owns each of the 16384 slots.

    Immutable. `shard_of` is one table lookup. Build one with `even(n)` (the split
    `redis-cli --cluster create` makes), `from_ranges({shard: [(first, last), ...]})`
    or directly from a table of one owner per slot.
    """

    __slots__ = ("_shards", "_table")

    _table: array[int]
    _shards: int

    def __init__(self, owners: Sequence[int]) -> None:
        """Build from `owners[slot]` = owning shard, for all 16384 slots.

        Shards must be numbered 0..n-1 and each must own at least one slot.
        """
        if len(owners) != SLOTS:
            raise ConfigurationError(
                f"a slot map needs an owner for each of the {SLOTS} slots, got {len(owners)}"
            )
        try:
            table = array("H", owners)
        except (OverflowError, TypeError) as exc:
            raise ConfigurationError(
                f"slot owners must be shard numbers 0..{SLOTS - 1}: {exc}"
            ) from None
        present = set(table)
        shards = max(present) + 1
        if len(present) != shards:
            missing = sorted(set(range(shards)) - present)
            raise ConfigurationError(
                f"shards must be numbered 0..{shards - 1} and each must own a slot; "
                f"shard(s) {', '.join(map(str, missing[:10]))} own none"
            )
        self._table = table
        self._shards = shards

    @classmethod
    def even(cls, shards: int) -> SlotMap:
        """Split the slots into `shards` contiguous ranges, as `redis-cli --cluster create`.

        Shard i gets the i-th range; for 3 shards: 0-5460, 5461-10922, 10923-16383.
        The arithmetic is redis-cli's, single-precision floats included, so from 78
        shards on the ranges follow its rounding rather than exact proportions. For
        the thousands of shards where that arithmetic runs past the last slot
        (7542 and more), the exact proportional split is used instead.
        """
        if isinstance(shards, bool) or not isinstance(shards, int) or not 1 <= shards <= SLOTS:
            raise ConfigurationError(f"shards must be an integer from 1 to {SLOTS}, got {shards!r}")
        lasts = _redis_cli_lasts(shards)
        if lasts is None:
            # Round half up of (i + 1) * 16384 / n - 1, in integers.
            lasts = [((i + 1) * 2 * SLOTS - shards) // (2 * shards) for i in range(shards)]
        table = array("H", bytes(2 * SLOTS))
        first = 0
        for shard, last in enumerate(lasts):
            table[first : last + 1] = array("H", [shard]) * (last + 1 - first)
            first = last + 1
        return cls._trusted(table, shards)

    @classmethod
    def from_ranges(cls, ranges: Mapping[int, Sequence[tuple[int, int]]]) -> SlotMap:
        """Build from inclusive slot ranges per shard, e.g. `{0: [(0, 8191)], 1: [(8192, 16383)]}`.

        Every slot must be covered exactly once and every shard 0..n-1 must own
        some slots; otherwise `ConfigurationError` names the gap or overlap.
        """
        shards = len(ranges)
        if shards == 0:
            raise ConfigurationError("a slot map needs at least one shard")
        if sorted(ranges) != list(range(shards)):
            raise ConfigurationError(
                f"shards must be numbered 0..{shards - 1}, got {sorted(ranges)!r}"
            )
        table = array("H", [_UNOWNED]) * SLOTS
        for shard in range(shards):
            if not ranges[shard]:
                raise ConfigurationError(f"shard {shard} owns no slots; give it a range")
            for first, last in ranges[shard]:
                _check_range(shard, first, last)
                _claim(table, shard, first, last)
        gaps = _runs_of(table, _UNOWNED)
        if gaps:
            listed = ", ".join(_describe(a, b) for a, b in gaps[:5])
            more = f" and {len(gaps) - 5} more gaps" if len(gaps) > 5 else ""
            raise ConfigurationError(f"{listed}{more} not assigned to any shard")
        return cls._trusted(table, shards)

    @classmethod
    def _trusted(cls, table: array[int], shards: int) -> SlotMap:
        self = cls.__new__(cls)
        self._table = table
        self._shards = shards
        return self

    @property
    def shards(self) -> int:
        """The number of shards."""
        return self._shards

    def shard_of(self, slot: int) -> int:
        """Return the shard that owns `slot` (0..16383)."""
        if 0 <= slot < SLOTS:
            return self._table[slot]
        raise ValueError(f"slot must be in 0..{SLOTS - 1}, got {slot!r}")

    def shard_of_key(self, key: bytes | str, *, policy: HashPolicy | None = None) -> int:
        """Return the shard that owns `key` (under `policy`, if given)."""
        return self._table[keyslot(key) if policy is None else policy.keyslot(key)]

    def ranges(self) -> dict[int, list[tuple[int, int]]]:
        """Return each shard's slots as sorted inclusive ranges, shards in order."""
        out: dict[int, list[tuple[int, int]]] = {shard: [] for shard in range(self._shards)}
        table = self._table
        start = 0
        for slot in range(1, SLOTS + 1):
            if slot == SLOTS or table[slot] != table[start]:
                out[table[start]].append((start, slot - 1))
                start = slot
        return out

    def slot_counts(self) -> tuple[int, ...]:
        """Return how many slots each shard owns, indexed by shard."""
        counts = [0] * self._shards
        for owner in self._table:
            counts[owner] += 1
        return tuple(counts)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, SlotMap):
            return NotImplemented
        return self._table == other._table

    def __hash__(self) -> int:
        return hash(self._table.tobytes())

    def __repr__(self) -> str:
        ranges = self.ranges()
        shown = ", ".join(
            f"{shard}: [{', '.join(f'{a}-{b}' for a, b in spans[:3])}"
            + (", ..." if len(spans) > 3 else "")
            + "]"
            for shard, spans in list(ranges.items())[:4]
        )
        more = ", ..." if self._shards > 4 else ""
        return f"<SlotMap shards={self._shards} {{{shown}{more}}}>"


def _check_range(shard: int, first: int, last: int) -> None:
    for bound in (first, last):
        if isinstance(bound, bool) or not isinstance(bound, int):
            raise ConfigurationError(
                f"shard {shard}: slot range bounds must be integers, got ({first!r}, {last!r})"
            )
    if not 0 <= first <= last < SLOTS:
        raise ConfigurationError(
            f"shard {shard}: slot range ({first}, {last}) must satisfy "
            f"0 <= first <= last <= {SLOTS - 1}"
        )


def _claim(table: array[int], shard: int, first: int, last: int) -> None:
    for slot in range(first, last + 1):
        owner = table[slot]
        if owner != _UNOWNED:
            end = slot
            while end < last and table[end + 1] == owner:
                end += 1
            who = "shard" if owner == shard else f"shards {owner} and"
            raise ConfigurationError(f"{_describe(slot, end)} assigned twice: to {who} {shard}")
        table[slot] = shard


def _runs_of(table: array[int], value: int) -> list[tuple[int, int]]:
    runs: list[tuple[int, int]] = []
    start = -1
    for slot, owner in enumerate(table):
        if owner == value:
            if start < 0:
                start = slot
        elif start >= 0:
            runs.append((start, slot - 1))
            start = -1
    if start >= 0:
        runs.append((start, SLOTS - 1))
    return runs
