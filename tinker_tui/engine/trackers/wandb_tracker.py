"""Weights & Biases: every step and eval metric under the JSONL's keys, the run's settings,
checkpoints, and a table of sampled rollouts every `wandb_samples_every` steps.

Metrics are charted against our `step` (W&B's own `_step` only counts rows), because an
evaluation finishes after later steps were logged and W&B drops rows whose `step=` goes
back. The W&B run id is the run's (kept in the store with its settings), so a resumed run
logs into the same W&B run. A resumed run redoes the steps after its checkpoint, and a
rollback those after the checkpoint it goes back to: W&B keeps both records of those steps
(its history cannot drop rows: its run rewind is a private preview of the service, and not
for runs charted against a `define_metric` step, as these are; the store and TensorBoard
keep only the redone one). So where the redo starts is logged: a row with
`resume/from_step` (a resumed process) or `rollback/to_step` and `rollback/steps_undone`
(a rollback, its reason in the summary under `rollback/last`): the rows logged before it
with a greater `step` are the undone records.

W&B never logs in here and never prompts: without an API key (WANDB_API_KEY, or `wandb
login`'s netrc entry) it runs offline, and so it does with WANDB_MODE=offline; the files
go beside the store (`<store folder>/wandb/`, or WANDB_DIR) and `wandb sync` uploads them.
It never captures the terminal (the dashboard draws there).
"""

from __future__ import annotations

import netrc
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlparse

from tinker_tui.engine.trackers.tracker import SAMPLE_COLUMNS, RunInfo, numeric

#: W&B API hosts whose `wandb login` netrc entry counts as a key when WANDB_BASE_URL is
#: unset: W&B's own, and the installed package's default (it changed between versions).
DEFAULT_URLS = ("https://api.wandb.ai",)


#: W&B settings for a run inside ours: never touch the terminal (the dashboard draws there),
#: collect nothing about the machine or the code, and write the run's file every second (by
#: default every 15 s: a run killed with SIGKILL lost up to 15 s of steps).
SETTINGS: dict[str, Any] = {
    "console": "off",
    "silent": True,
    "quiet": True,
    "show_info": False,
    "show_warnings": False,
    "x_disable_stats": True,
    "x_disable_meta": True,
    "x_save_requirements": False,
    "disable_git": True,
    "disable_code": True,
    "save_code": False,
    "disable_job_creation": True,
    "x_transaction_log_flush_interval": 1.0,
}


#: The part of SETTINGS that W&B reads process-wide for what it prints to the terminal.
QUIET: dict[str, Any] = {"silent": True, "quiet": True, "show_info": False, "show_warnings": False}


def has_api_key(environ: Mapping[str, str], default_urls: tuple[str, ...] = DEFAULT_URLS) -> bool:
    """Whether W&B credentials are configured, judged without asking W&B (which would
    prompt): WANDB_API_KEY, WANDB_IDENTITY_TOKEN_FILE, or a netrc entry for the W&B host."""
    if environ.get("WANDB_API_KEY") or environ.get("WANDB_IDENTITY_TOKEN_FILE"):
        return True
    urls = (environ["WANDB_BASE_URL"],) if environ.get("WANDB_BASE_URL") else default_urls
    path = environ.get("NETRC") or os.path.join(os.path.expanduser("~"), ".netrc")
    try:
        entries = netrc.netrc(path)
    except (OSError, netrc.NetrcParseError):
        return False
    return any(entries.authenticators(urlparse(url).hostname or "") for url in urls)


#: The modes this tracker gives wandb.init (None: W&B's own choice).
WandbMode = Literal["offline", "disabled"] | None


def choose_mode(
    environ: Mapping[str, str], default_urls: tuple[str, ...] = DEFAULT_URLS
) -> tuple[WandbMode, str]:
    """(the mode to give wandb.init, why it was chosen). None lets W&B choose (online, or
    offline by its own settings): only when it has a key, so it never prompts for one."""
    asked = environ.get("WANDB_MODE", "").strip().lower()
    if asked == "disabled":
        return "disabled", "WANDB_MODE=disabled"
    if asked in ("offline", "dryrun"):
        return "offline", f"WANDB_MODE={asked}"
    if has_api_key(environ, default_urls):
        return None, ""
    return "offline", "no API key: set WANDB_API_KEY or run `wandb login` to log online"


