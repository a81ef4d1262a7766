"""`stampede scan` refuses a group pattern whose named group can match the empty
string: with `(?P<group>)` every key named no group and was ignored, so the scan
reported nothing torn and exited 0 (a cron job that always passes)."""

from __future__ import annotations

import re

import pytest
from click.testing import CliRunner

from stampede.cli import main
from stampede.cli._regex import can_match_empty, group_source

NOWHERE = ["--url", "redis://127.0.0.1:1"]  # never reached: refused before connecting


@pytest.mark.parametrize(
    ("pattern", "flag"),
    [
        ("(?P<group>)", "--group-pattern"),
        (r"(?P<group>\w*):.*", "--group-pattern"),
        ("(?P<group>a|)b", "--group-pattern"),
        ("(?P<group>[)]*)x", "--group-pattern"),
        ("(?x) (?P<group> a* ) # )", "--group-pattern"),
        ("(?P<group>)", "--pattern"),  # the deprecated name is the flag named
    ],
)
def test_a_group_that_can_be_empty_is_a_usage_error(pattern: str, flag: str) -> None:
    result = CliRunner().invoke(main, ["scan", flag, pattern, *NOWHERE])
    assert result.exit_code == 2, result.output
    assert f"Invalid value for '{flag}'" in result.output, result.output
    assert "can match an empty string" in result.output, result.output
    assert "Traceback" not in result.output


@pytest.mark.parametrize(
    ("pattern", "empty"),
    [
        (r"(?P<group>user:\d+):.*", False),
        (r"(?P<group>user:\{\d+\}):.*", False),
        ("(?P<group>(?:a|b)+)", False),
        (r"(?P<group>\(x\))", False),
        ("(?:(?P<group>a+)|b)", False),  # unset, not empty, on the other branch
        ("(?P<group>[]]*)", True),
        ("(?P<group>(?#no ( here)a?)", True),
        ("(?P<group>(a)?)", True),
        ("(?P<group>x*)(?P=group)", True),
        (r"(?P<other>a)(?P<group>(?P=other)?)", False),  # cannot be judged alone
    ],
)
def test_can_match_empty(pattern: str, empty: bool) -> None:
    assert can_match_empty(re.compile(pattern.encode()), "group") is empty


def test_group_source_finds_the_closing_parenthesis() -> None:
    assert group_source(r"a(?P<group>b(c)\)[)])d", "group") == r"b(c)\)[)]"
    assert group_source("(?P<tag>x)", "group") is None
