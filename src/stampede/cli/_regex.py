"""What a regex's named group can match: `scan --group-pattern '(?P<group>)'` names
no group for any key (each key is then ignored, and the scan reports nothing torn,
exit 0: a cron job that always passes). A group that can match the empty string
is refused before anything is sent."""

from __future__ import annotations

import re

__all__ = ["can_match_empty", "group_source"]


def _class_end(text: str, i: int) -> int:
    """The index just past the character class that opens at `text[i]` ('[')."""
    i += 1
    if i < len(text) and text[i] == "^":
        i += 1
    if i < len(text) and text[i] == "]":  # a leading ']' is a literal
        i += 1
    while i < len(text) and text[i] != "]":
        i += 2 if text[i] == "\\" else 1
    return i + 1


def group_source(pattern: str, name: str, *, verbose: bool = False) -> str | None:
    """The source between `(?P<name>` and its closing parenthesis in `pattern`, or None
    when the group cannot be found that way."""
    opening = f"(?P<{name}>"
    depth, start, opened, i = 0, -1, 0, 0
    while i < len(pattern):
        char = pattern[i]
        if char == "\\":
            i += 2
            continue
        if char == "[":
            i = _class_end(pattern, i)
            continue
        if verbose and char == "#":  # a comment, to the end of the line
            end = pattern.find("\n", i)
            i = len(pattern) if end < 0 else end + 1
            continue
        if char == "(":
            if pattern.startswith("(?#", i):  # an inline comment: no nesting in it
                end = pattern.find(")", i)
                i = len(pattern) if end < 0 else end + 1
                continue
            depth += 1
            if start < 0 and pattern.startswith(opening, i):
                start, opened = i + len(opening), depth
                i = start
                continue
        elif char == ")":
            if start >= 0 and depth == opened:
                return pattern[start:i]
            depth -= 1
        i += 1
    return None


def can_match_empty(regex: re.Pattern[bytes], name: str) -> bool:
    """Whether the named group `name` of `regex` can match the empty string (False
    when its source cannot be judged alone: a back reference to another group)."""
    source = regex.pattern.decode("latin-1")
    found = group_source(source, name, verbose=bool(regex.flags & re.VERBOSE))
    if found is None:
        return False
    try:
        alone = re.compile(found.encode("latin-1"), regex.flags)
    except (re.error, RecursionError, OverflowError):
        return False
    return alone.fullmatch(b"") is not None
