"""Key names that co-locate by design: `<env>:<service>:<module>[:v<N>]:{<affinity>}:<suffix>`.

The affinity (what the keys of one logical group share: a user, a cart, an order)
is the hash tag, so every key of a group lands in one slot, on a cluster and on
client-side shards alike; the group name keeps the tag, so keys derived from it
(`<group>:stampede:commit`) co-locate too.

>>> carts = KeySpace(env="prod", service="shop", module="cart", version=2)
>>> carts.key(42, "items")
'prod:shop:cart:v2:{42}:items'
>>> carts.group(42)
'prod:shop:cart:v2:{42}'
>>> parse("prod:shop:cart:v2:{42}:items").affinity
'42'
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final, TypeAlias

from ..errors import InvalidKeyError
from ._slots import to_bytes

__all__ = ["KeyName", "KeySpace", "Part", "parse"]

Part: TypeAlias = str | int
"""A name part: text, or an integer written in decimal."""

_VERSION: Final = re.compile(r"v([1-9][0-9]*)")
_GLOB_SPECIAL: Final = re.compile(r"([*?\[\]\\])")
_FORMAT: Final = "<env>:<service>:<module>[:v<N>]:{<affinity>}:<suffix>"


def _text(name: str, value: object) -> str:
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise InvalidKeyError(
            f"{name} must be a str or an int, not {type(value).__name__}", key=None
        )
    return str(value)


def _check(name: str, text: str, *, colons: bool) -> str:
    """Validate one name part; `colons` says whether ':' may appear inside it."""
    if not text:
        raise InvalidKeyError(f"{name} must not be empty", key=text)
    for char in ("{", "}"):
        if char in text:
            raise InvalidKeyError(
                f"{name} {text!r} contains {char!r}; braces are reserved for the hash tag",
                key=text,
            )
    for char in text:
        if char.isspace() or not char.isprintable():
            raise InvalidKeyError(
                f"{name} {text!r} contains whitespace or a control character "
                f"({char!r}); key parts must be printable and without spaces",
                key=text,
            )
    if colons:
        if "" in text.split(":"):
            raise InvalidKeyError(
                f"{name} {text!r} has an empty ':'-separated segment; "
                "it must not start or end with ':' or contain '::'",
                key=text,
            )
    elif ":" in text:
        raise InvalidKeyError(
            f"{name} {text!r} contains ':', the segment separator; use '-', '_' or '.' inside "
            "a segment",
            key=text,
        )
    return text


def _check_version(version: object) -> None:
    if version is None:
        return
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise InvalidKeyError(
            f"version must be a positive integer (rendered 'v<N>') or None, got {version!r}",
            key=None,
        )


@dataclass(frozen=True, slots=True)
class KeySpace:
    """The fixed prefix of a family of keys, and the builder for their names.

    `env`, `service` and `module` are one segment each (no ':', braces, spaces or
    control characters). `version`, if set, adds a schema version segment `v<N>`
    after the module: bump it when the stored format changes, and the new keys
    form new groups that never mix with the old ones.
    """

    env: str
    service: str
    module: str
    version: int | None = None

    def __post_init__(self) -> None:
        for name in ("env", "service", "module"):
            value = getattr(self, name)
            if not isinstance(value, str):
                raise InvalidKeyError(f"{name} must be a str, not {type(value).__name__}", key=None)
            _check(name, value, colons=False)
        _check_version(self.version)

    @property
    def prefix(self) -> str:
        """`<env>:<service>:<module>`, with `:v<N>` when versioned."""
        base = f"{self.env}:{self.service}:{self.module}"
        return base if self.version is None else f"{base}:v{self.version}"

    def group(self, affinity: Part) -> str:
        """Return the group name for `affinity`: `<prefix>:{<affinity>}`.

        The affinity may contain ':' (`fav:123`) but not braces, whitespace or
        control characters. Every key of the group starts with this name, so it
        carries the same hash tag.
        """
        tag = _check("affinity", _text("affinity", affinity), colons=True)
        return f"{self.prefix}:{{{tag}}}"

    def key(self, affinity: Part, suffix: Part, *more: Part) -> str:
        """Return `<prefix>:{<affinity>}:<suffix>[:<more>...]`.

        The suffix says which key of the group this is (`profile`, `items`,
        `orders:7`); it may contain ':' but not braces, so the affinity stays the
        key's only hash tag. Extra parts are joined with ':'.
        """
        parts = [_check("suffix", _text("suffix", suffix), colons=True)]
        parts.extend(_check("suffix", _text("suffix", part), colons=True) for part in more)
        return f"{self.group(affinity)}:{':'.join(parts)}"

    def match(self, affinity: Part | None = None) -> str:
        """Return a SCAN `MATCH` glob for this key space (or one group of it).

        Glob metacharacters in the parts are escaped, so `match()` finds exactly
        the keys of this key space, and `match(42)` exactly those of group 42.
        """
        prefix = _GLOB_SPECIAL.sub(r"\\\1", self.prefix)
        if affinity is None:
            return f"{prefix}:{{*}}:*"
        tag = _check("affinity", _text("affinity", affinity), colons=True)
        tag = _GLOB_SPECIAL.sub(r"\\\1", tag)
        return f"{prefix}:{{{tag}}}:*"

    def parse(self, key: bytes | str) -> KeyName:
        """Parse `key` like `parse()`, and check it belongs to this key space."""
        name = parse(key)
        if name.keyspace != self:
            raise InvalidKeyError(
                f"key {name.key!r} belongs to key space {name.keyspace.prefix!r}, "
                f"not {self.prefix!r}",
                key=key,
            )
        return name

    def __contains__(self, key: object) -> bool:
        """`key in keyspace`: True if `key` is a well-formed key of this key space."""
        if not isinstance(key, bytes | str):
            return False
        try:
            self.parse(key)
        except InvalidKeyError:
            return False
        return True


@dataclass(frozen=True, slots=True)
class KeyName:
    """The parts of a conforming key, as `parse()` returns them."""

    env: str
    service: str
    module: str
    version: int | None
    affinity: str
    suffix: str

    @property
    def keyspace(self) -> KeySpace:
        """The key space the key belongs to."""
        return KeySpace(self.env, self.service, self.module, self.version)

    @property
    def group(self) -> str:
        """The key's group name (which keeps the hash tag)."""
        return self.keyspace.group(self.affinity)

    @property
    def key(self) -> str:
        """The key itself, reassembled."""
        return f"{self.group}:{self.suffix}"

    def __str__(self) -> str:
        return self.key


