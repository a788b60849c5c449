"""`sparkplay init|plan|up|status|logs|stop|doctor|verify`: the playbooks for people who don't use Ansible.

Thin on purpose (kolla-ansible's model): each command picks a playbook and
its extra variables, confirms what is dangerous, runs it through
ansible-runner and reports. The work is in the playbooks.
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
from typing import Annotated, Any

import typer
import yaml
from rich.table import Table

from sparkplay import __version__, deployment
from sparkplay import doctor as doctor_mod
from sparkplay import inventory as inv_mod
from sparkplay.cli_common import InventoryOpt, ProjectOpt, confirm, err, inventory_of, out, reports_errors
from sparkplay.cli_display import RunDisplay, print_summary
from sparkplay.engines.context import api_address
from sparkplay.engines.plan import UNIT
from sparkplay.engines.systemd import plan_problems
from sparkplay.errors import BadInput, Declined, ExitCode
from sparkplay.fsutil import atomic_write
from sparkplay.paths import default_inventory, project_dir
from sparkplay.recipes import apply as apply_mod
from sparkplay.recipes import catalog
from sparkplay.runner import RunResult, run_playbook

STEPS = {"provision": "provision.yml", "models": "models.yml", "overlay": "overlay.yml", "serve": "serve.yml"}

VerboseOpt = Annotated[int, typer.Option("--verbose", "-v", count=True, help="Show ansible's own output (-vv more).")]
YesOpt = Annotated[bool, typer.Option("--yes", "-y", help="Answer yes: for scripts (nothing is asked).")]
OnlyOpt = Annotated[
    str | None, typer.Option("--only", help="One step: provision, models, overlay or serve (default: all).")
]


def hosts_file(inventory: Path | None) -> Path:
    """The inventory's hosts file (a folder holds hosts.yml)."""
    inventory = inventory_of(inventory)
    path = inventory / "hosts.yml" if inventory.is_dir() else inventory
    if not path.is_file():
        raise BadInput(f"inventory {inventory} does not exist",
                       "write one with `sparkplay init --node HOST ...`, or pass -i with yours")  # fmt: skip
    return path.resolve()


def step_playbook(only: str | None) -> str:
    if only is None:
        return "site.yml"
    if only not in STEPS:
        raise BadInput(f"--only {only} is not a step", f"choose one of {', '.join(STEPS)}")
    return STEPS[only]


def run(
    root: Path, playbook: str, inventory: Path, title: str, *, verbose: int = 0, check: bool = False, **extravars: Any
) -> RunResult:
    with RunDisplay(out, title, live=False if verbose else None, check=check) as display:
        return run_playbook(
            root, playbook, inventory, extravars=extravars, check=check, diff=check, verbose=verbose, on_event=display
        )


def finish(result: RunResult, verb: str) -> None:
    """Summary, then exit with the code the outcome maps to."""
    print_summary(out, result, verb=verb)
    if result.exit_code != ExitCode.OK:
        raise typer.Exit(int(result.exit_code))


def ask(question: str, yes: bool, refusal: str, fix: str) -> None:
    """--yes says yes; a terminal is asked; no terminal and no --yes is a no."""
    if yes:
        return
    if not sys.stdin.isatty():
        raise Declined(refusal, fix)
    if not confirm(question):
        raise Declined("declined: nothing was changed", fix)


# -- init ---------------------------------------------------------------------------


@reports_errors
def init(
    node: Annotated[list[str], typer.Option("--node", help="HOST[:RANK], once per node; the leader (rank 0) first.")],
    inventory: InventoryOpt = None,
    user: Annotated[str | None, typer.Option("--user", help="The ssh user on every node (sudo to root).")] = None,
    yes: YesOpt = False,
    project: ProjectOpt = None,
) -> None:
    """Write a documented inventory for your nodes (asks before replacing one)."""
    root = project_dir(project)
    nodes = inv_mod.parse_nodes(node)
    knobs = (root / "inventory" / "sample" / "group_vars" / "sparkplay_nodes" / "main.yml").read_text()
    files = inv_mod.render(nodes, user, knobs)
    inventory = inventory if inventory is not None else default_inventory(root)
    folder = inventory if inventory.suffix not in (".yml", ".yaml") else inventory.parent
    differing = [rel for rel, text in files.items() if (folder / rel).exists() and (folder / rel).read_text() != text]
    if differing:
        out.print(f"{folder} already holds: {', '.join(differing)}", markup=False, highlight=False)
        ask(
            "Replace them (the old ones are backed up)?",
            yes,
            f"{folder} already has an inventory and there is no terminal to ask on",
            "rerun with --yes to replace it (the old files are backed up)",
        )
        for rel in differing:
            kept = catalog.backup(folder / rel, folder / ".sparkplay-backups" / Path(rel).parent)
            out.print(f"  previous {rel} kept as {kept}", markup=False, highlight=False)
    for rel, text in files.items():
        if atomic_write(folder / rel, text):
            out.print(f"{folder / rel}: written", markup=False, highlight=False)
    out.print(f"next: sparkplay up RECIPE -i {folder}", markup=False, highlight=False)


