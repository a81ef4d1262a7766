"""Lint rules for keys: each rule fires on its bad example and stays quiet on a good one."""

from __future__ import annotations

import dataclasses
import json

import pytest

from stampede.errors import ConfigurationError, InvalidKeyError
from stampede.keys import (
    RULES,
    Finding,
    HashPolicy,
    Rule,
    SlotCounter,
    analyze,
    keyslot,
    keyslots,
    lint,
    lint_key,
)


def codes(findings: list[Finding]) -> list[str]:
    """The codes of the findings, in order."""
    return [f.code for f in findings]


# code -> (a key that breaks the rule, a key that does not)
PER_KEY = {
    "SK001": ("user:{}:cart", "user:{42}:cart"),
    "SK002": ("app:{config}:flags", "app:{tenant-7}:flags"),
    "SK003": ("user:{None}:cart", "user:{42}:cart"),
    "SK004": ("user:42:{profile}", "user:{42}:profile"),
    "SK005": ("user:{42}:{cart}", "user:{42}:cart"),
    "SK006": ("user:{42:cart", "user:{42}:cart"),
    "SK007": ("{42}:profile", "user:{42}:profile"),
    "SK010": ("user:{42}:cart\r", "user:{42}:cart"),
}


def test_rules_table_is_complete() -> None:
    """RULES lists SK001..SK010 in order, each with a name, a reason and a fix on one line."""
    assert list(RULES) == [f"SK{n:03d}" for n in range(1, 11)]
    for code, rule in RULES.items():
        assert isinstance(rule, Rule) and rule.code == code
        assert rule.name and rule.reason and rule.fix
        assert "\n" not in rule.reason + rule.fix
    assert len({rule.name for rule in RULES.values()}) == len(RULES)


@pytest.mark.parametrize("code", sorted(PER_KEY))
def test_rule_fires_on_bad_key_only(code: str) -> None:
    """The rule's bad example breaks it (once); its good example does not."""
    bad, good = PER_KEY[code]
    assert codes(lint([bad])).count(code) == 1
    assert code not in codes(lint([good]))
    assert lint([good]) == []


@pytest.mark.parametrize(
    ("key", "expected"),
    [
        ("user:{}:x", ["SK001"]),
        ("foo{}{bar}", ["SK001", "SK005", "SK007"]),
        ("a:foo{{bar}}zap", ["SK005"]),
        ("app:{Global}:x", ["SK002"]),
        ("app:{app:config}:x", ["SK002"]),
        ("app:{config:7}:x", []),
        ("user:{null}:x", ["SK003"]),
        ("user:{user_id}:x", ["SK003"]),
        ("user:{userId}:x", ["SK003"]),
        ("user:{%s}:x", ["SK003"]),
        ("user:{${id}}:x", ["SK003", "SK005"]),
        ("user:{valid}:x", []),
        ("user:42:{profile}", ["SK004"]),
        ("user:alice:{profile}", []),
        ("user:{42}", []),
        ("user:42:{v2}", []),
        ("a:}b", ["SK006"]),
        ("cart{42}", ["SK007"]),
        ("sessioncount", ["SK007"]),
        ("counter:total", []),
        ("a b:{1}", ["SK010"]),
        (b"bin:{\xff\xfe}:x", []),
    ],
)
def test_per_key_rules(key: str | bytes, expected: list[str]) -> None:
    """Per-key rules fire exactly where the hash tag misleads."""
    assert codes(lint([key])) == expected
    assert codes(lint_key(key)) == expected


def test_suffix_tag_fix_moves_the_braces() -> None:
    """SK004's fix shows the key with the tag moved onto the id."""
    (finding,) = lint(["user:42:{profile}"])
    assert finding.fix == "move the braces onto the id: 'user:{42}:profile'"


def test_several_tags_message_names_the_hashed_part() -> None:
    """SK005 says which part Redis actually hashes."""
    (finding,) = lint(["a:foo{{bar}}zap"])
    assert "Redis hashes only '{bar'" in finding.message


def test_constant_tags_are_configurable() -> None:
    """constant_tags replaces the built-in list, compared case-insensitively."""
    assert codes(lint(["app:{tenant}:x"], constant_tags={"TENANT"})) == ["SK002"]
    assert codes(lint(["app:{config}:x"], constant_tags=())) == []
    assert codes(lint_key("app:{tenant}:x", constant_tags={"Tenant"})) == ["SK002"]


def test_dominant_tag_over_a_sample() -> None:
    """SK008 fires once when one tag is on at least half of a sample of 20+ keys."""
    hot = [f"shop:cart:{{hot}}:{i}" for i in range(15)]
    spread = [f"shop:cart:{{{i}}}:x" for i in range(15)]
    (finding,) = lint(hot + spread)
    assert finding.code == "SK008"
    assert finding.key == "shop:cart:{hot}:0"
    assert "on 15 of 30 keys (50%)" in finding.message
    assert f"slot {keyslot('hot')}" in finding.message
    assert lint(hot[:10] + spread) == []
    assert lint(hot[:19]) == []
    assert codes(lint(hot[:19], dominant_min_keys=5)) == ["SK008"]
    assert lint(hot + spread, dominant_share=0.9) == []


