"""The `sparkplay` command: a thin layer that picks what to run and reports it.

Work happens in the library modules (and, for hosts, in the playbooks); the
CLI parses, confirms and prints. Every SparkplayError becomes one line on
stderr and the exit code its class names.
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from sparkplay import __version__, cli_day2, cli_lock, cli_run, cli_soak
from sparkplay.cli_bench import bench
from sparkplay.cli_common import EXIT_CODES_HELP, ProjectOpt, out, reports_errors
from sparkplay.cli_overlay import overlay_app
from sparkplay.cli_recipes import apply, recipe_app
from sparkplay.errors import ExitCode
from sparkplay.lab import faults as lab_faults
from sparkplay.lab import inventory as lab_inventory
from sparkplay.lab import manager as lab_manager
from sparkplay.lab import snapshot as lab_snapshot
from sparkplay.lab import soak as lab_soak
from sparkplay.paths import data_dir, project_dir

app = typer.Typer(
    help="Serve big models on a pair (or more) of DGX Sparks, driven by inference recipes.",
    epilog=EXIT_CODES_HELP,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
lab_app = typer.Typer(
    help="The local test bed: systemd containers joined by a simulated ConnectX-7 cable.",
    epilog=EXIT_CODES_HELP,
    no_args_is_help=True,
)
# one way: a group is a Typer of its own, a command is a function named for it
for name, group in (("lab", lab_app), ("recipe", recipe_app), ("overlay", overlay_app)):
    app.add_typer(group, name=name, no_args_is_help=True)
for command in (*cli_run.COMMANDS, apply, bench, *cli_day2.COMMANDS, *cli_lock.COMMANDS, *cli_soak.COMMANDS):
    app.command(command.__name__)(command)


def _version(value: bool) -> None:
    if value:
        out.print(f"sparkplay {__version__}")
        raise typer.Exit()


@app.callback()
def root(
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit.")
    ] = False,
) -> None:
    """sparkplay: recipes in, a multi-node engine serving out."""


@lab_app.command("up")
@reports_errors
def lab_up(
    nodes: Annotated[int, typer.Option("--nodes", "-n", help="How many nodes (1-8); 2 is a Spark pair.")] = 2,
    topology: Annotated[
        str,
        typer.Option(
            "--topology", help="switch (a direct cable for 2 nodes) or ring (3+ nodes, each twin to another neighbour)."
        ),
    ] = "switch",
    snapshot: Annotated[
        str | None,
        typer.Option("--snapshot", help="Start each rank from the snapshot of that name (sparkplay lab snapshot)."),
    ] = None,
    project: ProjectOpt = None,
) -> None:
    """Build the node image if needed, start the nodes, wire the cable, write inventory/lab."""
    lab_manager.validate_nodes(nodes)  # before looking for a project or an engine
    lab_manager.validate_topology(nodes, topology)
    if snapshot is not None:
        lab_snapshot.validate_name(snapshot)
    root_dir = project_dir(project)
    started = time.monotonic()
    report = lab_manager.up(
        nodes,
        root_dir,
        topology=topology,
        snapshot_name=snapshot,
        say=lambda line: out.print(f"[dim]{line}[/dim]"),
    )
    elapsed = time.monotonic() - started
    if report.changes:
        for change in report.changes:
            out.print(f"  changed: {change}", markup=False, highlight=False)
        out.print(f"lab up: {len(report.changes)} change(s), {nodes} node(s) ready in {elapsed:.1f} s")
    else:
        out.print(f"lab up: nothing to change; {nodes} node(s) running and cabled ({elapsed:.1f} s)")
    out.print(f"inventory: {lab_inventory.paths(data_dir(root_dir))[0]}", markup=False, highlight=False)


@lab_app.command("down")
@reports_errors
def lab_down(
    purge_images: Annotated[
        bool, typer.Option("--purge-images", help="Also remove the cached node images (the next up rebuilds).")
    ] = False,
    project: ProjectOpt = None,
) -> None:
    """Remove the lab's containers, network, host links and inventory (only what lab up made)."""
    report = lab_manager.down(project_dir(project), purge_images=purge_images)
    for change in report.changes:
        out.print(f"  removed: {change.removesuffix(' removed')}", markup=False, highlight=False)
    out.print(f"lab down: {len(report.changes)} object(s) removed" if report.changes else "lab down: nothing to remove")


@lab_app.command("snapshot")
@reports_errors
def lab_snapshot_save(
    name: Annotated[str, typer.Argument(help="The snapshot's name (letters, digits, '.', '_', '-').")],
) -> None:
    """Keep each running node's disk as an image, to start a lab from later (lab up --snapshot NAME)."""
    lab_snapshot.validate_name(name)
    started = time.monotonic()
    report = lab_manager.save_snapshot(name)
    for change in report.changes:
        out.print(f"  kept: {change}", markup=False, highlight=False)
    out.print(f"lab snapshot {name}: {len(report.changes)} node(s) in {time.monotonic() - started:.1f} s")


