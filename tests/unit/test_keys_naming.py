"""Key naming: `KeySpace` builds co-locating names, `parse` splits them back."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given
from hypothesis import strategies as st

from stampede.errors import InvalidKeyError
from stampede.keys import KeyName, KeySpace, keyslot, lint, parse

CARTS = KeySpace(env="prod", service="shop", module="cart")
CARTS_V2 = KeySpace(env="prod", service="shop", module="cart", version=2)


def test_key_and_group_layout() -> None:
    """key() is `<env>:<service>:<module>[:v<N>]:{<affinity>}:<suffix>`; group() its prefix."""
    assert CARTS.prefix == "prod:shop:cart"
    assert CARTS.key(42, "items") == "prod:shop:cart:{42}:items"
    assert CARTS.group(42) == "prod:shop:cart:{42}"
    assert CARTS_V2.prefix == "prod:shop:cart:v2"
    assert CARTS_V2.key("fav:123", "orders", 7) == "prod:shop:cart:v2:{fav:123}:orders:7"
    assert CARTS_V2.group("fav:123") == "prod:shop:cart:v2:{fav:123}"


def test_keys_of_a_group_share_its_slot() -> None:
    """Every key of a group, and the group name itself, hash to one slot (the affinity's)."""
    keys = [CARTS.key(42, suffix) for suffix in ("items", "total", "meta:v")]
    slots = {keyslot(k) for k in [*keys, CARTS.group(42), CARTS.group(42) + ":stampede:commit"]}
    assert slots == {keyslot("42")}


def test_version_makes_separate_groups() -> None:
    """A schema version segment gives new keys and groups that never equal the old ones."""
    assert CARTS_V2.key(42, "items") != CARTS.key(42, "items")
    assert CARTS_V2.group(42) != CARTS.group(42)
    assert dataclasses.replace(CARTS, version=3).prefix == "prod:shop:cart:v3"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"env": ""}, "env must not be empty"),
        ({"service": "sh op"}, "service 'sh op' contains whitespace"),
        ({"module": "ca\nrt"}, "module 'ca\\\\nrt' contains whitespace or a control"),
        ({"module": "a\x00"}, "control character"),
        ({"env": "pr:od"}, "env 'pr:od' contains ':'"),
        ({"service": "{shop}"}, "braces are reserved for the hash tag"),
        ({"module": 5}, "module must be a str, not int"),
        ({"version": 0}, "version must be a positive integer"),
        ({"version": True}, "version must be a positive integer"),
        ({"version": "2"}, "version must be a positive integer"),
    ],
)
def test_bad_keyspace_parts_name_the_part(kwargs: dict[str, object], message: str) -> None:
    """Each bad part raises InvalidKeyError naming which part and why."""
    fields: dict[str, object] = {"env": "prod", "service": "shop", "module": "cart"}
    fields.update(kwargs)
    with pytest.raises(InvalidKeyError, match=message):
        KeySpace(**fields)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("affinity", "suffix", "message"),
    [
        ("", "x", "affinity must not be empty"),
        ("a{b", "x", "affinity 'a{b' contains '{'"),
        ("a}b", "x", "affinity 'a}b' contains '}'"),
        ("a b", "x", "affinity 'a b' contains whitespace"),
        ("fav:", "x", "affinity 'fav:' has an empty ':'-separated segment"),
        (1.5, "x", "affinity must be a str or an int, not float"),
        (True, "x", "affinity must be a str or an int, not bool"),
        (1, "", "suffix must not be empty"),
        (1, "a{b}", "suffix 'a{b}' contains '{'"),
        (1, "a::b", "suffix 'a::b' has an empty"),
        (1, "x\t", "suffix 'x\\\\t' contains whitespace"),
    ],
)
def test_bad_affinity_or_suffix(affinity: object, suffix: object, message: str) -> None:
    """Affinity and suffix are validated with a message naming the part."""
    with pytest.raises(InvalidKeyError, match=message) as info:
        CARTS.key(affinity, suffix)  # type: ignore[arg-type]
    assert isinstance(info.value, ValueError)


def test_extra_suffix_parts_are_validated() -> None:
    """Extra suffix parts are checked like the first one."""
    with pytest.raises(InvalidKeyError, match="suffix must not be empty"):
        CARTS.key(1, "orders", "")


def test_parse_splits_a_key() -> None:
    """parse() returns the parts; bytes keys are decoded as UTF-8."""
    name = parse(b"prod:shop:cart:v2:{fav:123}:orders:7")
    assert name == KeyName("prod", "shop", "cart", 2, "fav:123", "orders:7")
    assert name.keyspace == CARTS_V2
    assert name.group == "prod:shop:cart:v2:{fav:123}"
    assert name.key == str(name) == "prod:shop:cart:v2:{fav:123}:orders:7"
    assert parse("prod:shop:cart:{\u00e9t\u00e9}:x").affinity == "\u00e9t\u00e9"


