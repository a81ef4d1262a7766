"""The keyspace commands (`stampede keyslot`, `lint`, `slots`) through click's CliRunner."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from stampede.cli import main
from stampede.keys import RULES, SlotMap, keyslot


def run(*args: str, stdin: bytes | None = None) -> Result:
    """Invoke `stampede ARGS...` in-process."""
    return CliRunner().invoke(main, list(args), input=stdin)


def assert_usage_error(result: Result, *fragments: str) -> None:
    """Exit 2 with click's usage message containing every fragment, and no traceback."""
    assert result.exit_code == 2, result.output
    assert isinstance(result.exception, SystemExit)
    assert "Traceback" not in result.output
    assert "Error:" in result.output
    for fragment in fragments:
        assert fragment in result.output


@pytest.fixture
def key_file(tmp_path: Path) -> Path:
    """A file of keys, one per line, with a CRLF line and a non-UTF-8 key."""
    path = tmp_path / "keys.txt"
    path.write_bytes(b"user:{42}:cart\r\nuser:{}:x\napp:{config}:flags\n\xff\xfe:{7}:x\n")
    return path


def test_group_lists_the_commands_and_version() -> None:
    """`stampede --help` lists every command README.md names (keyslot, lint, slots,
    scan, worker, queue, demo); --version prints the version."""
    result = run("--help")
    assert result.exit_code == 0
    listed = {
        line.split()[0] for line in result.output.split("Commands:")[1].splitlines() if line.strip()
    }
    assert listed == {"keyslot", "lint", "slots", "scan", "worker", "queue", "demo"}, listed
    version = run("--version")
    assert version.exit_code == 0 and version.output.startswith("stampede, version ")


# -- keyslot -----------------------------------------------------------------------------


def test_keyslot_prints_one_aligned_line_per_key() -> None:
    """Each key gets a line with its slot, shard (with --shards) and hashed part."""
    result = run("keyslot", "user:{42}:cart", "123456789", "--shards", "3")
    assert result.exit_code == 0
    assert result.output.splitlines() == [
        "user:{42}:cart  slot=8000   shard=1  hashed=42",
        "123456789       slot=12739  shard=2  hashed=123456789",
    ]
    plain = run("keyslot", "foo{}{bar}")
    assert plain.output == f"foo{{}}{{bar}}  slot={keyslot('foo{}{bar}')}  hashed=foo{{}}{{bar}}\n"


def test_keyslot_json() -> None:
    """--json gives one object per key; shard only with --shards."""
    result = run("keyslot", "--json", "-n", "2", "a{b}")
    assert result.exit_code == 0
    assert json.loads(result.output) == [
        {
            "key": "a{b}",
            "slot": keyslot("b"),
            "hashed": "b",
            "shard": SlotMap.even(2).shard_of(keyslot("b")),
        }
    ]
    assert "shard" not in json.loads(run("keyslot", "--json", "a").output)[0]


def test_keyslot_takes_the_bytes_the_shell_passed() -> None:
    """A non-UTF-8 argument is hashed as its raw bytes and shown escaped."""
    result = run("keyslot", "\udcff{\udcfe}")
    assert result.exit_code == 0
    slot = keyslot(b"\xfe")
    assert result.output == f"\\xff{{\\xfe}}  slot={slot}  hashed=\\xfe\n"


def test_keyslot_with_pattern() -> None:
    """--pattern hashes the named group; keys it does not match use hash tags."""
    result = run("keyslot", "--pattern", r"order:(?<tag>\d+)", "order:42:x", "u:{7}")
    assert result.exit_code == 0
    assert result.output.splitlines() == [
        f"order:42:x  slot={keyslot('42')}  hashed=42",
        f"u:{{7}}       slot={keyslot('7')}  hashed=7",
    ]


@pytest.mark.parametrize(
    ("args", "fragments"),
    [
        (["keyslot", ""], ["key #1 is empty"]),
        (["keyslot", "a", ""], ["key #2 is empty"]),
        (["keyslot"], ["Missing argument 'KEY...'"]),
        (["keyslot", "a", "--shards", "0"], ["'--shards'", "0 is not in the range 1<=x<=16384"]),
        (["keyslot", "a", "--shards", "x"], ["'x' is not a valid integer"]),
        (["keyslot", "a", "--pattern", "("], ["'--pattern'", "not a valid regular expression"]),
        (["keyslot", "a", "--pattern", "abc"], ["no group named 'tag'"]),
    ],
)
def test_keyslot_bad_input(args: list[str], fragments: list[str]) -> None:
    """Empty keys, bad shard counts and bad patterns are usage errors, not tracebacks."""
    assert_usage_error(run(*args), *fragments)