@lab_app.command("status")
@reports_errors
def lab_status(
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")] = False,
) -> None:
    """Show each lab node: container state, systemd state, cable links."""
    rows = lab_manager.status()
    if as_json:
        out.print_json(json.dumps([asdict(row) for row in rows]))
        return
    if not rows:
        out.print("no lab nodes (start them with: sparkplay lab up)")
        return
    table = Table(title="sparkplay lab")
    for column in ("rank", "container", "state", "systemd", *lab_manager.cable.TWINS):
        table.add_column(column)
    colour = {"up": "green", "down": "red", "missing": "yellow"}
    for row in rows:
        links = [f"[{colour[state]}]{state}[/]" for state in row.links.values()]
        table.add_row(str(row.rank), row.container, row.state, row.systemd, *links)
    out.print(table)


RankArg = Annotated[int, typer.Argument(help="The node's rank (0 is the leader).")]
HardOpt = Annotated[bool, typer.Option("--hard", help="No clean shutdown: the plug pulled (or reset pressed).")]


def _said(what: str, report: lab_manager.Report, started: float) -> None:
    for change in report.changes:
        out.print(f"  {change}", markup=False, highlight=False)
    out.print(f"lab {what}: done in {time.monotonic() - started:.1f} s", markup=False, highlight=False)


@lab_app.command("reboot")
@reports_errors
def lab_reboot(rank: RankArg, hard: HardOpt = False, project: ProjectOpt = None) -> None:
    """Reboot a lab node: its systemd shuts down and boots again, its disks and its cable stay."""
    started = time.monotonic()
    _said("reboot", lab_faults.reboot(data_dir(project_dir(project)), rank, hard=hard), started)


@lab_app.command("off")
@reports_errors
def lab_off(rank: RankArg, hard: HardOpt = False, project: ProjectOpt = None) -> None:
    """Power a lab node off; its peers keep their ports, with no carrier, until `lab on`."""
    started = time.monotonic()
    _said("off", lab_faults.power_off(data_dir(project_dir(project)), rank, hard=hard), started)


@lab_app.command("on")
@reports_errors
def lab_on(rank: RankArg, project: ProjectOpt = None) -> None:
    """Power a lab node on again: it boots with its cable plugged where it was."""
    started = time.monotonic()
    _said("on", lab_faults.power_on(data_dir(project_dir(project)), rank), started)


@lab_app.command("pull")
@reports_errors
def lab_pull(
    twin: Annotated[str | None, typer.Option("--twin", help="Pull one twin's link only (default: the cable).")] = None,
    project: ProjectOpt = None,
) -> None:
    """Pull the cable between two lab nodes (or one twin's link): no carrier on either end until `lab plug`."""
    started = time.monotonic()
    _said("pull", lab_faults.pull(data_dir(project_dir(project)), twin), started)


@lab_app.command("plug")
@reports_errors
def lab_plug(project: ProjectOpt = None) -> None:
    """Plug the lab's cable back in (every pulled twin)."""
    started = time.monotonic()
    _said("plug", lab_faults.plug(data_dir(project_dir(project))), started)


@lab_app.command("soak")
@reports_errors
def lab_soak_command(
    report: Annotated[Path, typer.Option("--report", help="Folder for report.json, report.md and requests.png.")],
    minutes: Annotated[float, typer.Option("--minutes", help="How long the load runs.")] = 60,
    seed: Annotated[int, typer.Option("--seed", help="Seeds the fault schedule and the load's mix.")] = 1,
    faults: Annotated[
        str | None,
        typer.Option("--faults", help=f"Comma-separated kinds to make (default: all): {', '.join(lab_soak.KINDS)}."),
    ] = None,
    project: ProjectOpt = None,
) -> None:
    """Serve several models on the lab under load for MINUTES while faults come from a seeded schedule; report
    availability outside the faults, each recovery against its bound, leaks and tracebacks (exit 1 if a rule
    failed)."""
    root = project_dir(project)
    kinds = lab_soak.allowed(faults)

    def say(line: str) -> None:
        out.print(line, markup=False, highlight=False)

    done = lab_soak.run(root, data_dir(root), minutes=minutes, seed=seed, kinds=kinds, report_dir=report, say=say)
    for line in lab_soak.summary_lines(done):
        say(line)
    say(f"report: {report / 'report.md'}")
    if not done["passed"]:
        raise typer.Exit(int(ExitCode.FAILED))


def main() -> None:
    try:
        app()
    except BrokenPipeError:  # `sparkplay ... | head` must not print a traceback
        sys.exit(int(ExitCode.FAILED))
