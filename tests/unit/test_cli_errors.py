"""The command line words the library's advice in flags (issue 22, item 10), and the
troubleshooting page quotes messages the code really prints."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import click
import pytest

from stampede.cli._errors import ADVICE, for_cli

SRC = Path(__file__).parents[2] / "src" / "stampede"
DOCS = Path(__file__).parents[2] / "docs"
PYTHON_ADVICE = (
    "cluster=True",
    "ConnectOptions",
    "check_identity=",
    "sentinels=",
    "services=",
    "connect()",
    "hash_pattern",
    "slot_map",
)
CONNECTING = ["_checks.py", "_shards.py", "_cluster.py", "_sentinel.py"]
"""The topology modules whose `SetupError`s a connecting command can meet."""


def pieces(node: ast.AST) -> Iterator[str]:
    """The literal text of every string in `node` (an f-string's literal parts)."""
    for sub in ast.walk(node):
        if isinstance(sub, ast.Constant) and isinstance(sub.value, str):
            yield sub.value


def module(path: Path) -> ast.Module:
    return ast.parse(path.read_text(), str(path))


def setup_messages() -> list[str]:
    """The literal parts of every message a command can meet when it connects:
    `SetupError(...)` calls, the identity checks' messages and their fix."""
    found: list[str] = []
    for name in CONNECTING:
        tree = module(SRC / "topology" / name)
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "SetupError":
                found.extend(pieces(node))
            elif name == "_checks.py" and isinstance(node, ast.Return | ast.Assign):
                if isinstance(node, ast.Assign) and not any(
                    getattr(t, "id", "") == "_FIX" for t in node.targets
                ):
                    continue
                if node.value is not None:
                    found.extend(pieces(node.value))
    return found


def all_literals() -> set[str]:
    """Every string literal of the package (docstrings included) and its CLI wording."""
    texts: set[str] = set()
    for path in SRC.rglob("*.py"):
        texts.update(pieces(module(path)))
    return texts | {for_cli(t) for t in texts}


@pytest.mark.parametrize(("python", "flags"), ADVICE)
def test_each_translation_matches_a_library_message(python: str, flags: str) -> None:
    """A reworded library message would slip past its translation: each left side of
    `ADVICE` is still the text of a message in the source."""
    assert any(python in text for text in all_literals()), python
    assert not any(word in flags for word in PYTHON_ADVICE), flags


def test_no_setup_refusal_reaches_the_cli_in_python_terms() -> None:
    """Every refusal `open()` can give a connecting command reads in flags once
    translated: no `cluster=True`, `ConnectOptions(...)`, `sentinels=`..."""
    messages = setup_messages()
    assert len(messages) > 15
    for text in messages:
        shown = for_cli(text)
        assert not any(word in shown for word in PYTHON_ADVICE), (text, shown)


def quoted_messages() -> list[str]:
    """The lines of the ```text blocks of docs/troubleshooting.md (commands excluded)."""
    page = (DOCS / "troubleshooting.md").read_text()
    lines: list[str] = []
    for block in re.findall(r"```text\n(.*?)```", page, flags=re.S):
        lines += [line for line in block.splitlines() if line and not line.startswith("$ ")]
    return lines


def test_troubleshooting_quotes_the_real_messages() -> None:
    """Each message the troubleshooting page quotes is text the code prints: every
    sentence part between the elisions (`...`) is in a string literal of the package
    (or its CLI wording)."""
    texts = all_literals()
    quoted = quoted_messages()
    assert len(quoted) >= 10
    for line in quoted:  # `error: ` is how the command line prefixes a failure
        for part in re.split(r"\.\.\.|\. ", line.removeprefix("error: ")):
            fragment = part.strip(" :;,.()'\"")  # a sentence may join two messages
            if len(fragment) >= 6:
                assert any(fragment in text for text in texts), (fragment, line)


def float_options() -> list[tuple[list[str], str]]:
    """(command path, flag) of every option of every command that takes a float."""
    import click

    from stampede.cli import main

    found: list[tuple[list[str], str]] = []

    def walk(command: click.Command, path: list[str]) -> None:
        if isinstance(command, click.Group):
            for name, sub in command.commands.items():
                walk(sub, [*path, name])
        found.extend(
            (path, param.opts[0])
            for param in command.params
            if isinstance(param, click.Option) and isinstance(param.type, click.FloatRange)
        )

    walk(main, [])
    return found


@pytest.mark.parametrize(("path", "flag"), float_options())
@pytest.mark.parametrize("value", ["nan", "inf"])
def test_no_float_option_takes_nan_or_inf(path: list[str], flag: str, value: str) -> None:
    """A NaN passed click's range checks (every comparison with it is false): `scan
    --socket-timeout nan` printed a traceback, `demo --duration nan` never ended,
    `worker --retry-delay nan` scheduled retries at NaN. Each is a usage error now."""
    from click.testing import CliRunner

    from stampede.cli import main

    result = CliRunner().invoke(main, [*path, flag, value])
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    refused = [f"'{value}' is not a finite number", f"{value} is not in the range"]
    assert any(text in result.output for text in refused), result.output


def test_the_float_options_are_found() -> None:
    """The walk above sees the commands' float options (timeouts, delays, the demo's)."""
    flags = {flag for _, flag in float_options()}
    assert {"--socket-timeout", "--retry-delay", "--duration", "--fault-rate"} <= flags


def connecting_commands() -> Iterator[tuple[str, click.Command]]:
    """Every command of `stampede` that takes --url, by its full name."""
    from stampede.cli import main

    def walk(prefix: str, command: click.Command) -> Iterator[tuple[str, click.Command]]:
        if isinstance(command, click.Group):
            for name, sub in command.commands.items():
                yield from walk(f"{prefix} {name}", sub)
        elif any(param.name == "urls" for param in command.params):
            yield prefix, command

    yield from walk("stampede", main)


@pytest.mark.parametrize(("name", "command"), list(connecting_commands()))
def test_advice_names_only_flags_the_command_has(name: str, command: click.Command) -> None:
    """A command's error advice never names a flag it lacks (`stampede slots` said
    `raise --socket-timeout` without having it, the demo `--no-check-identity`)."""
    flags = {opt for param in command.params for opt in (*param.opts, *param.secondary_opts)}
    with click.Context(command, info_name=name):
        for python, _ in ADVICE:
            named = set(re.findall(r"--[a-z][a-z-]*", for_cli(f"x: {python}.")))
            assert named <= flags, (name, python, named - flags)
