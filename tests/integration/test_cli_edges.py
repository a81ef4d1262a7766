"""The command line at its edges: output closed by its reader (`| head -1`), signals
while it loads or stops, and flags that make no sense."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from stampede.repair import RepairQueue
from stampede.testing import LocalPrimaries

from ..support import FAST, child_env, eventually, open_stampede, run_cli, start_cli
from .test_worker import events, plant

GROUPS = r"(?P<group>user:\d+):.*"


async def _unstamped(primaries: LocalPrimaries, groups: int) -> None:
    """`groups` groups of one plain (unstamped) key each: torn, to `scan`."""
    async with open_stampede(primaries, "primaries", connection=FAST) as st:
        for n in range(groups):
            key = f"user:{n}:a".encode()
            await st.topology.execute(key, "SET", key, b"plain")


def _run_into_closed_pipe(*args: str) -> tuple[int, str]:
    """Run the command with stdout a pipe whose reader has already gone (as when
    `head -1` has read its line): every write to it fails."""
    read, write = os.pipe()
    os.close(read)
    try:
        result = run_cli(*args, stdout=write)
    finally:
        os.close(write)
    return result.returncode, result.stderr.decode()


@pytest.mark.parametrize(
    "args",
    [
        ["scan", "--group-pattern", GROUPS],
        ["scan", "--group-pattern", GROUPS, "--json"],
        ["scan", "--group-pattern", r"(?P<group>order:\d+):.*"],  # none torn: else exit 0
        ["queue", "stats"],
        ["queue", "dead", "--json"],
        ["slots"],
        ["keyslot", "a", "b"],
        ["lint", "--rules"],
        ["lint", "user:1", "user:2"],  # findings: else exit 1
        ["--help"],
        ["scan", "--help"],
        ["--version"],
    ],
    ids=[
        "scan-torn",
        "scan-json",
        "scan-clean",
        "queue-stats",
        "queue-dead",
        "slots",
        "keyslot",
        "lint-rules",
        "lint-findings",
        "help",
        "scan-help",
        "version",
    ],
)
async def test_output_closed_by_its_reader_exits_141_quietly(
    stampede_primaries: LocalPrimaries, args: list[str]
) -> None:
    """`stampede scan ... | head -1` exited 1 when head closed the pipe: the status of
    "torn groups found", whatever the scan found. A closed output is 141 now (128 +
    SIGPIPE, as a shell reports it), with no traceback and no "Exception ignored"."""
    await _unstamped(stampede_primaries, 5)
    connecting = args[0] in ("scan", "queue", "slots") and "--help" not in args
    urls = [a for url in stampede_primaries.urls for a in ("--url", url)] if connecting else []
    status, err = await asyncio.to_thread(_run_into_closed_pipe, *args, *urls)
    assert status == 141, err
    assert "Traceback" not in err and "Exception ignored" not in err, err
    assert "error" not in err.lower(), err


_HOLD_THE_IMPORT = """
import os, sys, time

class _Hold:
    def find_spec(self, name, path=None, target=None):
        if name == os.environ.get("HOLD_IMPORT"):
            sys.stderr.write("importing " + name + "\\n")
            sys.stderr.flush()
            time.sleep(600)  # until the test's SIGINT
        return None

sys.meta_path.insert(0, _Hold())
"""


def _entries() -> list[Any]:
    entries: list[Any] = [
        pytest.param(["-m", "stampede"], id="m-stampede"),
        pytest.param(["-m", "stampede.cli"], id="m-stampede-cli"),
    ]
    script = os.path.join(os.path.dirname(sys.executable), "stampede")
    if os.path.exists(script):  # the console script an installer wrote
        entries.append(pytest.param([script], id="script"))
    return entries


@pytest.mark.parametrize(
    "held",
    ["stampede.atomic", "stampede.cli._scan"],
    ids=["import-stampede", "import-cli"],
)
@pytest.mark.parametrize("entry", _entries())
async def test_ctrl_c_while_the_package_loads_exits_130_quietly(
    entry: list[str], held: str, tmp_path: Path
) -> None:
    """Ctrl-C during `import stampede` (before any code of the command line runs:
    the console script imports the package first) printed a traceback; so did one
    while `python -m stampede.cli` imported the command line. Both exit 130 with
    one line now. A `sitecustomize` holds the import of `held`, and says so."""
    (tmp_path / "sitecustomize.py").write_text(_HOLD_THE_IMPORT)
    env = child_env()
    env["HOLD_IMPORT"] = held
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), env["PYTHONPATH"]])
    proc = await asyncio.create_subprocess_exec(
        sys.executable, *entry, "keyslot", "a", stderr=asyncio.subprocess.PIPE, env=env
    )
    assert proc.stderr is not None
    first = await asyncio.wait_for(proc.stderr.readline(), timeout=120)
    assert first == f"importing {held}\n".encode(), first
    proc.send_signal(signal.SIGINT)
    _, err = await asyncio.wait_for(proc.communicate(), timeout=120)
    text = err.decode()
    assert proc.returncode == 130, text
    assert text.strip() == "stampede: interrupted", text


def test_a_program_importing_stampede_keeps_its_ctrl_c() -> None:
    """Only the command line starting takes SIGINT while it loads: a program that
    imports stampede keeps Python's KeyboardInterrupt."""
    check = (
        "import signal, stampede; "
        "print(signal.getsignal(signal.SIGINT) is signal.default_int_handler)"
    )
    out = subprocess.run(
        [sys.executable, "-c", check], capture_output=True, env=child_env(), check=True
    )
    assert out.stdout.strip() == b"True", out