@pytest.mark.parametrize(
    ("key", "why"),
    [
        ("prod:shop:cart:items", "it has no '{<affinity>}' hash tag"),
        ("prod:shop:cart:{42:items", "its '{' is never closed"),
        ("prod:shop:cart{42}:items", "the hash tag must follow"),
        ("shop:cart:{42}:items", "it has 2 segment"),
        ("a:prod:shop:cart:v2:{42}:x", "it has 5 segment"),
        ("prod:shop:cart:x2:{42}:items", "the 4th segment 'x2' is not a version"),
        ("prod:shop:cart:v02:{42}:items", "the 4th segment 'v02' is not a version"),
        ("prod:shop:cart:{42}", "must be followed by ':<suffix>'"),
        ("prod:shop:cart:{42}:", "must be followed by ':<suffix>'"),
        ("prod:shop:cart:{42}items", "must be followed by ':<suffix>'"),
        ("prod:shop:cart:{}:items", "affinity must not be empty"),
        ("prod:shop:cart:{42}:a{b}", "suffix 'a{b}' contains '{'"),
        ("prod::cart:{42}:items", "service must not be empty"),
        ("prod:sh op:cart:{42}:items", "service 'sh op' contains whitespace"),
    ],
)
def test_parse_rejects_nonconforming_keys(key: str, why: str) -> None:
    """A key not of the documented form raises InvalidKeyError saying what is wrong."""
    with pytest.raises(InvalidKeyError, match="does not have the form") as info:
        parse(key)
    assert why in str(info.value)
    assert info.value.key == key


def test_parse_rejects_non_utf8() -> None:
    """Named keys are text: a non-UTF-8 key is rejected, shown escaped."""
    with pytest.raises(InvalidKeyError, match=r"\\\\xff.*not UTF-8"):
        parse(b"prod:shop:cart:{\xff}:x")


def test_keyspace_parse_checks_membership() -> None:
    """KeySpace.parse and `in` accept only keys of that key space."""
    key = CARTS.key(42, "items")
    assert CARTS.parse(key).suffix == "items"
    assert key in CARTS
    assert key not in CARTS_V2
    assert "nonsense" not in CARTS
    assert 42 not in CARTS
    with pytest.raises(InvalidKeyError, match="belongs to key space 'prod:shop:cart'"):
        CARTS_V2.parse(key)


def test_match_globs_escape_metacharacters() -> None:
    """match() gives SCAN MATCH patterns with glob metacharacters escaped."""
    assert CARTS.match() == "prod:shop:cart:{*}:*"
    assert CARTS_V2.match(42) == "prod:shop:cart:v2:{42}:*"
    odd = KeySpace("e*", "s?", "m[1]")
    assert odd.match("a*b") == "e\\*:s\\?:m\\[1\\]:{a\\*b}:*"


def test_keyspace_is_frozen() -> None:
    """KeySpace is an immutable value object."""
    with pytest.raises(dataclasses.FrozenInstanceError):
        CARTS.env = "dev"  # type: ignore[misc]
    assert KeySpace("prod", "shop", "cart") == CARTS
    assert hash(KeySpace("prod", "shop", "cart")) == hash(CARTS)


_SEGMENT = st.text(
    st.characters(exclude_categories=["Cs", "Cc", "Cf", "Zs", "Zl", "Zp", "Co", "Cn"]),
    min_size=1,
    max_size=8,
).filter(lambda s: not set(s) & set(":{}") and s.isprintable() and not any(c.isspace() for c in s))
_COLONED = st.lists(_SEGMENT, min_size=1, max_size=3).map(":".join)


@given(
    env=_SEGMENT,
    service=_SEGMENT,
    module=_SEGMENT,
    version=st.none() | st.integers(1, 10**6),
    affinity=_COLONED | st.integers(),
    suffix=_COLONED,
)
def test_parse_inverts_key(
    env: str, service: str, module: str, version: int | None, affinity: str | int, suffix: str
) -> None:
    """parse(space.key(a, s)) gives back the key space, the affinity and the suffix."""
    space = KeySpace(env, service, module, version)
    key = space.key(affinity, suffix)
    name = parse(key)
    assert name.keyspace == space
    assert (name.affinity, name.suffix) == (str(affinity), suffix)
    assert name.key == key
    assert keyslot(key) == keyslot(space.group(affinity)) == keyslot(str(affinity))


@given(affinity=st.integers(0, 10**12), suffix=st.sampled_from(["items", "total", "meta:v1"]))
def test_conforming_keys_pass_lint(affinity: int, suffix: str) -> None:
    """Keys built by KeySpace with id affinities break no lint rule."""
    assert lint([CARTS.key(affinity, suffix), CARTS_V2.key(affinity, suffix)]) == []
