"""The typed layer: pydantic models per part of a group."""

from __future__ import annotations

import zlib
from pathlib import Path
from typing import TypedDict, TypeVar

import pytest
from mypy import api as mypy_api
from pydantic import BaseModel

from stampede import (
    ConfigurationError,
    InvalidKeyError,
    JsonCodec,
    ModelValidationError,
    PayloadCodec,
    RetryPolicy,
    Stampede,
    TornReadError,
    TypedGroup,
)

M = TypeVar("M", bound=BaseModel)


class Profile(BaseModel):
    name: str
    age: int


class Settings(BaseModel):
    theme: str = "light"


USERS = TypedGroup({"profile": Profile, "settings": Settings})


async def test_models_round_trip(st: Stampede) -> None:
    """Models written as parts of a group read back as the same models."""
    await USERS.write(
        st, "user:{9}", profile=Profile(name="Ada", age=36), settings={"theme": "dark"}
    )
    got = await USERS.read(st, "user:{9}")
    assert got.consistent
    assert got["profile"] == Profile(name="Ada", age=36)
    assert got["settings"] == Settings(theme="dark")


async def test_invalid_stored_part_names_its_key(st: Stampede) -> None:
    """A stored part that fails validation raises ModelValidationError naming the key."""
    await st.write("user:{9}", {"user:{9}:profile": b'{"name": "Ada"}', "user:{9}:settings": b"{}"})
    with pytest.raises(ModelValidationError) as info:
        await USERS.read(st, "user:{9}")
    assert info.value.key == b"user:{9}:profile"
    assert "Profile" in str(info.value) and "Ada" not in str(info.value)


class Compressed:
    """A PayloadCodec of its own: the JSON codec's bytes, zlib-compressed."""

    def encode(self, value: BaseModel) -> bytes:
        return zlib.compress(JsonCodec().encode(value))

    def decode(self, model: type[M], payload: bytes) -> M:
        return JsonCodec().decode(model, zlib.decompress(payload))


async def test_a_payload_codec_of_ones_own(st: Stampede) -> None:
    """A TypedGroup stores its parts with the codec it is given, and reads them back."""
    assert isinstance(Compressed(), PayloadCodec)
    packed = TypedGroup({"profile": Profile, "settings": Settings}, codec=Compressed())
    await packed.write(st, "user:{10}", profile=Profile(name="Ada", age=36), settings=Settings())
    got = await packed.read(st, "user:{10}")
    assert got["profile"] == Profile(name="Ada", age=36)
    raw = await st.read("user:{10}", ["user:{10}:profile"])
    stored = raw.values["user:{10}:profile"]
    assert stored is not None and zlib.decompress(stored).startswith(b"{")
    with pytest.raises(ConfigurationError, match="PayloadCodec"):
        TypedGroup({"profile": Profile}, codec=object())  # type: ignore[call-overload]


async def test_not_found_group_has_no_parts(st: Stampede) -> None:
    """A missing group reads as parts of None."""
    got = await USERS.read(st, "user:{404}")
    assert got.parts == {"profile": None, "settings": None}


async def test_write_must_name_every_part(st: Stampede) -> None:
    """A typed write with a missing or unknown part is refused before sending."""
    with pytest.raises(ConfigurationError, match="missing"):
        await USERS.write(st, "user:{9}", profile=Profile(name="A", age=1))
    with pytest.raises(ModelValidationError):
        await USERS.write(st, "user:{9}", profile={"name": "A"}, settings={})


class Prefs(BaseModel):
    language: str = "en"


class UserParts(TypedDict):
    profile: Profile
    settings: Settings


TYPED = TypedGroup(UserParts)


async def test_typed_dict_parts_are_typed_and_take_per_call_options(st: Stampede) -> None:
    """A TypedDict of models types the parts for mypy; mode and ttl go per call."""
    receipt = await TYPED.write(
        st,
        "user:{11}",
        {"profile": Profile(name="Ada", age=36), "settings": Settings()},
        mode="commit",
        ttl=60,
    )
    got = await TYPED.read(st, "user:{11}", mode="commit")
    profile: Profile = got.parts["profile"]  # mypy --strict checks this assignment
    assert profile.name == "Ada" and got.consistent and got.result.token == receipt.token
    assert got["profile"].age == 36  # typed too, by stampede.mypy_plugin
    ttl = await st.topology.execute(b"user:{11}:profile", "PTTL", b"user:{11}:profile")
    assert 0 < int(ttl) <= 60_000


async def test_a_part_added_later_reads_with_its_default(st: Stampede) -> None:
    """Groups written before a part existed read whole, the part filled with its default."""
    await USERS.write(st, "user:{12}", profile=Profile(name="Bo", age=5), settings=Settings())
    grown = TypedGroup(
        {"profile": Profile, "settings": Settings, "prefs": Prefs}, defaults={"prefs": Prefs()}
    )
    got = await grown.read(st, "user:{12}", retry=RetryPolicy(attempts=2, deadline=30.0))
    assert got.consistent and got.defaulted == ("prefs",)
    assert got["prefs"] == Prefs() and got["profile"] == Profile(name="Bo", age=5)
    await grown.write(
        st,
        "user:{12}",
        profile=Profile(name="Bo", age=6),
        settings=Settings(),
        prefs=Prefs(language="fr"),
    )
    again = await grown.read(st, "user:{12}")
    assert again.defaulted == () and again["prefs"] == Prefs(language="fr")