async def _lines_until(
    proc: asyncio.subprocess.Process, text: bytes, count: int, read: bytes = b""
) -> bytes:
    """Read the child's stderr until `count` lines have held `text`; all read so far."""
    assert proc.stderr is not None
    while read.count(text) < count:
        line = await asyncio.wait_for(proc.stderr.readline(), timeout=120)
        assert line, read.decode()[-2000:]  # it exited before saying so
        read += line
    return read


@pytest.mark.parametrize("processes", [1, 2], ids=["worker", "supervised"])
async def test_a_second_ctrl_c_stops_the_worker_at_once(
    stampede_primaries: LocalPrimaries, processes: int
) -> None:
    """A second Ctrl-C while the worker waits out its --grace (600 s here) did nothing.
    It stops the worker at once now: the jobs in hand are handed back (no delivery
    counted against them), and the command exits 130."""
    async with open_stampede(stampede_primaries, "shards") as st:
        queue = RepairQueue(st.topology)
        await queue.clear()
        await plant(st, queue, 4)
        urls = [a for url in stampede_primaries.urls for a in ("--url", url)]
        proc = await start_cli(
            "worker", *urls, "--strategy", "tests.worker_strategies:stuck", "--grace", "600",
            "--processes", str(processes),
        )  # fmt: skip

        async def in_hand() -> bool:
            return (await queue.stats())["pending"] == 4

        try:
            read = await _lines_until(proc, b'"worker.start"', processes)  # every child
            await eventually(in_hand, within=120)
            proc.send_signal(signal.SIGINT)
            read = await _lines_until(proc, b'"worker.stopping"', processes, read)
            proc.send_signal(signal.SIGINT)
            _, rest = await asyncio.wait_for(proc.communicate(), timeout=120)
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
        err = (read + rest).decode()
        assert proc.returncode == 130, err[-3000:]
        assert "stampede worker: interrupted" in err and "Traceback" not in err, err[-3000:]
        logged = b"\n".join(ln for ln in (read + rest).splitlines() if ln.startswith(b"{"))
        stops = [e for e in events(logged) if e["event"] == "worker.stop"]
        assert len(stops) == processes and sum(e["released"] for e in stops) >= 4, err[-3000:]
        taken = await queue.claim("next-worker", 10)  # handed back: taken over at once
        assert len(taken) == 4 and all(job.deliveries == 1 for job in taken)


@pytest.mark.parametrize("command", ["lint", "slots"])
def test_a_closed_stdin_is_a_usage_error(command: str) -> None:
    """`stampede lint --file - <&-` (no stdin at all) raised click's RuntimeError, a
    traceback; it is a usage error naming --file now."""
    result = subprocess.run(
        [sys.executable, "-m", "stampede.cli", command, "--file", "-"],
        capture_output=True,
        env=child_env(),
        preexec_fn=lambda: os.close(0),
        timeout=120,
        check=False,
    )
    err = result.stderr.decode()
    assert result.returncode == 2, err
    assert "'--file'" in err and "stdin is closed" in err and "Traceback" not in err, err


NOT_UTF8 = os.fsdecode(b"repairs-\xff")  # as the shell passes bytes that are not UTF-8


