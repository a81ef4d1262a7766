"""The typed layer: pydantic models per part of a group."""

from __future__ import annotations

import pytest
from pydantic import BaseModel

from stampede import ConfigurationError, ModelValidationError, Stampede, TypedGroup


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