# -- lint --------------------------------------------------------------------------------


def test_lint_clean_exits_zero() -> None:
    """Keys that break no rule: a one-line summary and exit 0."""
    result = run("lint", "shop:cart:{42}:items", "shop:cart:{43}:items")
    assert result.exit_code == 0
    assert result.output == "2 keys checked: no findings\n"


def test_lint_findings_table_exits_one(key_file: Path) -> None:
    """Broken rules print a table and a summary, and exit 1."""
    result = run("lint", "--file", str(key_file))
    assert result.exit_code == 1
    assert result.exception is None or isinstance(result.exception, SystemExit)
    for code in ("SK001", "SK002"):
        assert code in result.output
    assert "\\xff\\xfe:{7}:x" not in result.output  # that key is fine
    assert "2 findings in 2 of 4 keys (SK001 x1, SK002 x1)" in result.output


def test_lint_json(key_file: Path) -> None:
    """--json prints the key count and every finding with code, name, key, message and fix."""
    result = run("lint", "--json", "-f", str(key_file))
    assert result.exit_code == 1
    data = json.loads(result.output)
    assert data["keys"] == 4
    assert [f["code"] for f in data["findings"]] == ["SK001", "SK002"]
    assert data["findings"][0]["key"] == "user:{}:x"
    assert set(data["findings"][0]) == {"code", "name", "key", "message", "fix"}
    clean = run("lint", "--json", "a:b")
    assert clean.exit_code == 0 and json.loads(clean.output) == {"keys": 1, "findings": []}


def test_lint_reads_stdin_as_bytes() -> None:
    """`--file -` reads stdin: CRLF is stripped, non-UTF-8 keys are linted and shown escaped."""
    result = run("lint", "--json", "-f", "-", stdin=b"\xff:{}:x\r\nok:{1}:x\n")
    assert result.exit_code == 1
    data = json.loads(result.output)
    assert data["keys"] == 2
    assert [(f["code"], f["key"]) for f in data["findings"]] == [("SK001", "\\xff:{}:x")]


def test_lint_limits_the_table() -> None:
    """--limit caps the table rows and says how many more there are; exit status is unchanged."""
    keys = [f"app:{{config}}:{i}" for i in range(5)]
    result = run("lint", "--limit", "2", *keys)
    assert result.exit_code == 1
    assert "app:{config}:1" in result.output and "app:{config}:2" not in result.output
    assert "... and 3 more (--limit 0 or --json shows all)" in result.output
    assert "5 findings in 5 of 5 keys (SK002 x5)" in result.output
    assert "app:{config}:4" in run("lint", "--limit", "0", *keys).output


def test_lint_ignore_and_rules() -> None:
    """--ignore drops a rule (case-insensitive); --rules lists every rule and exits 0."""
    assert run("lint", "sessioncount").exit_code == 1
    assert run("lint", "--ignore", "sk007", "sessioncount").exit_code == 0
    listing = run("lint", "--rules")
    assert listing.exit_code == 0
    for code in RULES:
        assert code in listing.output
    as_json = json.loads(run("lint", "--rules", "--json").output)
    assert [r["code"] for r in as_json] == list(RULES)


@pytest.mark.parametrize(
    ("args", "stdin", "fragments"),
    [
        (["lint"], None, ["no keys: give them as arguments, or --file"]),
        (["lint", ""], None, ["key #1 is empty"]),
        (["lint", "a", "-f", "-"], b"b\n", ["as arguments or with --file, not both"]),
        (["lint", "-f", "-"], b"a:{1}\n\nb\n", ["stdin, line 2: empty key"]),
        (["lint", "-f", "/nonexistent/keys.txt"], None, ["'--file'", "No such file or directory"]),
        (["lint", "--ignore", "SK999", "a"], None, ["'--ignore'", "unknown rule SK999"]),
        (["lint", "--pattern", "[", "a"], None, ["not a valid regular expression"]),
    ],
)
def test_lint_bad_input(args: list[str], stdin: bytes | None, fragments: list[str]) -> None:
    """Missing, empty or unreadable input and bad options are usage errors, not tracebacks."""
    assert_usage_error(run(*args, stdin=stdin), *fragments)


def test_lint_unreadable_file(tmp_path: Path) -> None:
    """A directory given as --file is a clear usage error."""
    assert_usage_error(run("lint", "-f", str(tmp_path)), "'--file'")