@pytest.mark.parametrize(
    ("args", "flag"),
    [
        (["queue", "stats", "--stream", NOT_UTF8], "--stream"),
        (["scan", "--group-pattern", GROUPS, "--enqueue", "--stream", NOT_UTF8], "--stream"),
        (["worker", "--strategy", "newest-wins", "--burst", "--consumer", NOT_UTF8], "--consumer"),
    ],
    ids=["queue-stream", "scan-stream", "worker-consumer"],
)
async def test_a_name_that_is_not_utf8_is_a_usage_error(
    stampede_primaries: LocalPrimaries, args: list[str], flag: str
) -> None:
    """A --stream that is not UTF-8 failed at the first command (`queue`: exit 1, with
    advice for Python callers, "pass the raw bytes"); a worker's --consumer failed
    every claim for ever, even with --burst. Both are usage errors now, named."""
    urls = [a for url in stampede_primaries.urls for a in ("--url", url)]
    result = await asyncio.to_thread(run_cli, *args, *urls, timeout=60)
    err = result.stderr.decode()
    assert result.returncode == 2, err[-2000:]
    assert f"'{flag}'" in err and "not UTF-8" in err and "Traceback" not in err, err


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
@pytest.mark.parametrize(
    "args",
    [
        ["scan", "--group-pattern", GROUPS],
        ["scan", "--group-pattern", GROUPS, "--json"],
        ["queue", "stats"],
        ["keyslot", "a"],
        ["lint", "--rules"],
        ["--help"],
        ["scan", "--help"],
    ],
    ids=["scan", "scan-json", "queue-stats", "keyslot", "lint-rules", "help", "scan-help"],
)
async def test_output_that_cannot_be_written_is_one_line_and_exit_74(
    stampede_primaries: LocalPrimaries, args: list[str]
) -> None:
    """Output to a full disk (`> /dev/full`) printed a traceback (`scan`: "the scan did
    not complete", exit 3, when its progress display wrote first). It is one line now,
    `error: cannot write the output (...)`, and exit status 74 (EX_IOERR)."""
    await _unstamped(stampede_primaries, 5)
    connecting = args[0] in ("scan", "queue") and "--help" not in args
    urls = [a for url in stampede_primaries.urls for a in ("--url", url)] if connecting else []
    full = os.open("/dev/full", os.O_WRONLY)
    try:
        result = await asyncio.to_thread(run_cli, *args, *urls, stdout=full)
    finally:
        os.close(full)
    err = result.stderr.decode()
    assert result.returncode == 74, err
    assert err == "error: cannot write the output (No space left on device)\n", err


def _scans(primaries: LocalPrimaries) -> list[int]:
    """SCAN calls each primary has answered so far."""
    stats = [node.client().info("commandstats") for node in primaries.nodes]
    return [int(s.get("cmdstat_scan", {}).get("calls", 0)) for s in stats]


async def test_scan_enqueue_refuses_a_queue_key_of_another_type_before_scanning(
    stampede_primaries: LocalPrimaries,
) -> None:
    """`scan --enqueue` with the repair stream's key holding a string walked every
    shard, judged every group, then failed on the first enqueue (exit 3) and printed
    none of what it found: a long scan thrown away. It is refused before the first
    SCAN now."""
    await _unstamped(stampede_primaries, 5)
    async with open_stampede(stampede_primaries, "primaries", connection=FAST) as st:
        key = b"stampede:repairs"
        await st.topology.execute(key, "SET", key, b"another program's")
    urls = [a for url in stampede_primaries.urls for a in ("--url", url)]
    before = await asyncio.to_thread(_scans, stampede_primaries)
    args = ["scan", "--group-pattern", GROUPS, "--enqueue", *urls]
    result = await asyncio.to_thread(run_cli, *args)
    after = await asyncio.to_thread(_scans, stampede_primaries)
    err = result.stderr.decode()
    assert result.returncode == 3, err
    assert "holds another type of value" in err and "--stream" in err, err
    assert after == before, "it scanned before refusing the queue"


async def test_a_scan_report_written_to_a_file_starts_with_the_report(
    stampede_primaries: LocalPrimaries,
) -> None:
    """`stampede scan > report.txt` began with an empty line: what the progress
    display, meant for a terminal, left behind. Not on a terminal, there is none."""
    await _unstamped(stampede_primaries, 2)
    urls = [a for url in stampede_primaries.urls for a in ("--url", url)]
    result = await asyncio.to_thread(run_cli, "scan", "--group-pattern", GROUPS, *urls)
    assert result.returncode == 1, result.stderr.decode()
    assert result.stdout.split(b"\n")[0].strip() == b"2 torn group(s)", result.stdout[:200]


@pytest.mark.parametrize(
    "args", [["keyslot", "a"], ["lint", "user:1"], ["lint", "--rules", "--json"]]
)
def test_a_closed_stdout_is_a_failure_not_silence(args: list[str]) -> None:
    """With stdout closed (`>&-`) Python has no sys.stdout, and click and rich print
    nothing, silently: `keyslot` exited 0, `lint` 0 or 1, with nothing written. It is
    `error: cannot write the output (stdout is closed)` and exit status 74 now."""
    result = subprocess.run(
        [sys.executable, "-m", "stampede.cli", *args],
        stderr=subprocess.PIPE,
        env=child_env(),
        preexec_fn=lambda: os.close(1),
        timeout=120,
        check=False,
    )
    err = result.stderr.decode()
    assert result.returncode == 74, err
    assert err == "error: cannot write the output (stdout is closed)\n", err