def test_repeated_keys_are_checked_once() -> None:
    """Duplicates neither repeat findings nor inflate the sample."""
    assert codes(lint(["user:{}:x"] * 3)) == ["SK001"]
    assert lint(["shop:cart:{hot}:1"] * 40) == []


def test_group_mismatch_from_mapping_pairs_or_function() -> None:
    """SK009 fires for a key that does not hash like its declared group, however declared."""
    good, bad = "user:{42}:cart", "user:43:cart"
    mapping = {good: "user:{42}", bad: "user:{42}"}
    for group_of in (
        mapping,
        list(mapping.items()),
        {k.encode(): v.encode() for k, v in mapping.items()},
        lambda raw: "user:{42}" if raw.startswith(b"user:") else None,
    ):
        found = lint([good, bad], group_of=group_of)
        assert codes(found) == ["SK009"]
        assert found[0].key == bad
    assert "'user:43:cart' hashes 'user:43:cart' to slot" in found[0].message
    assert "group 'user:{42}' hashes '42'" in found[0].message
    assert lint([good, "other:{1}:x"], group_of={good: "user:{42}"}) == []


def test_policy_changes_what_is_hashed() -> None:
    """With a HashPolicy, tags come from its rules; brace rules apply only to unmatched keys."""
    policy = HashPolicy(r"order:(?P<tag>\w+):")
    assert codes(lint(["order:global:x"], policy=policy)) == ["SK002"]
    assert lint(["order:7:{}"], policy=policy) == []
    assert codes(lint(["user:{}:x"], policy=policy)) == ["SK001"]
    assert (
        lint(["order:7:a", "order:7:b"], group_of={"order:7:a": "order:7:z"}, policy=policy) == []
    )
    assert codes(lint(["order:7:a"], group_of={"order:7:a": "x"}, policy=policy)) == ["SK009"]
    assert codes(lint_key("order:null:x", policy=policy)) == ["SK003"]


def test_ignore_skips_codes_and_rejects_unknown_ones() -> None:
    """ignore= drops findings of those codes; an unknown code is a ConfigurationError."""
    assert codes(lint(["foo{}{bar}"], ignore={"SK005", "SK007"})) == ["SK001"]
    with pytest.raises(ConfigurationError, match="unknown lint code"):
        lint(["a"], ignore=["SK999"])
    with pytest.raises(ConfigurationError, match="dominant_share"):
        lint(["a"], dominant_share=0)


def test_finding_is_a_frozen_value_with_json_view() -> None:
    """Finding is frozen; to_dict is JSON-ready with the key as escaped text."""
    (finding,) = lint([b"\xff:{}:x"])
    with pytest.raises(dataclasses.FrozenInstanceError):
        finding.code = "SK002"  # type: ignore[misc]
    assert finding.rule is RULES["SK001"]
    assert finding.key == b"\xff:{}:x"
    data = finding.to_dict()
    assert data["key"] == "\\xff:{}:x" and data["name"] == "empty-tag"
    assert json.loads(json.dumps(data)) == data
    assert finding.fix == RULES["SK001"].fix


def test_messages_escape_control_characters() -> None:
    """A key with control characters is shown escaped in the message, never raw."""
    (finding,) = lint(["user:{42}:x\n"])
    assert finding.code == "SK010"
    assert "\n" not in finding.message and "\\x0a" in finding.message


def test_one_key_where_a_sample_belongs_is_refused() -> None:
    """lint, analyze, keyslots and SlotCounter.update read one str (or bytes) one key
    per character: lint("user:{42}:cart") reported SK006/SK007 for its letters and
    analyze counted 14 keys. Now an InvalidKeyError saying to wrap it; a bad group_of
    is a ConfigurationError, not a TypeError."""
    one = r"takes a list of keys, not one str; write \['user:\{42\}:cart'\]"
    with pytest.raises(InvalidKeyError, match=rf"lint\(\) {one}"):
        lint("user:{42}:cart")
    with pytest.raises(InvalidKeyError, match=rf"analyze\(\) {one}"):
        analyze("user:{42}:cart")
    with pytest.raises(InvalidKeyError, match=r"keyslots\(\) takes a list of keys, not one bytes"):
        keyslots(b"ab")  # type: ignore[arg-type]
    with pytest.raises(InvalidKeyError, match=r"SlotCounter.update\(\) takes a list of keys, got"):
        SlotCounter().update(None)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="group_of must be a mapping"):
        lint(["user:{42}:cart"], group_of=5)  # type: ignore[arg-type]
    assert analyze(key for key in ["a", "b"]).total == 2