def test_lint_empty_file_is_clean(tmp_path: Path) -> None:
    """An empty file (an empty database's SCAN) has no findings."""
    empty = tmp_path / "empty.txt"
    empty.write_bytes(b"")
    result = run("lint", "-f", str(empty))
    assert result.exit_code == 0 and "0 keys checked: no findings" in result.output


# -- slots -------------------------------------------------------------------------------


def _spread_file(tmp_path: Path) -> Path:
    path = tmp_path / "spread.txt"
    lines = [f"user:{{hot}}:{i}" for i in range(6)] + [f"k:{i}" for i in range(6)]
    path.write_bytes("\n".join(lines).encode() + b"\n")
    return path


def test_slots_tables(tmp_path: Path) -> None:
    """slots prints the totals and skew, a per-shard table and the hottest slots."""
    result = run("slots", "-f", str(_spread_file(tmp_path)), "--shards", "3", "--top", "2")
    assert result.exit_code == 0, result.output
    out = result.output
    assert "12 keys on 3 shards, 6 hashed by a tag" in out
    assert "skew " in out and "empty shards:" in out
    assert "Shards" in out and "10923-16383" in out
    assert "Hottest slots" in out and str(keyslot("hot")) in out
    assert "user:{hot}:0" in out


def test_slots_json_matches_the_analysis(tmp_path: Path) -> None:
    """--json has totals, per-shard keys and slot ranges, skew and the top slots."""
    result = run("slots", "--json", "-f", str(_spread_file(tmp_path)), "-n", "2", "-k", "1")
    assert result.exit_code == 0
    data = json.loads(result.output)
    assert data["total"] == 12 and data["tagged"] == 6
    assert sum(s["keys"] for s in data["shards"]) == 12
    assert [s["slots"] for s in data["shards"]] == [[[0, 8191]], [[8192, 16383]]]
    assert data["hottest_slots"] == [
        {
            "slot": keyslot("hot"),
            "keys": 6,
            "shard": SlotMap.even(2).shard_of(keyslot("hot")),
            "example": "user:{hot}:0",
        }
    ]
    assert data["skew"] >= 1.0


def test_slots_from_arguments_and_stdin() -> None:
    """Keys may come as arguments or on stdin; non-UTF-8 examples are escaped."""
    result = run("slots", "--json", "a", "b")
    assert result.exit_code == 0 and json.loads(result.output)["total"] == 2
    piped = run("slots", "--json", "-f", "-", "--top", "1", stdin=b"\xff{x}\n")
    assert json.loads(piped.output)["hottest_slots"][0]["example"] == "\\xff{x}"
    empty = run("slots", "-f", "-", stdin=b"")
    assert empty.exit_code == 0 and "0 keys on 3 shards" in empty.output


@pytest.mark.parametrize(
    ("args", "fragments"),
    [
        (["slots", "a", "--shards", "0"], ["0 is not in the range"]),
        (["slots", "a", "--top", "-1"], ["'--top'", "-1 is not in the range x>=0"]),
        (["slots"], ["no keys"]),
        (["slots", "-f", "/nonexistent"], ["'--file'"]),
        (["slots", "a", "--pattern", "x"], ["no group named 'tag'"]),
    ],
)
def test_slots_bad_input(args: list[str], fragments: list[str]) -> None:
    """Bad shard counts, top values, files and patterns are usage errors, not tracebacks."""
    assert_usage_error(run(*args), *fragments)


def test_slots_and_demo_stay_local_under_a_worker_s_environment() -> None:
    """STAMPEDE_SENTINELS/SERVICES configure the commands that take --url from the
    environment (worker, scan, queue). `slots` and `demo` read neither their --url nor
    Sentinel from it: with those variables exported, `slots KEY` failed ("give keys or
    --url, not both") and `demo` ran its torn writes against the Sentinel's primaries
    instead of servers of its own."""
    env = {"STAMPEDE_SENTINELS": "redis://127.0.0.1:1", "STAMPEDE_SERVICES": "shard-a"}
    result = CliRunner().invoke(main, ["slots", "user:{1}:a", "--json"], env=env)
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["total"] == 1
    demo = main.commands["demo"]
    with CliRunner().isolation(env=env):
        params = demo.make_context("demo", []).params
    assert params["sentinels"] == () and params["services"] == ()
    assert "STAMPEDE_SENTINELS" in CliRunner().invoke(main, ["worker", "--help"]).output
