"""`sparkplay status|logs|stop|doctor|verify|reset|metrics`: day two, the playbooks that read and undo.

Thin like cli_run: each command picks a playbook, confirms what is dangerous,
runs it through ansible-runner and reports.
"""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import time
from contextlib import nullcontext
from pathlib import Path
from typing import Annotated

import typer
import yaml

from sparkplay import __version__, addresses, cli_status
from sparkplay import doctor as doctor_mod
from sparkplay import inventory as inv_mod
from sparkplay.cli_common import InventoryOpt, NoWaitOpt, ProjectOpt, changes_nodes, err, out, reports_errors
from sparkplay.cli_display import print_drift, print_summary
from sparkplay.cli_run import (
    VerboseOpt,
    YesOpt,
    ask,
    finish,
    hosts_file,
    leader_host,
    run,
    say_findings,
    show_plan,
    stage_one,
)
from sparkplay.engines.names import UNITS
from sparkplay.errors import BadInput, ExitCode
from sparkplay.fsutil import atomic_write
from sparkplay.paths import project_dir
from sparkplay.runner import RunResult, run_playbook

# -- day two ---------------------------------------------------------------------


@reports_errors
def status(
    inventory: InventoryOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the rows as JSON.")] = False,
    watch: Annotated[
        float,
        typer.Option(
            "--watch",
            help="Read again every SECONDS and redraw in place (a terminal; elsewhere each picture follows the last)"
            " until Ctrl-C.",
            min=0,
        ),
    ] = 0,
    project: ProjectOpt = None,
) -> None:
    """Each rank's unit (state, since, restarts) and the leader's health and served model."""
    root = project_dir(project)
    if watch:
        if as_json:
            raise BadInput("--watch redraws a picture for a person", "use --json without --watch, or --watch alone")
        raise typer.Exit(cli_status.watch(lambda: run_playbook(root, "status.yml", hosts_file(inventory)), watch))
    with out.status("reading every rank", spinner="dots") if out.is_terminal and not as_json else nullcontext():
        result = run_playbook(root, "status.yml", hosts_file(inventory))
    rows = result.custom.get("sparkplay_status")
    # a node that is off is a row ("unreachable", and why) and exit 5; any other failure ends the status
    if rows is None or result.exit_code not in (ExitCode.OK, ExitCode.HOSTS_UNREACHABLE):
        finish(result, "status")
        raise typer.Exit(int(ExitCode.FAILED))
    if as_json:  # the primary's rows as before; the added deployments' and the gateway under their own keys
        sys.stdout.write(json.dumps(cli_status.as_json(result), indent=2) + "\n")
        raise typer.Exit(int(result.exit_code))
    picture, words = cli_status.view(result)
    out.print(picture)
    for line in words:  # why each is down, warnings, the watchdog's word: said on stderr
        err.print(line, markup=False, highlight=False)
    print_drift(out, result.custom)
    if result.exit_code == ExitCode.HOSTS_UNREACHABLE:
        raise typer.Exit(int(ExitCode.HOSTS_UNREACHABLE))


@reports_errors
def logs(
    inventory: InventoryOpt = None,
    rank: Annotated[int, typer.Option("--rank", help="Whose journal (0 is the leader).")] = 0,
    follow: Annotated[bool, typer.Option("--follow", "-f", help="Keep printing new lines.")] = False,
    lines: Annotated[int, typer.Option("--lines", "-n", help="How many recent lines.")] = 100,
) -> None:
    """The serving unit's journal on one rank."""
    found = [h for h in inv_mod.hosts(hosts_file(inventory)) if h.rank == rank]
    if not found:
        raise BadInput(f"no host has rank {rank} in {inventory}", "pick a rank the inventory lists")
    argv = ["journalctl", "-u", UNITS["serve"], "-n", str(lines), "--no-pager", "-o", "short-iso"]
    if follow:
        argv.append("--follow")
    try:
        code = subprocess.run(found[0].shell_argv(argv), check=False).returncode
    except KeyboardInterrupt:
        code = 0  # the way out of --follow
    raise typer.Exit(code)


