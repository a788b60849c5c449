"""`sparkplay soak`: load through the served API for MINUTES, faults only when named, and the lab soak's report.

Thin like cli_run: sparkplay.soak.cluster does the work; this asks before any fault and reports.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from sparkplay.cli_common import InventoryOpt, ProjectOpt, out, reports_errors
from sparkplay.cli_run import YesOpt, ask, hosts_file
from sparkplay.errors import ExitCode
from sparkplay.lab.soak import summary_lines
from sparkplay.paths import project_dir
from sparkplay.soak import client as soak_client
from sparkplay.soak import cluster


@reports_errors
def soak(
    report: Annotated[Path, typer.Option("--report", help="Folder for report.json, report.md and requests.png.")],
    url: Annotated[
        str,
        typer.Option("--url", help="The API on this machine's loopback: a tunnel to the leader's gateway."),
    ] = "http://127.0.0.1:9930/v1",
    minutes: Annotated[float, typer.Option("--minutes", help="How long the load runs.")] = 60,
    faults: Annotated[
        str | None,
        typer.Option(
            "--faults",
            help=f"Comma-separated kinds to make on the nodes (default: none): {', '.join(cluster.KINDS)}.",
        ),
    ] = None,
    bound: Annotated[
        float | None,
        typer.Option("--bound", help="Seconds serving may take to answer again after a fault (default: per kind)."),
    ] = None,
    rate: Annotated[float, typer.Option("--rate", help="Requests a second (bursts of six come every 2 min).")] = 1,
    seed: Annotated[int, typer.Option("--seed", help="Seeds the fault schedule and the load's mix.")] = 1,
    key_file: Annotated[
        Path | None, typer.Option("--key-file", help="A file holding the API's key (the gateway's, when it has keys).")
    ] = None,
    inventory: InventoryOpt = None,
    yes: YesOpt = False,
    project: ProjectOpt = None,
) -> None:
    """Send a steady load with bursts through the served API for MINUTES, across every model it lists; make the
    faults named (none by default: engine-kill, engine-restart; reboot only by name) on the nodes serving, and
    report availability outside the faults and each recovery against its bound (exit 1 if a rule failed)."""
    root = project_dir(project)
    hosts = hosts_file(inventory)
    schedule = cluster.Schedule(minutes, cluster.allowed(faults), seed, rate, bound)
    client = soak_client.Client(url, soak_client.read_key(key_file))
    if schedule.kinds:
        named = ", ".join(schedule.kinds)
        ask(
            f"The soak will make {named} on the nodes of {hosts} while it runs. Go on?",
            yes,
            f"the soak makes {named} on real nodes and no terminal is here to ask",
            "pass --yes to allow the faults named, or leave out --faults",
        )

    def say(line: str) -> None:
        out.print(line, markup=False, highlight=False)

    done = cluster.run(root, hosts, client, schedule, report, say)
    for line in summary_lines(done):
        say(line)
    say(f"report: {report / 'report.md'}")
    if not done["passed"]:
        raise typer.Exit(int(ExitCode.FAILED))


COMMANDS = (soak,)