# -- plan and up -----------------------------------------------------------------


def show_plan(result: RunResult) -> list[str]:
    """Print what would change per host and the foreign files; return the foreign files."""
    foreign = sorted(set(result.custom.get("sparkplay_foreign_files") or []))
    changes = {h: tasks for h, tasks in result.changes.items() if h != "localhost"}
    if not changes:
        out.print("plan: no changes on any host")
    for host, tasks in sorted(changes.items()):
        out.print(f"plan: {host}: {len(tasks)} change(s)", markup=False, highlight=False)
        for task in tasks:
            out.print(f"  ~ {task}", markup=False, highlight=False)
    if foreign:
        out.print("These files exist, were not written by sparkplay, and would be backed up and replaced:")
        for line in foreign:
            out.print(f"  ! {line}", markup=False, highlight=False)
    return foreign


def planned_run(
    root: Path, recipe: str, inventory: Path | None, only: str | None, verbose: int, offline: bool = False
) -> tuple[Path, str, RunResult]:
    """Check the recipe and the inventory, then the check-and-diff run; failures end the command here."""
    catalog.load_for_use(catalog.catalog_dir(root), recipe)
    hosts = hosts_file(inventory)
    playbook = step_playbook(only)
    extra = {"sparkplay_offline": True} if offline else {}
    result = run(root, playbook, hosts, f"plan {recipe}", verbose=verbose, check=True, recipe=recipe, **extra)
    if result.exit_code != ExitCode.OK:
        finish(result, "plan")
    return hosts, playbook, result


@reports_errors
def plan(
    recipe: Annotated[str, typer.Argument(help="A recipe name from the catalog.")],
    inventory: InventoryOpt = None,
    only: OnlyOpt = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print the deployment (leader, paths, checkpoints, overlay) and stop.")
    ] = False,
    offline: Annotated[
        bool,
        typer.Option("--offline", help="Also list every model, image and package a run would download; fail if any."),
    ] = False,
    verbose: VerboseOpt = 0,
    project: ProjectOpt = None,
) -> None:
    """Show what `up` would change on each host, and every foreign file it would replace (changes nothing)."""
    root = project_dir(project)
    if as_json:  # what the playbooks will derive, from the recipe and the inventory alone (no node is asked)
        doc = catalog.load_for_use(catalog.catalog_dir(root), recipe)
        hosts = inv_mod.hosts(hosts_file(inventory))
        lead = next((h for h in hosts if h.rank == 0), hosts[0]).vars
        doc = apply_mod.pin_image(doc, lead.get("sparkplay_image_pins") or {})
        computed = deployment.compute(
            doc, {h.name: h.rank for h in hosts},
            {k: lead.get(k) for k in (*deployment.DEFAULTS, *deployment.API_SETTINGS)},
            lead.get("checkpoint_staged") or [], lead.get("sparkplay_checkpoint_lock") or {},
        )  # fmt: skip
        sys.stdout.write(json.dumps(computed, indent=2) + "\n")
        return
    show_plan(planned_run(root, recipe, inventory, only, verbose, offline)[2])