@reports_errors
@changes_nodes
def stop(
    recipe: Annotated[str | None, typer.Argument(help="Stop only this recipe's deployment (default: all).")] = None,
    inventory: InventoryOpt = None,
    yes: YesOpt = False,
    no_wait: NoWaitOpt = False,
    verbose: VerboseOpt = 0,
    project: ProjectOpt = None,
) -> None:
    """Stop serving: each leader first, then the workers (units disabled until the next `up`). An added
    deployment stopped is removed, its memory no longer claimed; the others keep answering."""
    root = project_dir(project)
    hosts = hosts_file(inventory)
    what = f"{recipe}'s deployment" if recipe else "every deployment on every rank"
    ask(f"Stop {what}?", yes, "stopping needs a yes and there is no terminal to ask on", "add --yes")
    extra = {"stop_recipe": recipe} if recipe else {}
    finish(run(root, "stop.yml", hosts, f"stop {recipe or ''}".strip(), verbose=verbose, **extra), "stop")


@reports_errors
def doctor(
    inventory: InventoryOpt = None,
    bundle: Annotated[
        Path | None,
        typer.Option("--bundle", help="Also write a gzip NDJSON bundle of every node's facts, for a bug report."),
    ] = None,
    verbose: VerboseOpt = 0,
    project: ProjectOpt = None,
) -> None:
    """Read-only diagnosis of every node: checks, links, jumbo pings, fabric.env, ssh over the cable."""
    root = project_dir(project)
    started = time.time()
    extra = {"doctor_bundle": True} if bundle else {}
    result = run(root, "doctor.yml", hosts_file(inventory), "doctor", verbose=verbose, **extra)
    table = result.custom.get("sparkplay_doctor_table")
    if table:  # the table's lines, as a person reads them (never the list they travel in)
        out.print("\n".join(map(str, table)) if isinstance(table, list) else str(table), markup=False, highlight=False)
    print_drift(out, result.custom)
    if bundle is not None:
        write_bundle(bundle, result, started, inventory)
    finish(result, "doctor")


