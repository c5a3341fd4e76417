"""The Tinker path end to end: the engine drives the real tinker SDK over HTTP against the
service double (tests/tinker_double), which trains on the local backend.

* `tinker-tui run example --backend tinker --no-ui`, in processes of its own, learns (mean
  reward >= 0.9), survives SIGKILL and `--resume` with every step and scenario exactly once
  (the checks of tests/test_faults.py), deletes old checkpoints through `tinker.RestClient`,
  and closes its session; with no service at all it ends with a clear error after
  `backend_unreachable_after` seconds.
* Under each fault the double injects, a run (the command's own code: its session and
  `run_headless`, in this process, with a real SIGINT) shows the wait as it happens with its
  cause, keeps its event loop ticking (it measures its own lag over the whole run), and stops
  within 10 s of SIGINT.

Fault delays are scaled down (the behaviour is the same); bench/bench_tinker_faults.py runs the
full-size cases and reports the lag figures.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import math
import os
import re
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from exactly_once import check_exactly_once
from tinker_double import Burst, Faults, TinkerDouble

from tinker_tui.app.cli import build_parser, main
from tinker_tui.engine.events import Event, LogEmitted
from tinker_tui.engine.faults import ENV as FAULT_ENV
from tinker_tui.engine.local import DEFAULT_BASE_MODEL

BASE = ["--base-model", DEFAULT_BASE_MODEL, "--backend-wait-report", "1", "--eval-every", "0"]
#: A short run for the fault cases: no warm-up, small batches.
SHORT = [
    *BASE,
    "--warmup-steps",
    "0",
    "--steps",
    "2",
    "--group-size",
    "4",
    "--groups-per-step",
    "2",
    "--rollout-workers",
    "2",
]
#: What makes the tiny model learn through the SDK, as on the local backend (the example's
#: backend_settings["tinker"] are meant for Qwen on the real service: no warm-up, lr 4e-5).
LEARN_STEPS = 12
LEARN = [
    *BASE,
    "--warmup-steps",
    "30",
    "--learning-rate",
    "3e-3",
    "--steps",
    str(LEARN_STEPS),
    "--checkpoint-every",
    "2",
    "--keep-last-checkpoints",
    "2",
]
#: SIGINT must be honoured within this many seconds.
STOP_LIMIT = 10.0
#: A loop blocked by a fault stalls for the fault's length (seconds, here at least 3); one
#: that is only starved of CPU by a busy machine lags far less.
BLOCKED = 1.5


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def stored_log(db: Path) -> list[tuple[str, str]]:
    with sqlite3.connect(db) as conn:
        return list(conn.execute("select level, message from log order by rowid"))


def loop_lag(db: Path) -> tuple[float, float]:
    """(p99, max) of the engine's loop lag over the whole run, in seconds, as it logged it."""
    line = next(m for _, m in stored_log(db) if m.startswith("event loop lag over the run"))
    p99, worst = re.search(r"p99 ([\d.]+) ms, max ([\d.]+) ms", line).groups()
    return float(p99) / 1e3, float(worst) / 1e3


# ---------------------------------------------------------------------- the command, in processes
@dataclass
class Outcome:
    returncode: int
    lines: list[tuple[float, str]]  # (monotonic time, stdout line)
    stderr: str
    ended: float
    db: Path = Path()

    @property
    def stdout(self) -> str:
        return "\n".join(line for _, line in self.lines)

    def first(self, pattern: str) -> tuple[float, str]:
        found = [(t, line) for t, line in self.lines if re.search(pattern, line)]
        assert found, f"no line matches {pattern!r}:\n{self.stdout}\n{self.stderr[-2000:]}"
        return found[0]


def run_cli(
    db: Path, env: dict[str, str], args: list[str], *, extra_env: dict[str, str] | None = None
) -> Outcome:
    full_env = dict(os.environ, PYTHONUNBUFFERED="1", **env, **(extra_env or {}))
    for name in ("HF_HUB_OFFLINE", FAULT_ENV):
        if name not in (extra_env or {}):
            full_env.pop(name, None)
    command = [
        sys.executable,
        "-m",
        "tinker_tui.app.cli",
        "run",
        "example",
        "--backend",
        "tinker",
        "--no-ui",
        "--db",
        str(db),
        *args,
    ]
    proc = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=full_env
    )
    errors: list[str] = []
    reader = threading.Thread(target=lambda: errors.append(proc.stderr.read()), daemon=True)
    reader.start()
    lines = [(time.monotonic(), line.rstrip("\n")) for line in proc.stdout]
    returncode = proc.wait(timeout=600)
    ended = time.monotonic()
    reader.join(timeout=10)
    return Outcome(returncode, lines, "".join(errors), ended, db)