@reports_errors
def up(
    recipe: Annotated[str, typer.Argument(help="A recipe name from the catalog.")],
    inventory: InventoryOpt = None,
    yes: YesOpt = False,
    only: OnlyOpt = None,
    knob: Annotated[list[str] | None, typer.Option("--set", help="KNOB=VALUE for the recipe (repeatable).")] = None,
    verbose: VerboseOpt = 0,
    project: ProjectOpt = None,
) -> None:
    """Apply RECIPE to the inventory: plan, show, ask, then run for real (workers first, health proven)."""
    root = project_dir(project)
    apply_mod.parse_knobs(knob or [])  # a bad --set fails before anything runs
    hosts, playbook, planned = planned_run(root, recipe, inventory, only, verbose)
    foreign = show_plan(planned)
    choice = apply_mod.record(root, recipe, hosts, knob or [], lambda *_: True, dry_run=True)
    for warning in choice.warnings:
        err.print(f"warning: {warning}", markup=False, highlight=False)
    if choice.action != "unchanged":
        out.print(f"{choice.path}: {choice.action} ({'; '.join(choice.diff)})", markup=False, highlight=False)
    if foreign or planned.changes or choice.action != "unchanged":
        ask(
            f"Apply {recipe} to these hosts?",
            yes,
            "the plan above needs a yes and there is no terminal to ask on: nothing was changed"
            + (f" ({len(foreign)} foreign file(s) listed above)" if foreign else ""),
            "rerun with --yes to go ahead (foreign files are backed up first)",
        )
    recorded = apply_mod.record(root, recipe, hosts, knob or [], lambda *_: True)
    if recorded.backup:
        out.print(f"previous choice kept as {recorded.backup}", markup=False, highlight=False)
    extra: dict[str, Any] = {"recipe": recipe}
    if foreign:
        extra["sparkplay_confirm_overwrite"] = True  # confirmed above; each file is backed up by the roles
    result = run(root, playbook, hosts, f"up {recipe}", verbose=verbose, **extra)
    finish(result, f"up {recipe}")


# -- day two ---------------------------------------------------------------------


@reports_errors
def status(
    inventory: InventoryOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the rows as JSON.")] = False,
    project: ProjectOpt = None,
) -> None:
    """Each rank's unit (state, since, restarts) and the leader's health and served model."""
    root = project_dir(project)
    with out.status("reading every rank", spinner="dots") if out.is_terminal and not as_json else nullcontext():
        result = run_playbook(root, "status.yml", hosts_file(inventory))
    rows = result.custom.get("sparkplay_status")
    if result.exit_code != ExitCode.OK or rows is None:
        finish(result, "status")
        raise typer.Exit(int(ExitCode.FAILED))
    if as_json:
        sys.stdout.write(json.dumps(rows, indent=2) + "\n")
        return
    table = Table(box=None)
    for column in ("rank", "host", "unit", "state", "since", "health", "model", "watchdog"):
        table.add_column(column)
    for row in rows:
        style = "green" if row["up"] else "red"
        table.add_row(*(str(row[c]) for c in ("rank", "host", "unit")), f"[{style}]{row['state']}[/{style}]",
                      *(str(row[c]) for c in ("since", "health", "model", "watchdog")))  # fmt: skip
    out.print(table)
    for problem in plan_problems(rows):
        err.print(f"warning: {problem}", markup=False, highlight=False)
    for row in rows:
        if row.get("watchdog_stood_down"):
            err.print(f"watchdog on {row['host']}: {row['watchdog_stood_down']['why']}", markup=False, highlight=False)


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
    argv = ["journalctl", "-u", UNIT + ".service", "-n", str(lines), "--no-pager", "-o", "short-iso"]
    if follow:
        argv.append("--follow")
    try:
        code = subprocess.run(found[0].shell_argv(argv), check=False).returncode
    except KeyboardInterrupt:
        code = 0  # the way out of --follow
    raise typer.Exit(code)


@reports_errors
def stop(
    inventory: InventoryOpt = None, yes: YesOpt = False, verbose: VerboseOpt = 0, project: ProjectOpt = None
) -> None:
    """Stop serving: the leader first, then the workers (units disabled until the next `up`)."""
    root = project_dir(project)
    hosts = hosts_file(inventory)
    ask("Stop serving on every rank?", yes, "stopping needs a yes and there is no terminal to ask on", "add --yes")
    finish(run(root, "stop.yml", hosts, "stop", verbose=verbose), "stop")


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
    if table:
        out.print(table, markup=False, highlight=False)
    if bundle is not None:
        write_bundle(bundle, result, started, inventory)
    finish(result, "doctor")


