"""`sparkplay init|plan|up`: the playbooks for people who don't use Ansible (day two: cli_day2).

Thin on purpose (kolla-ansible's model): each command picks a playbook and
its extra variables, confirms what is dangerous, runs it through
ansible-runner and reports. The work is in the playbooks.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from sparkplay import deployment, integrity, settings, stack, varsfile
from sparkplay import inventory as inv_mod
from sparkplay.cli_common import (
    InventoryOpt,
    NoWaitOpt,
    ProjectOpt,
    changes_nodes,
    confirm,
    err,
    inventory_of,
    out,
    reports_errors,
)
from sparkplay.cli_display import RunDisplay, print_summary
from sparkplay.errors import BadInput, Declined, ExitCode
from sparkplay.fsutil import atomic_write
from sparkplay.paths import default_inventory, project_dir
from sparkplay.recipes.store import apply as apply_mod
from sparkplay.recipes.store import catalog
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
        raise BadInput(
            f"inventory {inventory} does not exist",
            "write one with `sparkplay init --node HOST ...`, or pass -i with yours",
        )
    return path.resolve()


def leader_host(hosts: list[inv_mod.Host]) -> inv_mod.Host:
    """The inventory's leader by the Deployment's rule (a layout without one is refused there)."""
    name = deployment.leader_of({h.name: h.rank for h in hosts})
    return next(h for h in hosts if h.name == name)


def stage_one(root: Path, name: str, hosts: list[inv_mod.Host]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The recipe as the playbooks load it, and stage one of its Deployment from the leader's settings."""
    lead = leader_host(hosts).vars
    doc = apply_mod.pin_image(
        catalog.load_for_use(catalog.catalog_dir(root), name), lead.get("sparkplay_image_pins") or {}
    )
    computed = deployment.compute(
        doc,
        {h.name: h.rank for h in hosts},
        {k: lead.get(k) for k in settings.SETTINGS["stage_one"]},
        lead.get("checkpoint_staged") or [],
        lead.get("sparkplay_checkpoint_lock") or {},
    )
    return doc, computed


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


def say_findings(result: RunResult) -> list[dict[str, Any]]:
    """Each file a rank's verified copy had wrong (the checkpoint role's findings), a line each on stderr."""
    found = [f for f in result.custom.get("sparkplay_checkpoint_findings") or [] if isinstance(f, dict)]
    for line in integrity.verify_lines(found):
        err.print(f"found: {line}", markup=False, highlight=False)
    return found


def ask(question: str, yes: bool, refusal: str, fix: str) -> None:
    """--yes says yes; a terminal is asked; no terminal and no --yes is a no."""
    if yes:
        return
    if not sys.stdin.isatty():
        raise Declined(refusal, fix)
    if not confirm(question):
        raise Declined("declined: nothing was changed", fix)


def lock_file(hosts: Path) -> Path:
    """The inventory's stack lock (sparkplay.stack.FILE, beside its hosts file)."""
    return hosts.parent / stack.FILE


def locked(hosts: Path) -> dict[str, Any] | None:
    """The inventory's lock as written, or None."""
    path = lock_file(hosts)
    if not path.is_file():
        return None
    return (varsfile.load(path.read_text()) or {}).get(stack.VARIABLE)


def relock(root: Path, hosts: Path, recipe: str | None, verbose: int, why: str) -> RunResult:
    """Lock what runs now (after `up` served a changed recipe, or accepted drift), and say so."""
    extra = {"recipe": recipe} if recipe else {}
    result = run(root, "lock.yml", hosts, "lock", verbose=verbose, **extra)
    doc = locked(hosts)
    if result.exit_code == ExitCode.OK and doc:
        out.print(f"locked anew ({why}): {lock_file(hosts)} ({doc.get('hash')})", markup=False, highlight=False)
    return result