def run_main(db: Path, env: dict[str, str], args: list[str]) -> tuple[Outcome, list[str]]:
    """The command's `main` in this process (no second start-up to pay); returns its outcome
    and the warnings it raised."""
    out, err = io.StringIO(), io.StringIO()
    with (
        pytest.MonkeyPatch.context() as patch,
        warnings.catch_warnings(record=True) as caught,
        contextlib.redirect_stdout(out),
        contextlib.redirect_stderr(err),
    ):
        warnings.simplefilter("always")
        for name, value in env.items():
            patch.setenv(name, value)
        for name in ("HF_HUB_OFFLINE", FAULT_ENV):
            patch.delenv(name, raising=False)
        code = main(["run", "example", "--backend", "tinker", "--no-ui", "--db", str(db), *args])
    ended = time.monotonic()
    lines = [(ended, line) for line in out.getvalue().splitlines()]
    return Outcome(code, lines, err.getvalue(), ended, db), [str(w.message) for w in caught]


@pytest.fixture(scope="module")
def learned(tmp_path_factory):
    """The example through the SDK, SIGKILLed during step 6 (in a process of its own), then
    resumed to the end (in this one)."""
    folder = tmp_path_factory.mktemp("learn")
    with TinkerDouble(folder / "service") as double:
        db = folder / "runs.db"
        killed = run_cli(db, double.env(), LEARN, extra_env={FAULT_ENV: "train:kill:6"})
        resumed, raised = run_main(db, double.env(), ["--resume"])
        yield killed, resumed, raised, double


# ---------------------------------------------------------------------- learning
def test_the_example_learns_through_the_sdk_and_resumes_exactly_once_after_sigkill(learned):
    killed, resumed, raised, double = learned
    assert killed.returncode == -9, killed.stderr[-3000:]
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "Traceback" not in killed.stderr + resumed.stderr
    assert "deprecated" not in killed.stderr.lower()
    assert not [w for w in raised if "deprecat" in w.lower()], raised
    assert f"completed at step {LEARN_STEPS}/" in resumed.stdout
    check_exactly_once(resumed.db, LEARN_STEPS)
    with sqlite3.connect(resumed.db) as conn:
        rewards = [
            json.loads(m)["reward/mean"]
            for (m,) in conn.execute("select metrics from steps order by step")
        ]
        (backend,) = conn.execute("select backend from runs").fetchone()
    assert backend == "tinker"
    best = max(sum(rewards[i : i + 3]) / 3 for i in range(len(rewards) - 2))
    assert best >= 0.9, rewards

    # retention: old checkpoints were deleted on the service, through the REST API
    service = double.service
    assert service.deleted and all(p.startswith("tinker://") for p in service.deleted)
    assert not set(service.deleted) & set(service.checkpoints)
    assert any(
        method == "DELETE" and path.startswith("training_runs/")
        for method, path, _ in service.calls
    )
    # two sessions: the killed run's (never finished) and the resumed run's, closed
    finished = [s.finished for s in service.sessions.values()]
    assert finished.count(None) == 1
    assert {"reason": "success", "detail": "reached max_steps"} in finished


def test_substeps_and_a_schedule_go_through_the_sdk(tmp_path):
    """`num_substeps = 2` through the real SDK: the double sees two optim_step requests per
    trained step; the steps record the cosine schedule's factors."""
    with TinkerDouble(tmp_path / "service") as double:
        db = tmp_path / "runs.db"
        outcome, _ = run_main(
            db,
            double.env(),
            [*SHORT, "--steps", "3", "--num-substeps", "2", "--lr-schedule", "cosine"],
        )
        calls = [c for c in double.service.calls if c[:2] == ("POST", "optim_step")]
    assert outcome.returncode == 0, outcome.stderr[-3000:]
    with sqlite3.connect(db) as conn:
        steps = [json.loads(m) for (m,) in conn.execute("select metrics from steps order by step")]
    trained = [m for m in steps if not m.get("train/skipped")]
    assert len(steps) == 3 and trained
    assert all(m["optim/steps"] == 2 for m in trained)
    assert len(calls) == 2 * len(trained) and all(status == 200 for *_, status in calls)
    # cosine over 3 steps: 1, 0.75, 0.25 of the rate
    assert [m["optim/lr_factor"] for m in steps] == pytest.approx([1.0, 0.75, 0.25])


