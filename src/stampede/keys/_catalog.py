"""The key lint's catalogue: every rule with its stable code, and the tags that
name no entity (`{common}`, `{config}`, ...)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Final

__all__ = ["CONSTANT_TAGS", "RULES", "Rule"]


@dataclass(frozen=True, slots=True)
class Rule:
    """A lint rule: stable code, short name, why it matters, how to fix it."""

    code: str
    name: str
    reason: str
    fix: str


RULES: Final[Mapping[str, Rule]] = MappingProxyType(
    {
        rule.code: rule
        for rule in (
            Rule(
                "SK001",
                "empty-tag",
                "'{}' is not a hash tag: Redis hashes the whole key, so it co-locates nothing",
                "put the group id between the braces ('user:{42}:cart') or drop the braces",
            ),
            Rule(
                "SK002",
                "constant-tag",
                "a fixed word as tag ('{config}', '{global}') sends every such key to one slot",
                "tag with the id of the group the keys belong to, e.g. 'config:{tenant-7}:flags'",
            ),
            Rule(
                "SK003",
                "placeholder-tag",
                "the tag is a missing value or an unformatted placeholder ('{None}', '{user_id}')",
                "format the real id into the key; check the code that builds it",
            ),
            Rule(
                "SK004",
                "suffix-tag",
                "the tag is the last segment while the id sits outside it, so every id shares it",
                "move the braces onto the id: 'user:{42}:profile', not 'user:42:{profile}'",
            ),
            Rule(
                "SK005",
                "several-tags",
                "more than one '{' or '}': only the first '{...}' counts, the rest mislead",
                "keep exactly one '{<id>}' per key",
            ),
            Rule(
                "SK006",
                "unclosed-brace",
                "a '{' without a later '}' (or a lone '}'): Redis hashes the whole key",
                "close the tag ('user:{42}:cart') or remove the stray brace",
            ),
            Rule(
                "SK007",
                "no-namespace",
                "no ':'-separated prefix before the tag (or in the key): it collides across apps",
                "prefix the key with its owner, e.g. 'shop:cart:{42}:items'",
            ),
            Rule(
                "SK008",
                "dominant-tag",
                "one tag carries most keys of the sample, so one slot (one shard) holds them",
                "tag with a finer-grained id so the keys spread over many slots",
            ),
            Rule(
                "SK009",
                "group-mismatch",
                "the key hashes to another slot than its declared group, so they cannot share "
                "a transaction",
                "give the key the group's hash tag, e.g. 'user:{42}:cart' in group 'user:{42}'",
            ),
            Rule(
                "SK010",
                "unprintable",
                "whitespace or control characters in the key (often a stray newline or '\\r')",
                "strip the key; keep names printable",
            ),
        )
    }
)
"""Every lint rule by code."""


CONSTANT_TAGS: Final = frozenset(
    {
        "all",
        "app",
        "cache",
        "common",
        "conf",
        "config",
        "configuration",
        "data",
        "default",
        "global",
        "lock",
        "locks",
        "main",
        "meta",
        "misc",
        "queue",
        "root",
        "settings",
        "shared",
        "static",
        "system",
        "temp",
        "tmp",
    }
)
"""Tags (compared case-insensitively) that name a kind of data, not a group (SK002)."""
