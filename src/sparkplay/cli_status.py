"""`sparkplay status`'s picture: the ranks, the added deployments, the gateway, and why anything is down; once,
or again every few seconds, redrawn in place (`--watch`)."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

from rich.console import Group
from rich.table import Table
from rich.text import Text

from sparkplay.cli_common import out
from sparkplay.cli_display import drift_lines
from sparkplay.engines.systemd import plan_problems
from sparkplay.errors import ExitCode


def as_json(result: Any) -> Any:
    """The primary's rows as before; the added deployments', the gateway and the drift under their own keys."""
    rows = result.custom.get("sparkplay_status")
    gateways = result.custom.get("sparkplay_status_gateway") or []
    added = result.custom.get("sparkplay_status_added") or []
    more = {"added": added} if added else {}
    more |= {"gateway": gateways[0]} if gateways else {}
    drift = result.custom.get("sparkplay_drift") or {}
    more |= {"drift": drift} if drift.get("locked") else {}
    return {"ranks": rows, **more} if more else rows


def _state(row: Mapping[str, Any]) -> str:
    style = "green" if row["up"] else "red"
    return f"[{style}]{row['state']}[/{style}]"


def view(result: Any) -> tuple[Group, list[str]]:
    """(what status prints on stdout, the lines it says on stderr: why each is down, warnings)."""
    custom = result.custom
    rows = custom.get("sparkplay_status") or []
    table = Table(box=None)
    for column in ("rank", "host", "unit", "state", "since", "health", "model", "watchdog"):
        table.add_column(column)
    for row in rows:
        table.add_row(
            *(str(row[c]) for c in ("rank", "host", "unit")),
            _state(row),
            *(str(row[c]) for c in ("since", "health", "model", "watchdog")),
        )
    parts: list[Any] = [table]
    added = custom.get("sparkplay_status_added") or []
    if added:
        more = Table(box=None, title="added deployments (up --add)")
        for column in ("recipe", "host", "unit", "state", "health", "model", "claim GiB"):
            more.add_column(column)
        for row in added:
            more.add_row(
                *(str(row[c]) for c in ("recipe", "host", "unit")),
                _state(row),
                *(str(row[c]) for c in ("health", "model", "claim_gib")),
            )
        parts.append(more)
    for gateway in custom.get("sparkplay_status_gateway") or []:
        parts.append(Text(gateway["line"], style="green" if gateway["up"] else "red"))
    # how the watchdog holds the model's answers (engines/answers.py)
    parts += [Text(f"answers on {row['host']}: {row['answers']}") for row in rows if row.get("answers")]
    words = [f"{row['recipe']} on {row['host']}: {row['why']}" for row in added if row.get("why")]
    words += [f"rank {row['rank']} ({row['host']}): {row['why']}" for row in rows if row.get("why")]
    words += [f"warning: {problem}" for problem in plan_problems(rows)]
    words += [
        f"watchdog on {row['host']}: {row['watchdog_stood_down']['why']}"
        for row in rows
        if row.get("watchdog_stood_down")
    ]
    return Group(*parts), words


def picture(result: Any, every: float, at: str) -> Group:
    """The whole of one look for --watch: the view, its words and the drift, and when it was read."""
    if result.custom.get("sparkplay_status") is None or result.exit_code not in (
        ExitCode.OK,
        ExitCode.HOSTS_UNREACHABLE,
    ):
        said = Text(f"status could not be read at {at} (exit {int(result.exit_code)}); trying again", style="red")
        return Group(said, Text(f"every {every:g} s; Ctrl-C stops", style="dim"))
    shown, words = view(result)
    lines = [Text(line, style="yellow") for line in words]
    lines += [Text(text, style=style) for text, style in drift_lines(result.custom)]
    return Group(shown, *lines, Text(f"read at {at}; again every {every:g} s; Ctrl-C stops", style="dim"))


def watch(read: Callable[[], Any], every: float, rounds: int | None = None) -> int:
    """Read the status every `every` seconds and redraw it: in place on a terminal, else one picture after the
    other. Ctrl-C ends it (exit 0); `rounds` bounds it (tests)."""
    from rich.live import Live

    done = 0
    live = Live(console=out, auto_refresh=False, transient=False) if out.is_terminal else None
    try:
        if live is not None:
            live.start()
        while rounds is None or done < rounds:
            started = time.monotonic()
            shown = picture(read(), every, time.strftime("%H:%M:%S"))
            if live is not None:
                live.update(shown, refresh=True)
            else:
                out.print(shown)
                out.print()
            done += 1
            if rounds is not None and done >= rounds:
                break
            time.sleep(max(0.0, every - (time.monotonic() - started)))
    except KeyboardInterrupt:
        pass
    finally:
        if live is not None:
            live.stop()
    return 0
