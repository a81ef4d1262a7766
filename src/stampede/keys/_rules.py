"""Lint rules for key names: hash tags that fail to co-locate, or co-locate too much.

`lint(keys)` returns one `Finding` per broken rule and key. Every rule has a
stable code (`SK001`...) listed in `RULES` with its reason and fix, so findings
can be filtered (`ignore=`), counted and documented. Per-key rules look at one
name; `SK008` looks at the whole sample and `SK009` at declared groups.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Final, TypeAlias

from ..errors import ConfigurationError, InvalidKeyError
from ._catalog import CONSTANT_TAGS, RULES, Rule
from ._slots import HashPolicy, hashed_part, key_sample, keyslot, to_bytes

__all__ = [
    "CONSTANT_TAGS",
    "RULES",
    "Finding",
    "GroupOf",
    "Rule",
    "lint",
    "lint_key",
]


_NULLISH: Final = frozenset({"none", "null", "nil", "undefined", "nan", "(null)", "<nil>"})
_PLACEHOLDER: Final = re.compile(r"%[sdrif]|\$\{?\w*\}?|<\w+>|:\w+|\w*_id|[a-z]+Id|id|ID", re.ASCII)
_CONTROL: Final = re.compile(rb"[\x00-\x20\x7f]")
_UNPRINTABLE: Final = re.compile(r"[\x00-\x1f\x7f-\x9f]")

GroupOf: TypeAlias = (
    Mapping[bytes | str, bytes | str]
    | Mapping[bytes, bytes | str]
    | Mapping[str, bytes | str]
    | Iterable[tuple[bytes | str, bytes | str]]
    | Callable[[bytes], bytes | str | None]
)
"""Declared groups: a mapping key -> group, (key, group) pairs, or a function."""


@dataclass(frozen=True, slots=True)
class Finding:
    """One broken rule: its code, the key, what is wrong with it, and the fix."""

    code: str
    key: bytes | str
    message: str
    fix: str

    @property
    def rule(self) -> Rule:
        """The rule this finding breaks."""
        return RULES[self.code]

    def to_dict(self) -> dict[str, str]:
        """A JSON-ready view: the key as text (undecodable bytes backslash-escaped)."""
        key = (
            self.key.decode("utf-8", "backslashreplace")
            if isinstance(self.key, bytes)
            else self.key
        )
        return {
            "code": self.code,
            "name": self.rule.name,
            "key": key,
            "message": self.message,
            "fix": self.fix,
        }


def _text(raw: bytes) -> str:
    """Key bytes as text for a message: undecodable bytes and control characters escaped."""
    text = raw.decode("utf-8", "backslashreplace")
    return _UNPRINTABLE.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


def _q(raw: bytes) -> str:
    return f"'{_text(raw)}'"


def _by_code(finding: Finding) -> str:
    return finding.code


def _finding(code: str, key: bytes | str, message: str, fix: str | None = None) -> Finding:
    return Finding(code, key, message, RULES[code].fix if fix is None else fix)


@dataclass(frozen=True, slots=True)
class _Braces:
    """Where the standard rule finds (or fails to find) a hash tag in one key."""

    raw: bytes
    open: int  # first '{', or -1
    close: int  # first '}' after it, or -1

    @classmethod
    def of(cls, raw: bytes) -> _Braces:
        start = raw.find(b"{")
        return cls(raw, start, raw.find(b"}", start + 1) if start >= 0 else -1)

    @property
    def tag(self) -> bytes | None:
        return self.raw[self.open + 1 : self.close] if self.close > self.open + 1 else None


def _brace_rules(key: bytes | str, braces: _Braces) -> Iterator[Finding]:
    raw = braces.raw
    if braces.open >= 0 and braces.close == braces.open + 1:
        yield _finding("SK001", key, f"empty tag '{{}}' in {_q(raw)}: the whole key is hashed")
    if raw.count(b"{") > 1 or raw.count(b"}") > 1:
        hashed = _text(hashed_part(raw))
        yield _finding(
            "SK005",
            key,
            f"{raw.count(b'{')} '{{' and {raw.count(b'}')} '}}' in {_q(raw)}; "
            f"Redis hashes only '{hashed}'",
        )
    if (braces.open >= 0 and braces.close < 0) or (braces.open < 0 and b"}" in raw):
        yield _finding("SK006", key, f"unbalanced brace in {_q(raw)}: the whole key is hashed")


def _tag_rules(key: bytes | str, tag: bytes, constant_tags: Collection[str]) -> Iterator[Finding]:
    text = _text(tag)
    words = text.lower().split(":")
    if text.lower() in _NULLISH or _PLACEHOLDER.fullmatch(text):
        yield _finding(
            "SK003", key, f"tag {{{text}}} looks like a missing value or unformatted placeholder"
        )
    elif all(word in constant_tags for word in words):
        yield _finding(
            "SK002", key, f"tag {{{text}}} is a constant: every key with it shares one slot"
        )


def _suffix_tag(key: bytes | str, braces: _Braces) -> Finding | None:
    """SK004: `user:42:{profile}`, the tag closes the key and the id precedes it."""
    tag = braces.tag
    raw = braces.raw
    if tag is None or braces.close != len(raw) - 1 or braces.open == 0:
        return None
    if any(byte in b"0123456789" for byte in tag):
        return None
    segments = raw[: braces.open].rstrip(b":").split(b":")
    ids = [i for i, seg in enumerate(segments) if any(b in b"0123456789" for b in seg)]
    if not ids:
        return None
    segments[ids[-1]] = b"{" + segments[ids[-1]] + b"}"
    better = _q(b":".join([*segments, tag]))
    return _finding(
        "SK004",
        key,
        f"tag {{{_text(tag)}}} is the last segment of {_q(raw)}, so all ids share it",
        f"move the braces onto the id: {better}",
    )


def _namespace(key: bytes | str, braces: _Braces, *, by_policy: bool) -> Finding | None:
    raw = braces.raw
    if braces.tag is not None and not by_policy:
        if b":" in raw[: braces.open]:
            return None
        where = "before its hash tag"
    else:
        if b":" in raw:
            return None
        where = "at all"
    return _finding("SK007", key, f"{_q(raw)} has no ':'-separated namespace {where}")


def lint_key(
    key: bytes | str,
    *,
    policy: HashPolicy | None = None,
    constant_tags: Collection[str] = CONSTANT_TAGS,
) -> list[Finding]:
    """Check one key against the per-key rules (all but SK008 and SK009)."""
    raw = to_bytes(key)
    policy_tag = policy.tag(raw) if policy is not None else None
    lowered = frozenset(word.lower() for word in constant_tags)
    return sorted(_key_findings(key, _Braces.of(raw), policy_tag, lowered), key=_by_code)


def _key_findings(
    key: bytes | str, braces: _Braces, policy_tag: bytes | None, constant_tags: Collection[str]
) -> Iterator[Finding]:
    raw = braces.raw
    if _CONTROL.search(raw):
        yield _finding("SK010", key, f"{_q(raw)} contains whitespace or control characters")
    if policy_tag is None:
        yield from _brace_rules(key, braces)
        found = _suffix_tag(key, braces)
        if found is not None:
            yield found
    tag = policy_tag if policy_tag is not None else braces.tag
    if tag is not None:
        yield from _tag_rules(key, tag, constant_tags)
    found = _namespace(key, braces, by_policy=policy_tag is not None)
    if found is not None:
        yield found


def _group_lookup(group_of: GroupOf | None) -> Callable[[bytes], bytes | str | None] | None:
    if group_of is None:
        return None
    if isinstance(group_of, Mapping):
        table = {to_bytes(k): v for k, v in group_of.items()}
        return table.get
    if callable(group_of):
        return group_of
    try:
        pairs = {to_bytes(k): v for k, v in group_of}
    except InvalidKeyError:
        raise
    except (TypeError, ValueError):
        raise ConfigurationError(
            "group_of must be a mapping key -> group, (key, group) pairs or a function, "
            f"got {type(group_of).__name__}"
        ) from None
    return pairs.get


def _group_rule(
    key: bytes | str, raw: bytes, group: bytes | str, policy: HashPolicy | None
) -> Finding | None:
    slot_of = keyslot if policy is None else policy.keyslot
    part_of = hashed_part if policy is None else policy.hashed_part
    key_slot, group_slot = slot_of(raw), slot_of(group)
    if key_slot == group_slot:
        return None
    return _finding(
        "SK009",
        key,
        f"{_q(raw)} hashes {_q(part_of(raw))} to slot {key_slot}, but its group "
        f"{_q(to_bytes(group))} hashes {_q(part_of(group))} to slot {group_slot}",
    )


def lint(
    keys: Iterable[bytes | str],
    *,
    group_of: GroupOf | None = None,
    policy: HashPolicy | None = None,
    ignore: Collection[str] = (),
    constant_tags: Collection[str] = CONSTANT_TAGS,
    dominant_share: float = 0.5,
    dominant_min_keys: int = 20,
) -> list[Finding]:
    """Check keys against every rule; return the findings, keys in input order.

    `group_of` declares each key's group (a mapping, (key, group) pairs, or a
    function returning None for keys without one); SK009 fires for a key that
    does not hash like its group. `policy` lints keys as a `HashPolicy` hashes
    them. `ignore` lists codes to skip. SK008 fires when one tag is on at least
    `dominant_share` of a sample of at least `dominant_min_keys` distinct keys.
    Repeated keys are checked once.
    """
    unknown = sorted(set(ignore) - RULES.keys())
    if unknown:
        raise ConfigurationError(
            f"unknown lint code(s) {', '.join(unknown)}; known: {', '.join(RULES)}"
        )
    if not 0 < dominant_share <= 1:
        raise ConfigurationError(f"dominant_share must be in (0, 1], got {dominant_share!r}")
    lowered = frozenset(word.lower() for word in constant_tags)
    lookup = _group_lookup(group_of)
    findings: list[Finding] = []
    seen: set[bytes] = set()
    tags: Counter[bytes] = Counter()
    first_with: dict[bytes, bytes | str] = {}
    for key in key_sample(keys, "lint()"):
        raw = to_bytes(key)
        if raw in seen:
            continue
        seen.add(raw)
        braces = _Braces.of(raw)
        policy_tag = policy.tag(raw) if policy is not None else None
        findings.extend(sorted(_key_findings(key, braces, policy_tag, lowered), key=_by_code))
        tag = policy_tag if policy_tag is not None else braces.tag
        if tag is not None:
            tags[tag] += 1
            first_with.setdefault(tag, key)
        group = lookup(raw) if lookup is not None else None
        if group is not None:
            found = _group_rule(key, raw, group, policy)
            if found is not None:
                findings.append(found)
    findings.extend(_dominant(tags, first_with, len(seen), dominant_share, dominant_min_keys))
    return [f for f in findings if f.code not in ignore]


def _dominant(
    tags: Counter[bytes],
    first_with: Mapping[bytes, bytes | str],
    total: int,
    share: float,
    min_keys: int,
) -> list[Finding]:
    if total < max(min_keys, 1) or not tags:
        return []
    out = []
    for tag, count in tags.most_common():
        if count < share * total:
            break
        out.append(
            _finding(
                "SK008",
                first_with[tag],
                f"tag {{{_text(tag)}}} is on {count} of {total} keys ({count / total:.0%}): "
                f"all in slot {keyslot(tag)}",
            )
        )
    return out
