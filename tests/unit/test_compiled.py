"""The optional compiled build (`STAMPEDE_COMPILE=1`, hatch_build.py) and its fallback.

`make test` runs these on the pure modules, `make test-compiled` on a compiled wheel
with `STAMPEDE_EXPECT_COMPILED=1`: each run checks it loaded the build it means to
test, so a stray extension in src/ cannot shadow an edited `.py` unnoticed.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import os
import pickle
import shutil
import subprocess
import sys
from collections.abc import Callable
from importlib.machinery import EXTENSION_SUFFIXES
from pathlib import Path

import pytest

import stampede
from stampede import _compiled
from stampede.verdict import Mode, Observation, Reason, Status, Verdict, judge
from stampede.wire import Envelope, new_token

EXPECT_COMPILED = os.environ.get("STAMPEDE_EXPECT_COMPILED") == "1"


def test_the_modules_loaded_are_the_build_under_test() -> None:
    expected = "compiled" if EXPECT_COMPILED else "pure"
    assert _compiled.status() == dict.fromkeys(_compiled.MODULES, expected)
    for name in _compiled.MODULES:
        file = sys.modules[name].__file__ or ""
        if EXPECT_COMPILED:
            assert file.endswith(tuple(EXTENSION_SUFFIXES)), file
        else:
            assert file.endswith(".py"), file


def test_a_pure_install_adds_no_import_hook() -> None:
    hooks = [f for f in sys.meta_path if isinstance(f, _compiled.Fallback)]
    assert len(hooks) == (1 if EXPECT_COMPILED else 0)


def test_an_extension_that_cannot_load_falls_back_to_the_pure_modules(tmp_path: Path) -> None:
    """A damaged extension: a warning, then every compiled module from its .py."""
    package = Path(stampede.__file__).parent
    shutil.copytree(package, tmp_path / "stampede", ignore=shutil.ignore_patterns("__pycache__"))
    broken = tmp_path / "stampede" / "wire" / f"_envelope{EXTENSION_SUFFIXES[0]}"
    broken.write_bytes(b"not a shared object")
    code = (
        "import json, stampede.verdict as v, stampede.wire._envelope as e\n"
        "import stampede._compiled as c, stampede.topology._guard as g\n"
        "from stampede.wire import Envelope, new_token\n"
        "env = Envelope(5, new_token(), b'x')\n"
        "obs = v.Observation(b'g', (b'a',), (env.encode(),))\n"
        "assert v.judge(obs).envelope == env\n"
        "(r,) = g.requests_for([b'a'], [b'x'], [[0]], (), {'version': 5, 'token': 't'})\n"
        "assert g.split_codes([r], [1], 's') == [[1]]\n"
        "files = [e.__file__, v.__file__, g.__file__]\n"
        "print(json.dumps([files, c.status(), list(c.install().failed)]))"
    )
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60
    )
    assert done.returncode == 0, done.stderr
    files, status, failed = json.loads(done.stdout)
    assert files == [
        str(tmp_path / "stampede" / "wire" / "_envelope.py"),
        str(tmp_path / "stampede" / "verdict.py"),
        str(tmp_path / "stampede" / "topology" / "_guard.py"),
    ]
    assert status == dict.fromkeys(_compiled.MODULES, "pure")
    assert failed == ["stampede.wire._envelope"]
    assert "the compiled stampede.wire._envelope did not load" in done.stderr


def _samples() -> list[Envelope | Observation | Verdict]:
    env = Envelope(7, new_token(), b"payload")
    tomb = Envelope(8, new_token(), tombstone=True)
    obs = Observation(b"g", (b"a", b"b"), (env.encode(), None), Mode.COMMIT, b"rec")
    return [env, tomb, obs, judge(obs), Verdict(Status.TORN, Reason.UNSTAMPED, env)]


@pytest.mark.parametrize(
    "copier", [copy.copy, copy.deepcopy, lambda o: pickle.loads(pickle.dumps(o))]
)
def test_envelopes_observations_and_verdicts_copy_and_pickle(
    copier: Callable[[object], object],
) -> None:
    """Both builds: a copy equals its original (a compiled frozen dataclass restores its
    fields through the constructor, `__reduce__`, not one by one)."""
    for sample in _samples():
        twin = copier(sample)
        assert type(twin) is type(sample)
        assert twin == sample
        if isinstance(sample, Observation):  # unhashable: it holds a dict (`errors`)
            assert isinstance(twin, Observation) and twin.envelopes == sample.envelopes
        else:
            assert hash(twin) == hash(sample)


def test_envelopes_observations_and_verdicts_are_frozen_dataclasses() -> None:
    for sample in _samples():
        assert dataclasses.is_dataclass(sample)
        name = dataclasses.fields(sample)[0].name
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(sample, name, 1)
        assert dataclasses.replace(sample) == sample