async def test_validation_errors_name_the_failing_fields(st: Stampede) -> None:
    """ModelValidationError lists the fields that failed, never the stored values."""
    await st.write("user:{13}", {"user:{13}:profile": b'{"name": 7}', "user:{13}:settings": b"{}"})
    with pytest.raises(ModelValidationError) as info:
        await USERS.read(st, "user:{13}")
    assert info.value.fields == ["name", "age"]
    assert "at 'name', 'age'" in str(info.value) and "7" not in str(info.value)


async def test_typed_parts_in_a_read_atomic_transaction(st: Stampede) -> None:
    """Two users' typed parts change in one transaction and read back atomically."""
    alice, bob = "user:{alice}", "user:{bob}"
    async with st.transaction() as tx:
        USERS.set(tx, alice, profile=Profile(name="Alice", age=36), settings=Settings(theme="dark"))
        USERS.set(tx, bob, {"profile": Profile(name="Bob", age=41), "settings": Settings()})
    got = await USERS.read_atomic(st, [alice, bob, "user:{nobody}"])
    alice_parts, bob_parts = got[alice], got[bob]
    assert alice_parts is not None and alice_parts["profile"] == Profile(name="Alice", age=36)
    assert bob_parts is not None and bob_parts["settings"] == Settings()
    assert got["user:{nobody}"] is None
    with pytest.raises(ConfigurationError, match="exactly the parts"):
        async with st.transaction() as tx:
            USERS.set(tx, alice, profile=Profile(name="Alice", age=36))


def test_the_mypy_plugin_types_a_part_and_refuses_an_unknown_one(tmp_path: Path) -> None:
    """With stampede.mypy_plugin, mypy --strict knows got["profile"] is a Profile and
    reports a part the TypedDict does not have."""
    sample = tmp_path / "sample.py"
    sample.write_text(
        "from typing import TypedDict\n"
        "from pydantic import BaseModel\n"
        "from stampede import TypedRead\n"
        "class Profile(BaseModel):\n    name: str\n"
        "class Parts(TypedDict):\n    profile: Profile\n"
        "def f(got: TypedRead[Parts]) -> None:\n"
        "    reveal_type(got['profile'])\n"
        "    got['nickname']\n"
    )
    config = tmp_path / "mypy.ini"
    config.write_text("[mypy]\nstrict = True\nplugins = stampede.mypy_plugin\n")
    out, _, status = mypy_api.run(
        [str(sample), "--config-file", str(config), "--no-incremental", "--cache-dir=/dev/null"]
    )
    assert status == 1, out
    assert 'Revealed type is "sample.Profile"' in out
    assert 'typed group has no part "nickname"' in out


async def test_a_default_never_stands_in_for_a_part_the_commit_record_names(
    st: Stampede,
) -> None:
    """In commit mode, a defaulted part is filled in only for a committed write that
    did not cover it: a part the write's record names, missing (evicted, lost), or
    data the record does not vouch for, is a torn group, not one whole with a default."""
    grown = TypedGroup(
        {"profile": Profile, "settings": Settings, "prefs": Prefs}, defaults={"prefs": Prefs()}
    )
    retry = RetryPolicy(attempts=2, deadline=30.0)
    await grown.write(
        st,
        "user:{13}",
        {
            "profile": Profile(name="Cy", age=7),
            "settings": Settings(),
            "prefs": Prefs(language="fr"),
        },
        mode="commit",
    )
    await st.topology.execute(b"user:{13}:prefs", "DEL", b"user:{13}:prefs")  # evicted
    with pytest.raises(TornReadError):
        await grown.read(st, "user:{13}", mode="commit", retry=retry)
    # an old two-part group, then a write of its two parts the record never covered
    await USERS.write(
        st, "user:{14}", profile=Profile(name="Di", age=8), settings=Settings(), mode="commit"
    )
    await USERS.write(
        st, "user:{14}", profile=Profile(name="Di", age=9), settings=Settings(), mode="stamp"
    )
    with pytest.raises(TornReadError):
        await grown.read(st, "user:{14}", mode="commit", retry=retry)
    # a committed two-part group still reads whole with the default
    await USERS.write(
        st, "user:{15}", profile=Profile(name="Ed", age=1), settings=Settings(), mode="commit"
    )
    got = await grown.read(st, "user:{15}", mode="commit", retry=retry)
    assert got.consistent and got.defaulted == ("prefs",)


async def test_typed_read_atomic_refuses_one_group_name_for_a_list(st: Stampede) -> None:
    """`read_atomic(st, "user:{16}")` (one name, not a list) is refused, not read as one
    group per character of the name."""
    with pytest.raises(InvalidKeyError, match="list of group names"):
        await USERS.read_atomic(st, "user:{16}")
