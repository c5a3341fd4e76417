"""`tinker-tui mcp`: the runs of one store as an MCP server over stdio, for a coding agent.

Reading tools (always): the runs, a run's metrics over a window of steps, its health words,
the worst or best rollouts of a step, the log's tail, the scenario board and a step's
signals (`app.run_reading`), and a live run's control status. Acting tools (pause, resume, checkpoint, evaluate, set a knob, roll back,
stop) go through the package's control client (`tinker_tui.control`) and only when the
server was started with `--allow-control`: without it they are listed (so an agent knows
they exist) but refuse, saying how to allow them. A person decides whether an agent may
steer; the agent cannot grant itself that.

Built on the official MCP Python SDK (the `mcp` extra), imported only by this command.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any, Literal

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

from tinker_tui.app import run_reading
from tinker_tui.engine.errors import TinkerTuiError

INSTRUCTIONS = """\
Reads and (when allowed) steers tinker-tui RL post-training runs in one run store.
Start with list_runs, then run_health and run_metrics for a run; run_rollouts shows what the
model actually wrote; when many groups have no signal, scenario_board says which prompts are
never or always solved and step_signals shows a step's funnel. The resource
tinker-tui://agent-skill (also `tinker-tui agent-skill`) says how to watch a run and when to
act: read it first.
Acting tools work only if a person started this server with --allow-control."""

#: The skill file (`tinker-tui agent-skill`) as a resource, for agents that read those.
SKILL_URI = "tinker-tui://agent-skill"

REFUSED = (
    "control is off: this MCP server was started without --allow-control, so it only "
    "reads runs. Ask the person running it to restart it as `tinker-tui mcp "
    "--allow-control` if you should steer runs; until then, report what you see."
)


def build_server(db_path: Path, *, allow_control: bool = False) -> MCPServer:
    """The server: its tools read the store at `db_path` and steer the runs beside it."""
    server: MCPServer = MCPServer("tinker-tui", instructions=INSTRUCTIONS)
    reader = run_reading.RunReader(db_path)

    @server.resource(
        SKILL_URI,
        name="agent-skill",
        mime_type="text/markdown",
        description="How to watch a run: signals, healthy values, when to "
        "pause or roll back, what never to do",
    )
    def agent_skill() -> str:
        from tinker_tui.app.commands.agent_skill import skill_text

        return skill_text()

    async def read(run: str | None) -> run_reading.ReadRun:
        try:
            return await reader.read(run)
        except TinkerTuiError as exc:  # no such run, no store: the agent's to correct
            raise ToolError(str(exc)) from None

    @server.tool()
    async def list_runs() -> dict[str, Any]:
        """The runs in the store, newest first: id, name, task, status (running, paused,
        completed, stopped, failed, interrupted), step, last mean reward, last checkpoint,
        and whether it can be steered now (controllable)."""
        try:
            return {"store": str(db_path), "runs": await run_reading.list_runs(db_path)}
        except TinkerTuiError as exc:
            raise ToolError(str(exc)) from None

    @server.tool()
    async def run_metrics(
        run: str | None = None,
        metrics: list[str] | None = None,
        last: int = 20,
        since_step: int | None = None,
    ) -> dict[str, Any]:
        """A run's metrics per step. run: id or unique prefix (default: newest run).
        metrics: names such as reward/mean, reward/std, train/skipped, optim/lr,
        optim/grad_norm, kl/policy_base, eval/reward_mean (default: those; ["all"]: every
        one); last: how many recent steps; since_step: steps from this one on instead.
        `available` lists every metric the run has."""
        return run_reading.metrics_window(await read(run), metrics, last, since_step)

    @server.tool()
    async def run_health(run: str | None = None) -> dict[str, Any]:
        """A run's state and health words as the dashboard shows them: health is learning,
        converged, no_signal, collapsed, error or none; with the best step, the checkpoint a
        rollback would go back to, recent rewards, failed rollouts, discards and knobs."""
        return run_reading.health(await read(run))

    @server.tool()
    async def run_rollouts(
        run: str | None = None,
        step: int | None = None,
        which: Literal["worst", "best"] = "worst",
        count: int = 3,
    ) -> dict[str, Any]:
        """The worst (lowest reward) or best rollouts a step trained on, with their
        conversations (long messages cut) and task metrics. step: default the last step."""
        try:
            return run_reading.rollouts(await read(run), step, which, count)
        except ValueError as exc:
            raise ToolError(str(exc)) from None

    @server.tool()
    async def scenario_board(
        run: str | None = None,
        order: Literal["drawn", "mean reward", "pass rate", "no signal", "scenario"] = "drawn",
        count: int = 50,
        kind: Literal[
            "never solved", "always solved", "high variance", "mostly solved", "mostly failed"
        ]
        | None = None,
    ) -> dict[str, Any]:
        """Per scenario id (prompt) over the whole run: groups drawn, rollouts, mean reward,
        pass rate (rollouts reaching the run's best reward, pass_reward), groups lost without
        signal, and its class: never solved and always solved give no gradient, high
        variance is where the signal comes from. order sorts (biggest first); kind keeps
        one class; classes counts them all."""
        try:
            return run_reading.scenarios(await read(run), order, count, kind)
        except ValueError as exc:
            raise ToolError(str(exc)) from None

    @server.tool()
    async def step_signals(run: str | None = None, step: int | None = None) -> dict[str, Any]:
        """A trained step's funnel (groups sampled, dropped stale / without signal / failed,
        trained; rollouts, truncated), its reward and advantage histograms, the share of
        groups without signal, truncation, response lengths, reward components, and the
        means over the last steps. step: default the last step trained."""
        try:
            return run_reading.step_signals(await read(run), step)
        except ValueError as exc:
            raise ToolError(str(exc)) from None

    @server.tool()
    async def run_log(
        run: str | None = None,
        lines: int = 50,
        level: Literal["debug", "info", "warning", "error"] | None = None,
    ) -> dict[str, Any]:
        """The last lines of a run's log (repeats folded); level keeps that level and above."""
        return run_reading.log_tail(await read(run), lines, level)

    # ------------------------------------------------------------------ control

    async def control(
        run: str | None, operation: str, *args: Any, acting: bool = True
    ) -> dict[str, Any]:
        """Call `operation` on the run's control client; the run's state after it."""
        from tinker_tui.control import CommandRefused, ControlUnavailable, connect

        if acting and not allow_control:
            raise ToolError(REFUSED)

        def call() -> dict[str, Any]:
            client = connect(run, db=db_path)
            state: dict[str, Any] = getattr(client, operation)(*args)
            return {"run_id": client.run_id, "operation": operation, "state": state}

        try:
            return await asyncio.to_thread(call)
        except (ControlUnavailable, CommandRefused, PermissionError) as exc:
            raise ToolError(str(exc)) from None

    @server.tool()
    async def run_status(run: str | None = None) -> dict[str, Any]:
        """A live run's control state: paused, stopping, and its live knobs' values
        (learning_rate, temperature, max_steps_off_policy, rollout_workers). Reading only."""
        return await control(run, "status", acting=False)

    @server.tool()
    async def pause_run(
        run: str | None = None, reason: str = "paused by an agent"
    ) -> dict[str, Any]:
        """Pause a live run: no new rollouts start; those in flight finish; the trainer
        finishes its step. Needs --allow-control."""
        return await control(run, "pause", reason)

    @server.tool()
    async def resume_run(run: str | None = None) -> dict[str, Any]:
        """Resume a paused run. Needs --allow-control."""
        return await control(run, "resume")

    @server.tool()
    async def checkpoint_run(run: str | None = None) -> dict[str, Any]:
        """Write a full checkpoint after the current step (at once while paused). Needs
        --allow-control."""
        return await control(run, "checkpoint")

    @server.tool()
    async def evaluate_run(run: str | None = None) -> dict[str, Any]:
        """Run the evaluator on the current policy soon (eval/reward_mean in run_metrics).
        Needs --allow-control."""
        return await control(run, "evaluate")

    @server.tool()
    async def set_knob(name: str, value: float, run: str | None = None) -> dict[str, Any]:
        """Change a live knob: learning_rate, temperature, max_steps_off_policy or
        rollout_workers (integers for the last two). Needs --allow-control."""
        number: float | int = (
            int(value)
            if value == int(value) and name in ("max_steps_off_policy", "rollout_workers")
            else value
        )
        return await control(run, "set", name, number)

    @server.tool()
    async def rollback_run(
        run: str | None = None,
        reason: str = "rolled back by an agent",
        lr_scale: float | None = None,
    ) -> dict[str, Any]:
        """Go back to the checkpoint of the weights that sampled the best step (not the best
        step's own, which holds its update), the learning rate scaled by lr_scale (default: the run's rollback_lr_scale). Undoes the steps
        after it. Refused when there is no such checkpoint (run_health: rollback_to).
        Needs --allow-control."""
        if not allow_control:
            raise ToolError(REFUSED)
        read_run = await read(run)
        if run_reading.health(read_run)["rollback_to"] is None:
            # The run would only log a warning and go on: say so, and what to do instead.
            best = read_run.state.health_window.best_step
            where = f"of the weights that sampled its best step ({best[0]})" if best else "yet"
            raise ToolError(
                f"nothing to roll back to: run {read_run.run.run_id} has no full "
                f"checkpoint {where}. Lowering the learning rate cannot revive "
                "a policy whose groups all earn the same reward; stop the run "
                "and start again with a lower learning rate (and a smaller "
                "checkpoint_every)"
            )
        return await control(read_run.run.run_id, "rollback", reason, lr_scale)

    @server.tool()
    async def stop_run(
        run: str | None = None, reason: str = "stopped by an agent"
    ) -> dict[str, Any]:
        """Stop a live run gracefully (finish the step, checkpoint, flush). It can be
        resumed later with `tinker-tui run TASK --resume RUN`. Needs --allow-control."""
        return await control(run, "stop", reason)

    return server


async def serve(db_path: Path, *, allow_control: bool = False) -> None:
    """Serve over stdin/stdout until the client closes them."""
    await build_server(db_path, allow_control=allow_control).run_stdio_async()