def went_back(result: RunResult, recorded: apply_mod.Recorded | None) -> None:
    """After a change that did not answer: say what sparkplay went back to, and let the inventory record that
    recipe again (its choice before this run), so a later `up` without a name serves what answers."""
    back = result.custom.get("sparkplay_rolled_back") or {}
    if not back:
        return
    said = (
        f"it answers again, {back.get('seconds')} s after the failure"
        if back.get("ready")
        else (f"it does not answer either: {back.get('why')}")
    )
    out.print(
        f"went back to the last deployment that answered ({back.get('recipe')}): {said}",
        style="yellow",
        markup=False,
        highlight=False,
    )
    if back.get("ready") and recorded is not None and recorded.backup is not None:
        catalog.backup(recorded.path, recorded.backup.parent)  # this run's choice is kept too
        atomic_write(recorded.path, recorded.backup.read_bytes())
        out.print(
            f"{recorded.path}: its choice before this run is back ({recorded.backup} restored)",
            markup=False,
            highlight=False,
        )


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
    root: Path,
    recipe: str,
    inventory: Path | None,
    only: str | None,
    verbose: int,
    offline: bool = False,
    placement: dict[str, Any] | None = None,
) -> tuple[Path, str, RunResult]:
    """Check the recipe and the inventory, then the check-and-diff run; failures end the command here."""
    catalog.load_for_use(catalog.catalog_dir(root), recipe)
    hosts = hosts_file(inventory)
    playbook = step_playbook(only)
    extra = {"sparkplay_offline": True} if offline else {}
    extra.update(placement or {})
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
        bool,
        typer.Option(
            "--json",
            help="Print the deployment as data: leader, paths, checkpoints, and what each rank "
            "runs (argv, env, mounts, units, probe), from the nodes' facts.",
        ),
    ] = False,
    without_nodes: Annotated[
        bool, typer.Option("--without-nodes", help="With --json: stage one only, from the recipe and inventory.")
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
    if as_json and without_nodes:  # stage one: what the recipe and the inventory alone decide
        computed = stage_one(root, recipe, inv_mod.hosts(hosts_file(inventory)))[1]
        sys.stdout.write(json.dumps(computed, indent=2) + "\n")
        return
    if as_json:  # both stages, computed by the serve role's own plan tasks from the nodes' facts
        result = run_playbook(root, "plan.yml", hosts_file(inventory), extravars={"recipe": recipe}, verbose=verbose)
        planned = result.custom.get("sparkplay_plan")
        if result.exit_code != ExitCode.OK or planned is None:  # on stderr: stdout is for the JSON
            print_summary(err, result, verb=f"plan {recipe}")
            raise typer.Exit(int(result.exit_code) or int(ExitCode.FAILED))
        sys.stdout.write(json.dumps(planned, indent=2) + "\n")
        return
    show_plan(planned_run(root, recipe, inventory, only, verbose, offline)[2])


@reports_errors
@changes_nodes
def up(
    recipe: Annotated[str, typer.Argument(help="A recipe name from the catalog.")],
    inventory: InventoryOpt = None,
    yes: YesOpt = False,
    only: OnlyOpt = None,
    knob: Annotated[list[str] | None, typer.Option("--set", help="KNOB=VALUE for the recipe (repeatable).")] = None,
    add: Annotated[
        bool,
        typer.Option("--add", help="Serve it beside what is served (on one node, admitted by memory), not instead."),
    ] = False,
    node: Annotated[
        str | None, typer.Option("--node", help="With --add: the node to run on (default: the leader).")
    ] = None,
    port: Annotated[int | None, typer.Option("--port", help="Its API's port (default: the recipe's).")] = None,
    force_admit: Annotated[
        bool,
        typer.Option("--force-admit", help="With --add: serve it even where its memory claim does not fit (risky)."),
    ] = False,
    accept_drift: Annotated[
        bool, typer.Option("--accept-drift", help="Go on although the nodes drifted from the lock; lock them anew.")
    ] = False,
    accept_changed: Annotated[
        list[str] | None,
        typer.Option(
            "--accept-changed",
            help="NAME: take rank 0's changed copy of checkpoint NAME as the new truth (its old record is kept); "
            "without it a changed copy is refused (repeatable).",
        ),
    ] = None,
    no_wait: NoWaitOpt = False,
    verbose: VerboseOpt = 0,
    project: ProjectOpt = None,
) -> None:
    """Apply RECIPE to the inventory: plan, show, ask, then run for real (workers first, health proven).
    With --add, RECIPE is served beside what is served, behind one endpoint on the leader (the gateway)."""
    root = project_dir(project)
    apply_mod.parse_knobs(knob or [])  # a bad --set fails before anything runs
    if (node or force_admit) and not add:
        raise BadInput("--node and --force-admit place an added deployment", "add --add, or leave them out")
    if add and knob:
        raise BadInput(
            "--set records knobs for the inventory's recipe", "leave it out with --add (serve_knobs applies)"
        )
    placement: dict[str, Any] = {"serve_mode": "add"} if add else {}
    placement |= {"stack_accept_drift": True} if accept_drift else {}
    placement.update({k: v for k, v in (("serve_node", node), ("serve_port", port)) if v})
    if force_admit:
        placement["serve_force_admit"] = True
    if accept_changed:
        placement["checkpoint_accept_changed"] = [integrity.accepted_name(n) for n in accept_changed]
    hosts, playbook, planned = planned_run(root, recipe, inventory, only, verbose, placement=placement)
    foreign = show_plan(planned)
    if add:  # the inventory's recipe stays the primary's: an added deployment is not recorded there
        if foreign or planned.changes:
            ask(
                f"Add {recipe} beside what is served?",
                yes,
                "the plan above needs a yes and there is no terminal to ask on: nothing was changed",
                "rerun with --yes to go ahead",
            )
        extra: dict[str, Any] = {"recipe": recipe, **placement}
        if foreign:
            extra["sparkplay_confirm_overwrite"] = True
        added = run(root, playbook, hosts, f"up {recipe} --add", verbose=verbose, **extra)
        say_findings(added)
        finish(added, f"up {recipe} --add")
        return
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
    extra = {"recipe": recipe, **placement}
    if foreign:
        extra["sparkplay_confirm_overwrite"] = True  # confirmed above; each file is backed up by the roles
    result = run(root, playbook, hosts, f"up {recipe}", verbose=verbose, **extra)
    say_findings(result)
    went_back(result, recorded)
    drift = result.custom.get("sparkplay_drift") or {}
    if result.exit_code == ExitCode.OK and drift.get("locked") and (drift.get("recipe_changed") or accept_drift):
        # what the user asked for (another recipe, accepted drift) is the known-good stack now
        print_summary(out, result, verb=f"up {recipe}")
        result = relock(
            root, hosts, recipe, verbose, "the recipe changed" if drift.get("recipe_changed") else "drift accepted"
        )
    finish(result, f"up {recipe}")


COMMANDS = (init, plan, up)