class WandbTracker:
    key = "wandb"
    name = "W&B"

    def __init__(
        self,
        *,
        project: str,
        entity: str | None = None,
        run_name: str | None = None,
        run_id: str | None = None,
        folder: Path,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        self.project = project
        self.entity = entity
        self.run_name = run_name
        self.run_id = run_id
        self.folder = Path(folder)
        self.environ = os.environ if environ is None else environ
        self.run: Any = None
        self._wandb: Any = None
        self._disabled = False

    def start(self, run: RunInfo) -> list[str]:
        if self.run is not None or self._disabled:
            return []  # the same run again (a resume that fell back to an earlier checkpoint)
        if choose_mode(self.environ)[0] == "disabled":
            self._disabled = True
            return ["W&B: off (WANDB_MODE=disabled); nothing is logged there"]
        import wandb

        self._wandb = wandb
        fields = getattr(wandb.Settings, "model_fields", None)  # settings vary by version
        package_url = getattr((fields or {}).get("base_url"), "default", None)
        mode, why = choose_mode(
            self.environ, DEFAULT_URLS + ((package_url,) if isinstance(package_url, str) else ())
        )
        settings = wandb.Settings(
            **{k: v for k, v in SETTINGS.items() if fields is None or k in fields}
        )
        # W&B's terminal lines (its banner, "Detected [openai] in use", its Weave advert)
        # follow its process-wide settings, not a run's: quiet them there, before init.
        wandb.setup(
            settings=wandb.Settings(
                **{k: v for k, v in QUIET.items() if fields is None or k in fields}
            )
        )
        kwargs: dict[str, Any] = {}
        if not self.environ.get("WANDB_DIR"):
            self.folder.mkdir(parents=True, exist_ok=True)
            kwargs["dir"] = str(self.folder)
        self.run = wandb.init(
            project=self.project,
            entity=self.entity,
            name=self.run_name or run.run_name or run.run_id,
            notes=run.note or None,
            id=self.run_id,
            resume="allow",
            mode=mode,
            settings=settings,
            reinit="create_new",
            job_type="rl",
            **kwargs,
        )
        self.run.define_metric("step")
        self.run.define_metric("*", step_metric="step")
        self.run.config.update(
            {
                "run_id": run.run_id,
                "run_name": run.run_name,
                "task": run.name,
                "backend": run.backend,
                "base_model": run.base_model,
                **dict(run.config),
            },
            allow_val_change=True,
        )
        if run.start_step > 0:
            self.run.log({"step": run.start_step, "resume/from_step": run.start_step})
        if self._offline():
            return [f"W&B: offline ({why or 'W&B settings'}); {self._sync_hint()}"]
        return [f"W&B: logging to {self.run.url}"]

    def _offline(self) -> bool:
        return getattr(self.run.settings, "mode", "") in ("offline", "dryrun")

    def _sync_hint(self) -> str:
        """Where this run's offline files are, and the command that uploads them (every
        segment of a resumed run: W&B syncs them in order)."""
        sync_dir = Path(self.run.settings.sync_dir)
        every = sync_dir.parent / f"offline-run-*-{self.run.id}"
        return f"files in {sync_dir}; upload with `wandb sync {every}`"

    def log_step(
        self, step: int, policy_version: int, metrics: Mapping[str, float], time: float
    ) -> None:
        if self.run is None:  # W&B is disabled
            return
        self.run.log({"step": step, "policy_version": policy_version, **numeric(metrics)})

    def log_eval(
        self, step: int, policy_version: int, metrics: Mapping[str, float], time: float
    ) -> None:
        if self.run is None:  # W&B is disabled
            return
        self.run.log({"step": step, **numeric(metrics)})

    def log_checkpoint(self, step: int, kind: str, name: str, path: str) -> None:
        if self.run is None:  # W&B is disabled
            return
        self.run.summary[f"checkpoint/{kind}"] = {"step": step, "name": name, "path": path}
        if kind == "state":  # sampler weights come every step; full checkpoints are the events
            self.run.log({"step": step, "checkpoint/state_step": step})

    def log_samples(self, step: int, rows: list[tuple[Any, ...]]) -> None:
        if self.run is None:  # W&B is disabled
            return
        table = self._wandb.Table(columns=list(SAMPLE_COLUMNS), data=[list(r) for r in rows])
        self.run.log({"step": step, "samples": table})

    def log_rollback(self, to_step: int, steps_undone: int, reason: str, time: float) -> None:
        if self.run is None:  # W&B is disabled
            return
        self.run.log(
            {"step": to_step, "rollback/to_step": to_step, "rollback/steps_undone": steps_undone}
        )
        self.run.summary["rollback/last"] = {
            "to_step": to_step,
            "steps_undone": steps_undone,
            "reason": reason,
        }

    def finish(self, status: str) -> list[str]:
        if self.run is None:
            return []
        lines = [f"W&B: offline run saved: {self._sync_hint()}"] if self._offline() else []
        run, self.run = self.run, None
        run.summary["run/status"] = status
        run.finish(exit_code=1 if status == "failed" else 0)
        return lines

    def abort(self) -> None:
        if self.run is not None:
            run, self.run = self.run, None
            run.finish(exit_code=1)
