"""URLs that do not parse are usage errors naming what is wrong, never a traceback:
`redis://[::1` (an IPv6 bracket left open) raised urllib's ValueError."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

import stampede
from stampede import ConfigurationError
from stampede.cli import main

OPEN_BRACKET = "redis://[::1"


@pytest.mark.parametrize(
    "args",
    [
        ["queue", "stats", "--url", OPEN_BRACKET],
        ["scan", "--group-pattern", r"(?P<group>u:\d+):.*", "--url", OPEN_BRACKET],
        ["slots", "--url", OPEN_BRACKET],
        ["queue", "stats", "--sentinel", OPEN_BRACKET, "--service", "a"],
        [
            "queue",
            "stats",
            "--sentinel",
            "redis://s:1",
            "--service",
            "a",
            "--data-url",
            "redis://:pw@[::1",
        ],
    ],
    ids=["queue", "scan", "slots", "sentinel", "data-url"],
)
def test_a_url_that_does_not_parse_is_a_usage_error(args: list[str]) -> None:
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2, (result.output, result.exception)
    assert "bad Redis URL" in result.output or "names a host" in result.output, result.output
    assert "pw" not in result.output


def test_connect_refuses_it_with_a_configuration_error() -> None:
    with pytest.raises(ConfigurationError, match="bad Redis URL: Invalid IPv6 URL"):
        stampede.connect([OPEN_BRACKET])


NOT_UTF8_HOST = "redis://\udcff:6379"  # bytes the shell passed that are not UTF-8
NOT_UTF8_PASSWORD = "redis://:\udcff@127.0.0.1:1"


@pytest.mark.parametrize(
    "args",
    [
        ["queue", "stats", "--url", NOT_UTF8_HOST],
        ["queue", "stats", "--url", NOT_UTF8_PASSWORD],
        ["slots", "--url", NOT_UTF8_HOST],
        ["queue", "stats", "--sentinel", NOT_UTF8_HOST, "--service", "a"],
        [
            "queue",
            "stats",
            "--sentinel",
            "redis://s:1",
            "--service",
            "a",
            "--data-url",
            "redis://:\udcff@",
        ],
    ],
    ids=["host", "password", "slots", "sentinel", "data-url"],
)
def test_a_url_that_is_not_utf8_is_a_usage_error(args: list[str]) -> None:
    """A host that is not UTF-8 raised UnicodeEncodeError from the socket layer (a
    traceback); a password, exit 1 with advice for Python callers ("pass its raw
    bytes"). Both are usage errors before anything is sent now."""
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2, (result.output, result.exception)
    assert "bad Redis URL: it is not UTF-8 text" in result.output, result.output


def test_urls_from_the_environment_with_sentinel_say_where_they_come_from() -> None:
    """$STAMPEDE_URLS set in a worker's shell and `--sentinel` on the command line was
    refused with "give --sentinel and --service, or --url, not both", naming a flag
    the user had not given. The error names the variable now."""
    args = ["queue", "stats", "--sentinel", "redis://s:1", "--service", "a"]
    result = CliRunner().invoke(main, args, env={"STAMPEDE_URLS": "redis://127.0.0.1:1"})
    assert result.exit_code == 2, result.output
    assert "--url is set by $STAMPEDE_URLS: unset it to use --sentinel" in result.output
    given = CliRunner().invoke(main, [*args, "--url", "redis://127.0.0.1:1"])
    assert given.exit_code == 2 and "STAMPEDE_URLS" not in given.output, given.output