def write_bundle(path: Path, result: RunResult, started: float, inventory: Path) -> None:
    """The bundle, gzip NDJSON, 0600, written atomically; secrets out (doctor.redact)."""
    data = result.custom.get("sparkplay_doctor_bundle") or {}
    run_facts = {"seconds": round(time.time() - started, 1), "exit_code": int(result.exit_code),
                 "artifacts": str(result.artifacts or "")}  # fmt: skip
    meta = {"tool": "sparkplay", "version": __version__, "inventory": str(inventory), "run": run_facts,
            "written": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}  # fmt: skip
    secrets = [os.environ.get(name, "") for name in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN")]
    records = doctor_mod.bundle_records(data, meta, secrets)
    body = gzip.compress("".join(json.dumps(r, sort_keys=True, default=str) + "\n" for r in records).encode(), mtime=0)
    atomic_write(path, body, mode=0o600)
    out.print(f"bundle: {path} ({len(records)} records, {len(body)} bytes, secrets removed)", markup=False)


@reports_errors
def verify(inventory: InventoryOpt = None, verbose: VerboseOpt = 0, project: ProjectOpt = None) -> None:
    """Re-hash every checkpoint on every rank and re-verify the overlay; mismatches are re-copied."""
    root = project_dir(project)
    finish(run(root, "verify.yml", hosts_file(inventory), "verify", verbose=verbose), "verify")


@reports_errors
def reset(
    inventory: InventoryOpt = None,
    purge_models: Annotated[
        bool, typer.Option("--purge-models", help="Also delete the checkpoints and overlays (kept otherwise).")
    ] = False,
    remove_packages: Annotated[
        bool, typer.Option("--remove-packages", help="Also remove the packages only sparkplay needs.")
    ] = False,
    yes: YesOpt = False,
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
    ask(f"Reset every node as listed above{models}?", yes, "no terminal to ask on: nothing was changed",
        "pass --yes to reset")  # fmt: skip
    # confirmed above, the plan's edited files included: each keeps a copy of its current bytes beside it
    finish(run(root, "reset.yml", hosts, "reset", verbose=verbose, **extra, sparkplay_confirm_overwrite=True), "reset")


LOOPBACK = ("127.0.0.1", "localhost", "::1")


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
    leader = next((h for h in hosts if h.rank == 0), hosts[0])
    settings = leader.vars
    name = recipe or inv_mod.recorded_recipe(hosts)
    if not name:
        raise BadInput("no recipe given and the inventory records none", "pass the recipe: sparkplay metrics RECIPE")
    doc = catalog.load_for_use(catalog.catalog_dir(root), name)
    address = str(settings.get("ansible_host") or leader.name)

    def target(bind: str, port: int) -> str:
        return f"{'127.0.0.1' if bind in LOOPBACK else address}:{port}"

    api = target(*api_address(doc["serve"], settings.get("serve_bind"), settings.get("serve_port")))
    watchdog = target(str(settings.get("serve_watchdog_metrics_bind") or "127.0.0.1"),
                      int(settings.get("serve_watchdog_metrics_port") or 9899))  # fmt: skip
    labels = {"recipe": name, "engine": doc["engine"]["name"], "host": leader.name}
    config = {"scrape_configs": [
        {"job_name": job, "metrics_path": "/metrics", "static_configs": [{"targets": [where], "labels": dict(labels)}]}
        for job, where in (("sparkplay-engine", api), ("sparkplay-watchdog", watchdog))
    ]}  # fmt: skip
    loopback = [t for t in (api, watchdog) if t.startswith("127.0.0.1:")]
    if loopback:
        sys.stdout.write(f"# {', '.join(loopback)} listen on {leader.name}'s loopback only: run Prometheus there (or\n"
                         "# through an ssh tunnel), or set serve_bind / serve_watchdog_metrics_bind to scrape from\n"
                         "# elsewhere (the engine's API has no authentication).\n")  # fmt: skip
    sys.stdout.write(yaml.safe_dump(config, sort_keys=False))


def register(app: typer.Typer) -> None:
    for command in (init, plan, up, status, logs, stop, doctor, verify, metrics, reset):
        app.command(command.__name__)(command)