def parse(key: bytes | str) -> KeyName:
    """Split a key of the form `<env>:<service>:<module>[:v<N>]:{<affinity>}:<suffix>`.

    The inverse of `KeySpace.key`: `parse(ks.key(a, s))` gives back `ks`, `a` and
    `s` (as text). A key that does not have exactly this form, or whose parts
    `KeySpace` would reject, raises `InvalidKeyError` saying what is wrong.
    """
    text = _decode(key)
    start = text.find("{")
    if start < 0:
        raise _bad(text, "it has no '{<affinity>}' hash tag")
    end = text.find("}", start + 1)
    if end < 0:
        raise _bad(text, "its '{' is never closed")
    head, affinity, rest = text[:start], text[start + 1 : end], text[end + 1 :]
    if not head.endswith(":"):
        raise _bad(text, "the hash tag must follow '<env>:<service>:<module>:'")
    segments = head[:-1].split(":")
    version: int | None = None
    if len(segments) == 4:
        found = _VERSION.fullmatch(segments[3])
        if found is None:
            raise _bad(text, f"the 4th segment {segments[3]!r} is not a version 'v<N>'")
        version = int(found.group(1))
        segments = segments[:3]
    if len(segments) != 3:
        raise _bad(
            text, f"it has {len(segments)} segment(s) before the hash tag, expected 3 (or 4)"
        )
    if not rest.startswith(":") or len(rest) == 1:
        raise _bad(text, "the hash tag must be followed by ':<suffix>'")
    env, service, module = segments
    try:
        space = KeySpace(env, service, module, version)
        suffix = _check("suffix", rest[1:], colons=True)
        _check("affinity", affinity, colons=True)
    except InvalidKeyError as exc:
        raise _bad(text, str(exc)) from None
    return KeyName(space.env, space.service, space.module, version, affinity, suffix)


def _decode(key: bytes | str) -> str:
    if isinstance(key, str):
        return key
    raw = to_bytes(key)
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        shown = raw.decode("utf-8", "backslashreplace")
        raise InvalidKeyError(
            f"key {shown!r} is not UTF-8, so it cannot be a named key", key=key
        ) from None


def _bad(key: str, why: str) -> InvalidKeyError:
    return InvalidKeyError(f"key {key!r} does not have the form {_FORMAT}: {why}", key=key)
