"""Array replies: nested error replies get their kinds; plain ones are left as they are.

`_reply_errors.kinds_in` first scans the item types in C and returns a reply of ints, bytes
and nils at once (the guard's codes, an MGET's values); anything else takes the loop.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from stampede.topology._reply_errors import MovedError, NoScriptError, ReplyError
from stampede.topology._reply_errors import kinds_in as _kinds_in


def _slowly(reply: list[Any]) -> list[Any]:
    """The loop alone (what `_kinds_in` did for every reply)."""
    from stampede.topology._reply_errors import kind_of

    for i, item in enumerate(reply):
        if isinstance(item, ReplyError):
            reply[i] = kind_of(item)
        elif isinstance(item, list):
            _slowly(item)
    return reply


def _shape(reply: list[Any]) -> list[Any]:
    return [
        _shape(x) if isinstance(x, list) else (type(x), x.args) if isinstance(x, ReplyError) else x
        for x in reply
    ]


plain = st.one_of(st.integers(-10, 10), st.binary(max_size=4), st.none())
errors = st.sampled_from(["NOSCRIPT no script", "MOVED 1 h:1", "ERR bad", "WRONGTYPE x"]).map(
    ReplyError
)
replies = st.recursive(
    st.lists(st.one_of(plain, errors), max_size=6), lambda inner: st.lists(inner, max_size=3)
)


@settings(deadline=None)  # no timing: the machine may be busy
@given(replies)
def test_kinds_in_matches_the_loop(reply: list[Any]) -> None:
    import copy

    assert _shape(_kinds_in(copy.deepcopy(reply))) == _shape(_slowly(copy.deepcopy(reply)))


def test_a_plain_reply_is_returned_as_it_is_and_errors_get_their_kinds() -> None:
    codes = [1, 2, 0, -3, b"x", None]
    assert _kinds_in(codes) is codes and codes == [1, 2, 0, -3, b"x", None]
    mixed = _kinds_in([1, ReplyError("NOSCRIPT gone"), [ReplyError("MOVED 5 h:1")]])
    assert isinstance(mixed[1], NoScriptError)
    assert isinstance(mixed[2][0], MovedError)
