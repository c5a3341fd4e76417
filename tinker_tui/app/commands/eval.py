"""`tinker-tui eval TASK --model RUN[@STEP] | BASE`: evaluate fixed weights on a task.

The task's eval scenarios (or the first N training scenarios, `--split scenarios:N`) are
each rolled out k times (`-k`) on a run's checkpoint (RUN@STEP: its sampler weights at that
step; RUN alone: its latest kept checkpoint) or on a base model as it is. The result is
pass@1, pass@k (unbiased estimator of Chen et al. 2021; a sample succeeds when its reward is
at least `--success-threshold`) and mean@k, each with a 95 % interval (Wilson for pass@k
over scenarios solved or not, a percentile bootstrap over scenarios for pass@1 and mean@k),
under a protocol that is stored with it: the pinned sampling settings (`--eval-temperature`
for every request, the task's own included; `--eval-max-tokens` as a cap on each
request's), the renderer and whether it thinks, the split, k and the threshold. A run's
checkpoint whose run set eval settings (`eval_temperature`, `eval_max_tokens`,
`eval_samples`, `eval_success_threshold`) is evaluated by default under its own
evaluations' protocol, so the numbers compare with theirs; a flag given wins.

Every rollout is kept in the run store as it ends: the same command again runs only the
rollouts that are missing or failed (a larger -k adds samples to those stored).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tinker_tui.app.commands.common import (
    BACKENDS,
    EXIT_OK,
    add_db_option,
    one_of,
    store_path,
)
from tinker_tui.app.json_output import add_json_option
from tinker_tui.engine.errors import EXIT_FAILED, UsageError
from tinker_tui.engine.sampling_defaults import SamplingDefaults
from tinker_tui.engine.training.eval_protocol import DEFAULT_SUCCESS_THRESHOLD

if TYPE_CHECKING:
    from tinker_tui.engine.store.eval_records import EvalTarget
    from tinker_tui.engine.training.standalone_eval import EvalResult

#: Samples per scenario when -k is not given.
DEFAULT_K = 8
DEFAULT_TEMPERATURE = 1.0
DEFAULT_MAX_TOKENS = 1024
#: What the help says of a protocol setting's default for a run's checkpoint.
RUNS_OWN = "for a run with eval_* settings, its evaluations'"


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected at least 1, got {value}")
    return value


def _temperature(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not 0.0 <= value <= 2.0:
        raise argparse.ArgumentTypeError(f"expected 0 to 2, got {value:g}")
    return value


def _number(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None


def add_parser(commands: Any) -> None:
    ev = commands.add_parser(
        "eval",
        help="evaluate a run's checkpoint or a base model: pass@k, mean@k, intervals",
        description="Roll out the task's eval scenarios k times each on a run's checkpoint "
        "(RUN@STEP) or a base model, and report pass@1, pass@k and mean@k with 95% "
        "intervals under a stored protocol. Resumable: the same command again runs only "
        "the rollouts that are missing or failed.",
    )
    ev.add_argument("task", metavar="TASK", help="a built-in task, a task file or a module")
    ev.add_argument(
        "--model",
        required=True,
        metavar="RUN[@STEP]|BASE",
        help="a run id (or unique prefix) with an optional @STEP (default its latest kept "
        "checkpoint), or a base model's name",
    )
    ev.add_argument(
        "-k",
        "--samples",
        dest="k",
        type=_positive_int,
        metavar="K",
        help=f"samples per scenario (default {DEFAULT_K}; {RUNS_OWN})",
    )
    ev.add_argument(
        "--split",
        default="eval_scenarios",
        metavar="SPLIT",
        help="eval_scenarios (default), or scenarios:N for the first N training scenarios",
    )
    ev.add_argument(
        "--eval-temperature",
        type=_temperature,
        metavar="T",
        help=f"temperature of every request, pinned (default {DEFAULT_TEMPERATURE:g}; {RUNS_OWN})",
    )
    ev.add_argument(
        "--eval-max-tokens",
        type=_positive_int,
        metavar="N",
        help=f"cap on each request's max_tokens (default {DEFAULT_MAX_TOKENS}; {RUNS_OWN})",
    )
    ev.add_argument(
        "--success-threshold",
        type=_number,
        metavar="R",
        help=f"a sample succeeds when its reward is at least R, for pass@k (default 1; {RUNS_OWN})",
    )
    ev.add_argument(
        "--seed", type=int, default=0, metavar="N", help="seed of the scenarios:N stream"
    )
    ev.add_argument(
        "--backend",
        type=one_of(BACKENDS),
        choices=BACKENDS,
        help="for a base model: local or tinker (default: tinker when TINKER_API_KEY is set); "
        "a run's checkpoint uses the run's",
    )
    ev.add_argument(
        "--renderer",
        default="",
        metavar="NAME",
        help="for a base model: the tinker-cookbook renderer (default chosen from the "
        "model); a run's checkpoint uses the run's",
    )
    ev.add_argument(
        "--concurrency",
        type=_positive_int,
        default=16,
        metavar="N",
        help="rollouts in flight at once (default 16)",
    )
    ev.add_argument("--no-progress", action="store_true", help="no progress line on stderr")
    add_db_option(ev)
    add_json_option(ev, "eval")


async def resolve_target(
    db_path: Path, model: str, *, task: str, task_spec: str, backend: str | None
) -> tuple[EvalTarget, dict[str, Any]]:
    """What `--model` names, and the settings of the run it is a checkpoint of (its
    renderer, LoRA rank, eval settings; {} for a base model): a stored run's checkpoint
    (RUN or RUN@STEP), else a base model (only without @STEP)."""
    from tinker_tui.engine.store import NoSuchRun, StoreReader
    from tinker_tui.engine.store.eval_records import EvalTarget

    wanted, at, step_text = model.rpartition("@") if "@" in model else (model, "", "")
    step: int | None = None
    if at:
        if not step_text.isdigit():
            raise UsageError(f"--model {model}: the step after @ must be a whole number")
        step = int(step_text)
    run = None
    if db_path.is_file():
        async with await StoreReader.open_readonly(db_path) as store:
            try:
                run = await store.find_run(wanted)
            except NoSuchRun:
                if at:
                    raise
            if run is not None:
                checkpoints = await store.kept_checkpoints(run.run_id)
    elif at:
        raise UsageError(f"--model {model}: no run store at {db_path} (give --db)")
    if run is None:
        from tinker_tui.engine.backend.choice import check_base_model, choose_backend

        chosen = choose_backend(backend)
        check_base_model(chosen, wanted)
        target = EvalTarget(
            task=task, task_spec=task_spec, model=wanted, backend=chosen, base_model=wanted
        )
        return target, {}
    samplers = [c for c in checkpoints if c.kind == "sampler"] or list(checkpoints)
    if not samplers:
        raise UsageError(f"run {run.run_id} has no kept checkpoint to evaluate")
    if step is None:
        chosen_ckpt = samplers[-1]
    else:
        at_step = [c for c in samplers if c.step == step]
        if not at_step:
            steps = ", ".join(str(c.step) for c in samplers)
            raise UsageError(
                f"run {run.run_id} has no kept checkpoint at step {step} (kept: {steps})"
            )
        chosen_ckpt = at_step[-1]
    target = EvalTarget(
        task=task,
        task_spec=task_spec,
        model=f"{run.run_id}@{chosen_ckpt.step}",
        backend=run.backend,
        base_model=run.base_model,
        model_path=chosen_ckpt.path,
        run_id=run.run_id,
        step=chosen_ckpt.step,
    )
    return target, dict(run.config)


def main(args: argparse.Namespace) -> int:
    from tinker_tui.app.commands.run import check_store, load_task
    from tinker_tui.app.task_loader import spec_to_store
    from tinker_tui.engine.training.standalone_eval import scenarios_count

    if args.split != "eval_scenarios":
        scenarios_count(args.split)  # UsageError now for a bad split
    task = load_task(args.task)
    path = store_path(args)
    check_store(path, explicit=args.db is not None)
    target, run_settings = asyncio.run(
        resolve_target(
            path,
            args.model,
            task=task.name,
            task_spec=spec_to_store(args.task),
            backend=args.backend,
        )
    )
    if target.run_id and (args.backend or args.renderer):
        given = "--backend" if args.backend else "--renderer"
        raise UsageError(f"{given} is for a base model; {target.model} uses its run's")
    renderer = str(run_settings.get("renderer") or "") or args.renderer
    rank = int(run_settings.get("lora_rank") or 32)
    choice = choose_settings(args, target, run_settings)
    result = asyncio.run(_evaluate(args, task, target, renderer, rank, path, choice))
    if args.json:
        from tinker_tui.app.json_output import print_json

        print_json(eval_document(result, choice))
    else:
        print(format_result(result, choice))
    if result.summary.failed and not result.summary.samples:
        # nothing was measured: a script must not read the table's zeros as a score
        print(
            f"tinker-tui: eval failed: all {result.summary.failed} rollouts failed; "
            f"the first: {result.first_error}",
            file=sys.stderr,
        )
        return EXIT_FAILED
    return EXIT_OK


#: The protocol's settings a flag sets: the flag of each.
FLAGS = {
    "temperature": "--eval-temperature",
    "max_tokens": "--eval-max-tokens",
    "k": "-k",
    "success_threshold": "--success-threshold",
}


@dataclass(frozen=True, slots=True)
class SettingsChoice:
    """The settings an evaluation's protocol is built from, and where each came from
    (`sources`, by setting: "flag"; "run", the evaluated run's eval settings; "default",
    the command's)."""

    temperature: float | None
    max_tokens: int | None
    k: int
    success_threshold: float
    sources: dict[str, str]
    #: The run's sampling defaults, for a temperature or max_tokens left to them (not
    #: pinned, as its evaluations sampled); None: each is pinned.
    defaults: SamplingDefaults | None = None
    #: The evaluated run ("" for a base model), and whether it set eval settings.
    run_id: str = ""
    run_pinned: bool = False

    def origin(self) -> str:
        """Where the protocol came from, in one line."""
        flags = [FLAGS[name] for name, source in self.sources.items() if source == "flag"]
        if len(flags) == len(FLAGS):
            return "protocol from the flags given"
        if "run" in self.sources.values():
            text = f"protocol from run {self.run_id}'s eval settings"
        else:
            text = "protocol from the command's defaults"
        if flags:
            text += f", {', '.join(flags)} given"
        if self.run_id and not self.run_pinned:
            text += f" (run {self.run_id} set no eval settings)"
        return text


def choose_settings(
    args: argparse.Namespace, target: EvalTarget, run_settings: dict[str, Any]
) -> SettingsChoice:
    """The protocol's settings: each flag given; for those left out, the evaluated run's
    evaluations' when it set any eval setting (their protocol whole: a temperature or
    max_tokens it did not pin is its sampling default, not pinned, as they sampled), else
    the command's defaults."""
    from tinker_tui.engine.training.eval_protocol import RunEvalSettings

    run = RunEvalSettings.of(run_settings)
    from_run = bool(target.run_id) and run.pinned
    given: dict[str, Any] = {
        "temperature": args.eval_temperature,
        "max_tokens": args.eval_max_tokens,
        "k": args.k,
        "success_threshold": args.success_threshold,
    }
    fallback: dict[str, Any] = (
        {
            "temperature": run.temperature,
            "max_tokens": run.max_tokens,
            "k": run.k,
            "success_threshold": run.success_threshold,
        }
        if from_run
        else {
            "temperature": DEFAULT_TEMPERATURE,
            "max_tokens": DEFAULT_MAX_TOKENS,
            "k": DEFAULT_K,
            "success_threshold": DEFAULT_SUCCESS_THRESHOLD,
        }
    )
    chosen = {name: fallback[name] if value is None else value for name, value in given.items()}
    defaults = None
    if from_run:  # the run's, as its evaluations had them (a live change is not stored)
        defaults = SamplingDefaults(
            temperature=float(run_settings.get("temperature", 1.0)),
            max_tokens=int(run_settings.get("max_tokens", 64)),
        )
    return SettingsChoice(
        temperature=chosen["temperature"],
        max_tokens=chosen["max_tokens"],
        k=int(chosen["k"]),
        success_threshold=float(chosen["success_threshold"]),
        sources={
            name: "flag" if value is not None else "run" if from_run else "default"
            for name, value in given.items()
        },
        defaults=defaults,
        run_id=target.run_id,
        run_pinned=run.pinned,
    )


async def _evaluate(
    args: argparse.Namespace,
    task: Any,
    target: EvalTarget,
    renderer: str,
    rank: int,
    path: Path,
    choice: SettingsChoice,
) -> EvalResult:
    from tinker_tui.engine.backend.choice import renderer_name
    from tinker_tui.engine.checkpoint_paths import run_checkpoint_dir
    from tinker_tui.engine.training.eval_protocol import EvalProtocol
    from tinker_tui.engine.training.standalone_eval import StandaloneEval

    protocol = EvalProtocol.build(
        # named as the session will name it at its start (a model folder's, by its template)
        renderer_name(target.base_model, renderer or None),
        temperature=choice.temperature,
        max_tokens=choice.max_tokens,
        defaults=choice.defaults,
        k=choice.k,
        split=args.split,
        success_threshold=choice.success_threshold,
        seed=args.seed,
    )
    progress = Progress(enabled=not args.no_progress and not args.json)
    evaluation = StandaloneEval(
        task=task,
        target=target,
        protocol=protocol,
        db_path=path,
        checkpoint_dir=run_checkpoint_dir(path),
        renderer=renderer,
        lora_rank=rank,
        on_progress=progress.update,
        on_log=lambda level, message: print(f"{level}: {message}", file=sys.stderr),
        concurrency=args.concurrency,
    )
    try:
        return await evaluation.run()
    finally:
        progress.end()


class Progress:
    """One line on stderr, redrawn in place on a terminal (a line per tenth elsewhere)."""

    def __init__(self, *, enabled: bool, out: Any = None) -> None:
        self.out = out or sys.stderr
        self.enabled = enabled
        self.tty = enabled and self.out.isatty()
        self.started = time.monotonic()
        self._last_tenth = -1
        self._drawn = False

    def update(self, done: int, total: int, failed: int) -> None:
        if not self.enabled or total <= 0:
            return
        width = 24
        filled = int(width * done / total)
        bar = "#" * filled + "." * (width - filled)
        elapsed = time.monotonic() - self.started
        line = (
            f"eval [{bar}] {done}/{total} rollouts"
            + (f", {failed} failed" if failed else "")
            + f"  {elapsed:.0f}s"
        )
        if self.tty:
            self.out.write("\r" + line)
            self._drawn = True
        else:
            tenth = 10 * done // total
            if tenth == self._last_tenth:
                return
            self._last_tenth = tenth
            self.out.write(line + "\n")
        self.out.flush()

    def end(self) -> None:
        if self._drawn:
            self.out.write("\n")
            self.out.flush()


def eval_document(result: EvalResult, choice: SettingsChoice | None = None) -> dict[str, Any]:
    """`eval --json` (`app.json_output`)."""
    from dataclasses import asdict

    from tinker_tui.app.json_output import document

    target = asdict(result.target)
    return document(
        "eval",
        eval_id=result.eval_id,
        model=target,
        protocol=result.protocol.as_dict(),
        protocol_key=result.protocol.key(),
        protocol_source=None if choice is None else choice.sources,
        result=result.summary.as_dict(),
        rollouts={"ran": result.ran, "reused": result.reused, "failed": result.summary.failed},
        first_error=result.first_error or None,
    )


def format_result(result: EvalResult, choice: SettingsChoice | None = None) -> str:
    """The result as a table, with the protocol and the intervals said in words."""
    s = result.summary
    # with k = 1, pass@k is pass@1, over scenarios solved or not (as --json has it): once
    rows = [("pass@1", s.pass_at_1)] if s.k > 1 else []
    rows += [(f"pass@{s.k}", s.pass_at_k), (f"mean@{s.k}", s.mean)]
    lines = [
        f"eval {result.eval_id}: {result.target.task} on {result.target.model} "
        f"({result.target.backend})",
        f"protocol {result.protocol.key()}: {result.protocol.text()}",
        *([choice.origin()] if choice is not None else []),
        f"{s.scenarios} scenarios x {s.k} samples: {result.ran} rollouts ran now, "
        f"{result.reused} kept from before" + (f", {s.failed} failed" if s.failed else ""),
        "",
        f"{'METRIC':<10}{'VALUE':>8}  {'95% INTERVAL':<18}  METHOD",
    ]
    for name, interval in rows:
        low_high = f"[{interval.low:.3f}, {interval.high:.3f}]"
        lines.append(f"{name:<10}{interval.value:>8.3f}  {low_high:<18}  {interval.method}")
    lines.append(
        "wilson95: Wilson score interval over scenarios (solved or not); bootstrap95: "
        "percentile bootstrap over scenarios (2000 resamples)"
    )
    if result.first_error:
        lines.append(f"first failure: {result.first_error}")
    return "\n".join(lines)