@pytest.mark.parametrize("host", ["no such host", "192.0.2.1"], ids=["unknown", "not-ours"])
async def test_a_metrics_host_that_is_not_ours_is_named(
    stampede_primaries: LocalPrimaries, host: str
) -> None:
    """A --metrics-host that does not resolve, or is no address of this host, was
    answered "pick another --metrics-port, or stop what listens there": advice
    about the wrong flag. The advice names --metrics-host now."""
    urls = [a for url in stampede_primaries.urls for a in ("--url", url)]
    args = ["worker", *urls, "--strategy", "newest-wins", "--burst", "--metrics-port", "0"]
    result = await asyncio.to_thread(run_cli, *args, "--metrics-host", host)
    err = result.stderr.decode()
    assert result.returncode == 1, err[-2000:]
    assert "give --metrics-host an address of this host" in err, err[-2000:]
    assert "--metrics-port" not in err.splitlines()[-1] and "Traceback" not in err, err


def _close_the_log_once_started(args: list[str], processes: int) -> int:
    """Run the worker, read its log until every process has logged `worker.start`,
    then close the log's read end (as `| head` exiting); its exit status."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "stampede.cli", *args], stderr=subprocess.PIPE, env=child_env()
    )
    assert proc.stderr is not None
    try:
        started = 0
        for line in proc.stderr:
            started += b'"worker.start"' in line
            if started == processes:
                break
        proc.stderr.close()
        return proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@pytest.mark.parametrize("processes", [1, 2], ids=["worker", "supervised"])
async def test_a_worker_whose_log_reader_has_gone_stops_with_141(
    stampede_primaries: LocalPrimaries, processes: int
) -> None:
    """`stampede worker 2>&1 | head` kept running with every log line lost, once head
    had exited ("--- Logging error ---" on the same closed stream). It stops as on
    SIGTERM now (jobs finished or handed back) and exits 141, as SIGPIPE would
    have it; the supervisor of --processes stops the others and exits 141 too."""
    urls = [a for url in stampede_primaries.urls for a in ("--url", url)]
    args = ["worker", *urls, "--strategy", "newest-wins", "--health-interval", "0.1"]
    args += ["--processes", str(processes)]
    status = await asyncio.to_thread(_close_the_log_once_started, args, processes)
    assert status == 141


async def test_keys_and_names_that_look_like_markup_are_printed_as_they_are(
    stampede_primaries: LocalPrimaries,
) -> None:
    """rich read the text it printed as markup: a key named `user:[/]:a` in the data
    made `stampede scan` end in a MarkupError traceback (exit 1, "torn groups found",
    the report lost), `user:[bold red]7:a` printed as `user:7:a` in red, and
    `queue stats --stream '[/]'` crashed the same way. They are printed as they are."""
    async with open_stampede(stampede_primaries, "primaries", connection=FAST) as st:
        for key in (b"user:[/]:a", b"user:[bold red]7:a"):
            await st.topology.execute(key, "SET", key, b"plain")
    urls = [a for url in stampede_primaries.urls for a in ("--url", url)]
    args = ["scan", "--group-pattern", r"(?P<group>user:[^:]+):.*", *urls]
    scanned = await asyncio.to_thread(run_cli, *args)
    text = scanned.stdout.decode()
    assert scanned.returncode == 1, scanned.stderr.decode()
    assert "user:[/]" in text and "user:[bold red]7" in text, text
    stats = await asyncio.to_thread(run_cli, "queue", "stats", "--stream", "[/]", *urls)
    assert stats.returncode == 0, stats.stderr.decode()
    assert "repair queue [/]" in stats.stdout.decode(), stats.stdout.decode()


async def test_a_strategy_that_fails_to_shut_down_is_one_error_line(
    stampede_primaries: LocalPrimaries,
) -> None:
    """A strategy whose `on_shutdown` raised ended `stampede worker` with a traceback
    (one whose `on_startup` raises was already one line): it is `error: the strategy
    ... failed to shut down: ...` and exit status 1 now."""
    urls = [a for url in stampede_primaries.urls for a in ("--url", url)]
    args = ["worker", *urls, "--strategy", "tests.worker_strategies:fails_to_stop", "--burst"]
    result = await asyncio.to_thread(run_cli, *args)
    err = result.stderr.decode()
    assert result.returncode == 1, err[-2000:]
    last = err.splitlines()[-1]
    assert last == (
        "error: the strategy 'fails-to-stop' failed to shut down: RuntimeError: pool already closed"
    ), err[-2000:]
    assert "Traceback" not in err, err[-2000:]
