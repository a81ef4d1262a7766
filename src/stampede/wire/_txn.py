"""Where a key's versions live, and how a transaction's metadata is written. Pure.

Every key a transaction writes keeps its *current* value where it always was: the
data key holds the plain `<version>:<token>:<payload>` envelope (or a tombstone),
so a raw GET and group reads work unchanged. Beside it, in the same hash slot, a
*version hash* keeps what a reader may still need:

```
key     <key>:stampede:v              when the key has a hash tag
        {<key>}:stampede:v:u          when it has none (and no brace)
        stampede:v:{<n>}:<key>        otherwise: n chosen so the slot is the key's
fields  k                     the data key's name (for the sweep)
        d:<version>:<token>   the envelope of a version that is not the current
                              value: prepared and not yet committed, or replaced
                              less than the grace window ago
        m:<version>:<token>   <prepared-at unix ms>:<expire-at unix ms, 0: none>:
                              <JSON list of every key the transaction wrote>
        x:<version>:<token>   unix ms when that version stopped being current, or
                              was kept out on arrival; it is collected (d:, m:, x:)
                              once the grace window has passed
```

The fields `t` and `u` are the key's *commit marks*: the tokens of the transactions
whose commit decision reached the key (the sweep's evidence that a transaction was
decided), 26 bytes each, in the order they came: `t` the 16 last at most, `u` the 64
before them at most (`marked` looks in one). A hash written
before holds them in `c` instead, 48-byte records `<version zero-padded to 20
digits>:<token>;` (`mark_record`), which the sweep still reads. The fields `p`
and `i` index the versions the hash holds (docs/wire-formats.md).

The JSON list uses UTF-8 with `surrogateescape` escapes for keys that are not
UTF-8, as the commit record does.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence

from ..errors import ConfigurationError
from ..keys._slots import hash_tag

__all__ = [
    "SUFFIX",
    "Stamp",
    "decode_meta",
    "encode_meta",
    "mark_record",
    "marked",
    "parse_stamp",
    "side_key",
    "stamp_text",
]

SUFFIX = b":stampede:v"
Stamp = tuple[int, str]
_ANCHORS: dict[int, bytes] = {}


def side_key(key: bytes, slot_of: Callable[[bytes], int]) -> bytes:
    """The version hash of `key`, in the slot `slot_of(key)`."""
    slot = slot_of(key)
    if hash_tag(key) is not None:
        candidate: bytes | None = key + SUFFIX
    elif b"{" not in key and b"}" not in key:
        candidate = b"{" + key + b"}" + SUFFIX + b":u"
    else:
        candidate = None
    if candidate is not None and slot_of(candidate) == slot:
        return candidate
    return _anchored(key, slot, slot_of)


def mark_record(stamp: Stamp) -> bytes:
    """The record of `stamp` in the commit marks of a hash written before they moved
    to `t` (its field `c`)."""
    return b"%020d:%s;" % (stamp[0], stamp[1].encode("ascii"))


def marked(log: bytes | None, token: str) -> bool:
    """Does `log`, a part of the commit marks (a version hash's field `t` or `u`), hold
    `token`?"""
    if not log or len(log) % 26:
        return False
    want = token.encode("ascii")
    at = log.find(want)
    while at >= 0:
        if at % 26 == 0:
            return True
        at = log.find(want, at + 1)
    return False


def _anchored(key: bytes, slot: int, slot_of: Callable[[bytes], int]) -> bytes:
    """`stampede:v:{<n>}:<key>` with the first n that lands in `slot` (cached per slot,
    checked on every use, so another hashing rule just searches again). Under a rule
    (a `HashPolicy`) that hashes every such name alike (`{0}` and `{1}`, two slots
    under the standard rule, share one), `<key>:stampede:v`, which the rule hashes as
    it hashes the key, if that lands in `slot` (else `ConfigurationError`)."""
    prefix = _ANCHORS.get(slot)
    if prefix is not None and slot_of(prefix + key) == slot:
        return prefix + key
    first, second = (slot_of(b"stampede:v:{%d}:" % n + key) for n in (0, 1))
    if first == second != slot:
        if slot_of(key + SUFFIX) == slot:
            return key + SUFFIX
        raise ConfigurationError(
            f"no version-hash key lands in slot {slot} of {key!r} under this hashing rule: "
            "it hashes every stampede:v:{<n>}:<key> alike, and <key>:stampede:v elsewhere; "
            r"give the hash_pattern a first rule for them, e.g. r'stampede:v:\{(?P<tag>\d+)\}'"
        )
    for n in range(1 << 22):
        prefix = b"stampede:v:{%d}:" % n
        if slot_of(prefix + key) == slot:
            _ANCHORS[slot] = prefix
            return prefix + key
    raise RuntimeError(f"no version-hash key found for slot {slot}")  # pragma: no cover


def stamp_text(stamp: Stamp) -> bytes:
    return b"%d:%s" % (stamp[0], stamp[1].encode("ascii"))


def parse_stamp(text: bytes | str) -> Stamp:
    raw = text.decode("ascii") if isinstance(text, bytes) else text
    version, _, token = raw.partition(":")
    return int(version), token


def encode_meta(keys: Sequence[bytes]) -> bytes:
    """The JSON list of a transaction's keys (the prepared-at time is added by Redis)."""
    return json.dumps([k.decode("utf-8", "surrogateescape") for k in keys]).encode()


def decode_meta(raw: bytes | None) -> frozenset[bytes] | None:
    """The sibling keys in a stored `m:` field, or None when absent or unreadable."""
    if raw is None:
        return None
    parts = raw.split(b":", 2)
    if len(parts) != 3:
        return None
    body = parts[2]
    try:
        keys = json.loads(body)
        if not isinstance(keys, list):
            return None
        return frozenset(k.encode("utf-8", "surrogateescape") for k in keys if isinstance(k, str))
    except (ValueError, RecursionError, UnicodeEncodeError):
        return None