def test_with_no_service_the_command_ends_with_a_clear_error(tmp_path, monkeypatch, capsys):
    """The command's own `main`, in this process (its imports are paid once per session)."""
    monkeypatch.setenv("TINKER_BASE_URL", f"http://127.0.0.1:{closed_port()}")
    monkeypatch.setenv("TINKER_API_KEY", "tml-nobody-answers")
    db = tmp_path / "runs.db"
    code = main(
        [
            "run",
            "example",
            "--backend",
            "tinker",
            "--no-ui",
            "--db",
            str(db),
            *SHORT,
            "--backend-unreachable-after",
            "3",
        ]
    )
    out, err = capsys.readouterr()
    assert code == 1, err
    with sqlite3.connect(db) as conn:  # from the session's start to the error, as logged
        (started,) = conn.execute("select time from sessions where backend = 'tinker'").fetchone()
        (failed,) = conn.execute(
            "select time from log where message like 'run failed: BackendUnreachableError%'"
        ).fetchone()
    assert failed - started <= 3 + 5  # the limit, plus what the SDK takes to start
    retry = next(line for line in out.splitlines() if "retry" in line)
    assert "Tinker: client/config" in retry and "ConnectError" in retry
    error = err.strip().splitlines()[-1]
    assert "unreachable: no answer for 3 s" in error and "TINKER_BASE_URL" in error
    assert "backend_unreachable_after" in error
    assert loop_lag(db)[1] < BLOCKED


def test_a_run_after_another_in_the_process_asks_its_own_service(tmp_path, monkeypatch):
    """The SDK keeps REST connections for the life of the process: a run that comes after
    another (its service gone, TINKER_BASE_URL now naming another) must still ask its own
    service, not wait minutes on the gone one (its connection retries unseen)."""
    from tinker_tui.engine.backend.choice import context_length_of

    async def context_length() -> int | None:
        return await asyncio.wait_for(context_length_of("tinker", DEFAULT_BASE_MODEL), 30)

    lengths = []
    for name in ("first", "second"):
        with TinkerDouble(tmp_path / name) as double:
            for key, value in double.env().items():
                monkeypatch.setenv(key, value)
            lengths.append(asyncio.run(context_length()))
        assert ("GET", "get_server_capabilities", 200) in double.service.calls
    assert lengths[0] == lengths[1] and lengths[0] is not None


# ---------------------------------------------------------------------- faults, in this process
@dataclass
class Stopped:
    """A run under a fault, stopped by SIGINT once it showed the wait."""

    returncode: int | None
    error: BaseException | None
    waits: list[str]  # the warning lines, in order
    signalled: float | None
    ended: float
    db: Path
    stdout: str = ""
    lines: list[str] = field(default_factory=list)

    def first(self, pattern: str) -> str:
        found = [line for line in self.waits if re.search(pattern, line)]
        assert found, f"no wait matches {pattern!r}: {self.waits}\n{self.stdout}"
        return found[0]


def run_under_fault(
    tmp_path: Path,
    monkeypatch,
    capsys,
    faults: Faults | None,
    args: list[str],
    sigint_when: Callable[[str], bool] | None,
    *,
    hold: float = 1.0,
    stop_timeout: float | None = None,
) -> Stopped:
    """The `run` command's own path (make_session, preload, run_headless), in this process;
    SIGINT (a real one, to this process) as soon as a warning matches `sigint_when`. `hold`:
    how long the double holds a poll of a future that is not done."""
    from tinker_tui.app.commands.run import make_session, run_headless

    double = None
    if faults is None:
        env = {
            "TINKER_BASE_URL": f"http://127.0.0.1:{closed_port()}",
            "TINKER_API_KEY": "tml-nobody-answers",
        }
    else:
        double = TinkerDouble(tmp_path / "service", faults=faults, hold=hold).start()
        env = double.env()
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    db = tmp_path / "runs.db"
    session = make_session(
        build_parser().parse_args(
            ["run", "example", "--backend", "tinker", "--no-ui", "--db", str(db), *args]
        )
    )
    session.preload()
    waits: list[str] = []
    signalled: list[float] = []

    def watch(event: Event) -> None:
        if isinstance(event, LogEmitted) and event.level == "warning":
            waits.append(event.message)
            if sigint_when is not None and not signalled and sigint_when(event.message):
                signalled.append(time.monotonic())
                os.kill(os.getpid(), signal.SIGINT)  # run_headless's handler takes it

    session.events.subscribe(watch)
    returncode = error = None
    try:
        returncode = asyncio.run(
            run_headless(session)
            if stop_timeout is None
            else run_headless(session, stop_timeout=stop_timeout)
        )
    except Exception as exc:
        error = exc
    ended = time.monotonic()
    if double is not None:
        double.stop()
    return Stopped(
        returncode,
        error,
        waits,
        signalled[0] if signalled else None,
        ended,
        db,
        capsys.readouterr().out,
    )


