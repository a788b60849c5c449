"""What a person sees while a playbook runs: live on a terminal, plain lines otherwise.

Fed ansible-runner events one at a time (runner.run_playbook's on_event).
On a terminal: the current play and task, one line per host with its
counts, and a progress bar where a role reports progress (mirror bytes,
the health wait). Without one (CI, a pipe): one line per play, per change,
per progress report and per failure, so logs read well too.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from types import TracebackType
from typing import Any

from rich.console import Console, Group
from rich.live import Live
from rich.markup import escape
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from sparkplay.checkpoints import progress_line, sync_progress
from sparkplay.runner import RunResult, progress_of

COUNTED = {
    "runner_on_ok": "ok",
    "runner_on_failed": "failed",
    "runner_on_skipped": "skipped",
    "runner_on_unreachable": "unreachable",
}


class RunDisplay:
    """A context manager and an event callback."""

    def __init__(self, console: Console, title: str, *, live: bool | None = None, check: bool = False) -> None:
        self.console = console
        self.title = title
        self.check = check
        self.live_mode = console.is_terminal if live is None else live
        self.play = ""
        self.task = ""
        self.task_started = time.monotonic()
        self.hosts: dict[str, dict[str, Any]] = {}
        self.progress = Progress(
            TextColumn("{task.description}"), BarColumn(), TextColumn("{task.percentage:>3.0f}%"), TimeElapsedColumn()
        )
        self.bars: dict[str, Any] = {}
        self.waiting: str | None = None
        self._live: Live | None = None

    def __enter__(self) -> RunDisplay:
        if self.live_mode:
            self._live = Live(self._render(), console=self.console, refresh_per_second=4, transient=True)
            self._live.__enter__()
        else:
            self.console.print(f"{self.title}", markup=False, highlight=False)
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        if self._live is not None:
            self._live.__exit__(kind, exc, tb)

    # -- events ---------------------------------------------------------------

    def __call__(self, event: Mapping[str, Any]) -> None:
        kind = event.get("event", "")
        data = event.get("event_data") or {}
        if kind == "playbook_on_play_start":
            self.play = str(data.get("play", "")).strip()
            self._say(f"PLAY  {self.play}")
        elif kind == "playbook_on_task_start":
            self.task = str(data.get("task", "")).strip()
            self.task_started = time.monotonic()
            self.waiting = None
        elif kind in COUNTED:
            self._count(data.get("host", ""), COUNTED[kind], data)
        elif kind == "runner_retry":
            self._retry(data)
        if self._live is not None:
            self._live.update(self._render())

    def _count(self, host: str, outcome: str, data: Mapping[str, Any]) -> None:
        res = data.get("res") or {}
        if outcome == "ok" and res.get("changed"):
            outcome = "changed"
        state = self.hosts.setdefault(host, {"ok": 0, "changed": 0, "failed": 0, "skipped": 0, "unreachable": 0})
        state[outcome] += 1
        state["last"] = outcome
        if outcome == "changed" and not self.check:  # a plan lists its changes per host at the end
            self._say(f"  {'changed':<12} {host}  {data.get('task', '')}", style="yellow")
        elif outcome in ("failed", "unreachable") and not data.get("ignore_errors"):
            self._say(f"  {outcome:<12} {host}  {data.get('task', '')}", style="red")
        message = res.get("msg")
        if outcome == "ok" and isinstance(message, str):
            done_total = progress_of(message)
            if done_total:
                self._bar(message.split(":", 1)[0], *done_total)
                if not self.live_mode:
                    self._say(f"  progress     {message}", style="cyan")
            elif " answers at " in message:
                self._say(f"  {message}", style="green")

    def _retry(self, data: Mapping[str, Any]) -> None:
        host = data.get("host", "")
        follow = sync_progress(data.get("res") or {})
        if follow is not None:  # a checkpoint sync being followed: its bytes, as a bar
            line = progress_line(host, follow)
            self._bar(host, follow.get("bytes_done", 0) / 1e9, (follow.get("bytes_total") or 1) / 1e9)
            self.waiting = line
            if not self.live_mode:
                self._say(f"  progress     {line}", style="cyan")
            return
        waited = time.monotonic() - self.task_started
        self.waiting = f"{host}: {self.task} (waiting {waited:.0f} s)"
        # plain mode: one line every ~30 s, not one per retry
        if not self.live_mode and int(waited) // 30 != int(waited - 2) // 30:
            self._say(f"  waiting      {self.waiting}", style="cyan")

    def _bar(self, label: str, done: float, total: float) -> None:
        if label not in self.bars:
            self.bars[label] = self.progress.add_task(f"mirror to {label}", total=total)
        self.progress.update(self.bars[label], completed=done, total=total)

    def _say(self, line: str, style: str = "") -> None:
        if self._live is not None:
            self._live.console.print(Text(line, style=style))
        else:
            self.console.print(Text(line, style=style))

    # -- the live view ---------------------------------------------------------

    def _render(self) -> Group:
        head = Text.assemble(
            (self.title, "bold"), "\n", ("PLAY  ", "dim"), self.play, "\n", ("TASK  ", "dim"), self.task
        )
        table = Table(box=None, pad_edge=False, show_header=bool(self.hosts))
        for column in ("host", "last", "ok", "changed", "failed", "unreachable"):
            table.add_column(column)
        for host, state in sorted(self.hosts.items()):
            last = state.get("last", "")
            style = {"changed": "yellow", "failed": "red", "unreachable": "red"}.get(last, "green")
            table.add_row(
                host, Text(last, style=style), *(str(state[k]) for k in ("ok", "changed", "failed", "unreachable"))
            )
        parts: list[Any] = [head, table]
        if self.bars:
            parts.append(self.progress)
        if self.waiting:
            parts.append(Text(self.waiting, style="cyan"))
        return Group(*parts)


def print_summary(console: Console, result: RunResult, *, verb: str = "run") -> None:
    """Per-host counts, then each failure with its task, host, message and output tail."""
    table = Table(title=f"{verb}: {result.status}" + (" (interrupted)" if result.interrupted else ""), box=None)
    for column in ("host", "ok", "changed", "failed", "unreachable", "skipped"):
        table.add_column(column, justify="left" if column == "host" else "right")
    for host, stats in sorted(result.stats.items()):
        if host == "localhost":
            continue
        table.add_row(host, *(str(stats.get(k, 0)) for k in ("ok", "changed", "failed", "unreachable", "skipped")))
    console.print(table)
    for failure in result.failures:
        what = "unreachable" if failure.unreachable else "failed"
        console.print(Text.assemble((f"{what}: ", "bold red"), f"{failure.host}: {failure.task}"))
        console.print(Text(f"  {failure.message}"))
        for line in failure.output:
            console.print(Text(f"  | {line}", style="dim"))
    if result.interrupted:
        console.print(
            "Interrupted: the playbook was stopped between tasks; what finished is listed above. Run again to go on."
        )
    if result.artifacts:
        console.print(f"[dim]full log: {escape(str(result.artifacts))}[/dim]")


def drift_lines(custom: Mapping[str, Any]) -> list[tuple[str, str]]:
    """The cluster's drift from its lock (the sparkplay_drift stat) as (line, style); nothing unlocked."""
    drift = custom.get("sparkplay_drift") or {}
    if not drift.get("locked"):
        return []
    if not drift.get("lines"):
        return [(f"stack: as locked ({drift.get('hash')})", "")]
    return [(f"drift from the lock ({drift.get('hash')}):", "yellow"), *((f"  {x}", "yellow") for x in drift["lines"])]


def print_drift(console: Console, custom: Mapping[str, Any]) -> None:
    """The cluster's drift from its lock, a line per difference; nothing unlocked."""
    for line, style in drift_lines(custom):
        console.print(line, style=style or None, markup=False, highlight=False)