def write_bundle(path: Path, result: RunResult, started: float, inventory: Path) -> None:
    """The bundle, gzip NDJSON, 0600, written atomically; secrets out (doctor.redact)."""
    data = result.custom.get("sparkplay_doctor_bundle") or {}
    run_facts = {
        "seconds": round(time.time() - started, 1),
        "exit_code": int(result.exit_code),
        "artifacts": str(result.artifacts or ""),
    }
    meta = {
        "tool": "sparkplay",
        "version": __version__,
        "inventory": str(inventory),
        "run": run_facts,
        "written": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    secrets = [os.environ.get(name, "") for name in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN")]
    records = doctor_mod.bundle_records(data, meta, secrets)
    body = gzip.compress("".join(json.dumps(r, sort_keys=True, default=str) + "\n" for r in records).encode(), mtime=0)
    atomic_write(path, body, mode=0o600)
    out.print(f"bundle: {path} ({len(records)} records, {len(body)} bytes, secrets removed)", markup=False)


@reports_errors
@changes_nodes
def verify(
    inventory: InventoryOpt = None, no_wait: NoWaitOpt = False, verbose: VerboseOpt = 0, project: ProjectOpt = None
) -> None:
    """Re-hash every checkpoint on every rank against rank 0's record and re-verify the overlay: each file that
    differs is named and re-copied from rank 0's verified copy; exit 0 all verified, 8 repaired, 4 not."""
    root = project_dir(project)
    result = run(root, "verify.yml", hosts_file(inventory), "verify", verbose=verbose)
    found = say_findings(result)
    reloaded = [r for r in result.custom.get("sparkplay_reloaded") or [] if isinstance(r, dict)]
    for row in reloaded:
        err.print(
            f"restarted: {row.get('recipe')} ({row.get('unit')}), workers first: on {row.get('host')} it served "
            f"{', '.join(row.get('replaced') or [])}, replaced since it started; it answers from the verified copy",
            markup=False,
            highlight=False,
        )
    print_summary(out, result, verb="verify")
    if result.exit_code != ExitCode.OK:
        raise typer.Exit(int(result.exit_code))
    if found or reloaded:
        err.print(
            f"verify: {len(found)} file(s) repaired from rank 0's verified copy, {len(reloaded)} engine(s) "
            f"restarted onto verified files (exit {int(ExitCode.REPAIRED)})",
            markup=False,
            highlight=False,
        )
        raise typer.Exit(int(ExitCode.REPAIRED))
    out.print("verify: every checkpoint verified on every rank", markup=False, highlight=False)


@reports_errors
@changes_nodes
def reset(
    inventory: InventoryOpt = None,
    purge_models: Annotated[
        bool, typer.Option("--purge-models", help="Also delete the checkpoints and overlays (kept otherwise).")
    ] = False,
    remove_packages: Annotated[
        bool, typer.Option("--remove-packages", help="Also remove the packages only sparkplay needs.")
    ] = False,
    yes: YesOpt = False,
    no_wait: NoWaitOpt = False,
    verbose: VerboseOpt = 0,
    project: ProjectOpt = None,
) -> None:
    """Undo sparkplay on every node (units, files put back as they were, tools, keys); shows the plan, asks first."""
    root = project_dir(project)
    hosts = hosts_file(inventory)
    extra = {"sparkplay_reset_purge_models": purge_models, "sparkplay_reset_remove_packages": remove_packages}
    planned = run(root, "reset.yml", hosts, "plan reset", verbose=verbose, check=True, **extra)
    if planned.exit_code != ExitCode.OK:
        finish(planned, "plan")
    show_plan(planned)
    if not any(tasks for host, tasks in planned.changes.items() if host != "localhost"):
        out.print("reset: nothing of sparkplay's is left on any node")
        return
    models = " and DELETE the checkpoints and overlays" if purge_models else " (checkpoints and overlays kept)"
    ask(
        f"Reset every node as listed above{models}?",
        yes,
        "no terminal to ask on: nothing was changed",
        "pass --yes to reset",
    )
    # confirmed above, the plan's edited files included: each keeps a copy of its current bytes beside it
    finish(run(root, "reset.yml", hosts, "reset", verbose=verbose, **extra, sparkplay_confirm_overwrite=True), "reset")


@reports_errors
def metrics(
    inventory: InventoryOpt = None,
    recipe: Annotated[
        str | None, typer.Argument(help="The recipe served (default: the one `apply` recorded in the inventory).")
    ] = None,
    project: ProjectOpt = None,
) -> None:
    """Print a Prometheus scrape configuration for the served model: the engine's /metrics and the watchdog's."""
    root = project_dir(project)
    hosts = inv_mod.hosts(hosts_file(inventory))
    leader = leader_host(hosts)
    settings = leader.vars
    name = recipe or inv_mod.recorded_recipe(hosts)
    if not name:
        raise BadInput("no recipe given and the inventory records none", "pass the recipe: sparkplay metrics RECIPE")
    doc, computed = stage_one(root, name, hosts)
    address = str(settings.get("ansible_host") or leader.name)

    def target(bind: str, port: int) -> str:
        return f"{addresses.LOOPBACK_ADDRESS if addresses.is_loopback(bind) else address}:{port}"

    api = target(computed["api"]["bind"], computed["api"]["port"])
    # the inventory's, else the serve role's own defaults (written there once)
    defaults = yaml.safe_load((root / "roles" / "serve" / "defaults" / "main.yml").read_text())
    bind, port = "serve_watchdog_metrics_bind", "serve_watchdog_metrics_port"
    watchdog = target(str(settings.get(bind) or defaults[bind]), int(settings.get(port) or defaults[port]))
    labels = {"recipe": name, "engine": doc["engine"]["name"], "host": leader.name}
    config = {
        "scrape_configs": [
            {
                "job_name": job,
                "metrics_path": "/metrics",
                "static_configs": [{"targets": [where], "labels": dict(labels)}],
            }
            for job, where in (("sparkplay-engine", api), ("sparkplay-watchdog", watchdog))
        ]
    }
    loopback = [t for t in (api, watchdog) if t.startswith("127.0.0.1:")]
    if loopback:
        sys.stdout.write(
            f"# {', '.join(loopback)} listen on {leader.name}'s loopback only: run Prometheus there (or\n"
            "# through an ssh tunnel), or set serve_bind / serve_watchdog_metrics_bind to scrape from\n"
            "# elsewhere (the engine's API has no authentication).\n"
        )
    sys.stdout.write(yaml.safe_dump(config, sort_keys=False))


COMMANDS = (status, logs, stop, doctor, verify, reset, metrics)