def waited(pattern: str) -> Callable[[str], bool]:
    return lambda line: line.startswith("Tinker:") and bool(re.search(pattern, line))


def _stopped_in_time(run: Stopped) -> None:
    assert run.error is None, run.error
    assert run.returncode == 130
    assert run.signalled is not None and run.ended - run.signalled <= STOP_LIMIT
    assert loop_lag(run.db)[1] < BLOCKED, loop_lag(run.db)


def test_a_slow_config_is_waited_for_visibly_and_can_be_stopped(tmp_path, monkeypatch, capsys):
    run = run_under_fault(
        tmp_path,
        monkeypatch,
        capsys,
        Faults(delay={"client/config": 8.0}),
        SHORT,
        waited("has waited .*client/config sent"),
    )
    line = run.first("has waited")
    assert line.startswith("Tinker: create training client has waited")
    _stopped_in_time(run)
    assert "stopped at step 0/" in run.stdout


def test_an_unreachable_service_can_be_stopped_at_once(tmp_path, monkeypatch, capsys):
    run = run_under_fault(tmp_path, monkeypatch, capsys, None, SHORT, waited("retry"))
    assert "Tinker: client/config ConnectError" in run.first("retry")
    _stopped_in_time(run)


def test_a_429_burst_is_shown_and_the_run_goes_on(tmp_path, monkeypatch, capsys):
    # Four in a row: the SDK waits about 1 s after each whatever Retry-After says, so each
    # one costs a second here (the bench runs the full-size burst).
    run = run_under_fault(
        tmp_path,
        monkeypatch,
        capsys,
        Faults(fail={"asample": Burst(429, 4, retry_after=0.25)}),
        SHORT,
        None,
    )
    assert run.error is None and run.returncode == 0
    assert run.first("asample 429").startswith("Tinker: asample 429 Too Many Requests")
    assert "completed at step 2/" in run.stdout
    assert loop_lag(run.db)[1] < BLOCKED


def test_a_503_burst_shows_each_retry_with_its_cause(tmp_path, monkeypatch, capsys):
    run = run_under_fault(
        tmp_path,
        monkeypatch,
        capsys,
        Faults(fail={"create_session": Burst(503, 40)}),
        SHORT,
        waited("create_session 503"),
    )
    assert re.fullmatch(
        r"Tinker: create_session 503 Service Unavailable, retry \d+ in "
        r"[\d.]+ s",
        run.first("create_session 503"),
    )
    _stopped_in_time(run)


def test_a_persistent_503_on_optim_step_is_shown_and_abandoned_on_stop(
    tmp_path, monkeypatch, capsys
):
    run = run_under_fault(
        tmp_path,
        monkeypatch,
        capsys,
        Faults(fail={"optim_step": Burst(503)}),
        SHORT,
        waited("optim_step has waited"),
    )
    assert "503 Service Unavailable" in run.first("optim_step has waited")
    assert run.first("optim_step 503 Service Unavailable")
    _stopped_in_time(run)
    assert "stopped during step 1" in run.stdout


def test_a_future_that_stays_try_again_is_shown_and_waited_for_by_a_stop(
    tmp_path, monkeypatch, capsys
):
    """The service queues the call (try_again) without failing it: the call is slow, not in
    trouble, so a graceful stop waits for the step (a second Ctrl+C, or the stop's time
    limit, ends it at once)."""
    # Polls held 0.2 s, not 1 s: held 1 s, the first try_again could come after the first wait
    # line at 1 s (its cause then "the service is working on it").
    run = run_under_fault(
        tmp_path,
        monkeypatch,
        capsys,
        Faults(stuck_futures={"optim_step"}),
        SHORT,
        waited("optim_step has waited"),
        hold=0.2,
        stop_timeout=4,
    )
    assert "queued by the service: try_again" in run.first("optim_step has waited")
    assert "  waiting for step 1's training call (running " in run.stdout
    _stopped_in_time(run)
    assert run.ended - run.signalled >= 4  # it waited, to the stop's limit


def test_a_stop_during_a_slow_forward_backward_finishes_and_checkpoints_the_step(
    tmp_path, monkeypatch, capsys
):
    """SIGINT while forward_backward is slow (the double takes 6 s to answer it): the step
    finishes and is checkpointed. It was abandoned ("last checkpoint: none")."""
    run = run_under_fault(
        tmp_path,
        monkeypatch,
        capsys,
        Faults(delay={"forward_backward": 6.0}),
        SHORT,
        waited("forward_backward has waited"),
    )
    _stopped_in_time(run)
    assert "  waiting for step 1's training call (running " in run.stdout
    assert "stopped at step 1/2" in run.stdout
    assert "last checkpoint: step-000001 (step 1)" in run.stdout


def test_a_sampler_that_never_answers_is_shown_and_the_run_stops(tmp_path, monkeypatch, capsys):
    run = run_under_fault(
        tmp_path, monkeypatch, capsys, Faults(hang={"asample"}), SHORT, waited("sample has waited")
    )
    line = run.first("sample has waited")
    assert "asample sent" in line and "no answer yet" in line
    _stopped_in_time(run)


def test_an_uncached_tokenizer_offline_fails_the_run_at_once_saying_what_to_do(
    tmp_path, monkeypatch, capsys
):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # read by huggingface_hub when imported
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", True)
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_CACHE", str(tmp_path / "hub"))
    run = run_under_fault(
        tmp_path, monkeypatch, capsys, Faults(tokenizer_id="acme/tiny-chat-tokenizer"), SHORT, None
    )
    assert type(run.error).__name__ == "TokenizerUnavailable"
    with sqlite3.connect(run.db) as conn:  # from the training client's creation to the error
        times = dict(
            conn.execute(
                "select case when message like 'Tinker SDK: TrainingClient initialized%' then 'made' "
                "when message like 'run failed: TokenizerUnavailable%' then 'failed' end, time "
                "from log where level != 'debug'"
            )
        )
    assert times["failed"] - times["made"] < 10
    message = str(run.error)
    for needed in (
        DEFAULT_BASE_MODEL,
        "acme/tiny-chat-tokenizer",
        "HF_HUB_OFFLINE",
        "hf download acme/tiny-chat-tokenizer",
    ):
        assert needed in message
    assert loop_lag(run.db)[1] < BLOCKED


def test_a_malformed_key_stops_the_command_at_once(monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("TINKER_API_KEY", "dummy")
    started = time.monotonic()
    assert (
        main(
            [
                "run",
                "example",
                "--backend",
                "tinker",
                "--no-ui",
                "--db",
                str(tmp_path / "runs.db"),
                *BASE,
            ]
        )
        == 2
    )
    assert time.monotonic() - started < 5
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "TINKER_API_KEY" in err and "tml-" in err


# ---------------------------------------------------------------------- StableReinforce
def test_a_stable_reinforce_run_trains_on_recorded_sequences_through_the_sdk(tmp_path):
    """`loss_fn = stable_reinforce` through the real SDK: samplers record stability info,
    every datum names its sampled sequences (the double refuses a stable_reinforce request
    without provenance, or naming sequences it did not record in this session), and the
    run trains."""
    with TinkerDouble(tmp_path / "service") as double:
        db = tmp_path / "runs.db"
        outcome, _ = run_main(db, double.env(), [*SHORT, "--loss-fn", "stable_reinforce"])
        service = double.service
        fbs = [c for c in service.calls if c[:2] == ("POST", "forward_backward")]
    assert outcome.returncode == 0, outcome.stderr[-3000:]
    assert fbs and all(status == 200 for *_, status in fbs)
    with sqlite3.connect(db) as conn:
        steps = [json.loads(m) for (m,) in conn.execute("select metrics from steps order by step")]
    assert len(steps) == 2 and all(math.isfinite(m["train/loss_sum"]) for m in steps)
    # Each datum trained names its one sampled sequence (of 2 steps x 2 groups x 4 rollouts,
    # less the groups whose rewards were all equal: they carry no signal and are not sent).
    trained = sum(int(m["train/num_datums"]) for m in steps)
    assert 4 <= trained <= 16 and len(service.trained_sequences) == trained
    assert service.trained_sequences <= set(service.recorded)


def test_an_expired_sequence_is_explained_in_one_line_not_a_crash(tmp_path):
    """The double expires recorded sequences at once: the service's 400 ends the run with
    exit 1 and one line saying what was refused and what to do, no traceback."""
    with TinkerDouble(tmp_path / "service") as double:
        double.faults = Faults(sequence_ttl=0.0)
        outcome, _ = run_main(
            tmp_path / "runs.db", double.env(), [*SHORT, "--loss-fn", "stable_reinforce"]
        )
    assert outcome.returncode == 1
    assert "Traceback" not in outcome.stderr + outcome.stdout
    lines = [line for line in outcome.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, outcome.stderr
    assert "refused the recorded sequences" in lines[0] and "has expired" in lines[0]
    assert "--resume re-samples" in lines[0]
