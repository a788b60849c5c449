"""`sparkplay lock|rollback`: a known-good stack locked, and the way back to the last deployment that answered.

Thin like cli_run: the playbooks (lock.yml, rollback.yml) do the work; this asks first and reports.
"""

from __future__ import annotations

from typing import Annotated

import typer

from sparkplay import inventory as inv_mod
from sparkplay.cli_common import InventoryOpt, NoWaitOpt, ProjectOpt, changes_nodes, err, out, reports_errors
from sparkplay.cli_display import print_drift, print_summary
from sparkplay.cli_run import VerboseOpt, YesOpt, ask, finish, hosts_file, lock_file, locked, relock, run
from sparkplay.errors import BadInput, ExitCode
from sparkplay.paths import project_dir
from sparkplay.recipes.store import apply as apply_mod


@reports_errors
@changes_nodes
def lock(
    inventory: InventoryOpt = None,
    recipe: Annotated[
        str | None, typer.Option("--recipe", help="The recipe served (default: the one the inventory records).")
    ] = None,
    yes: YesOpt = False,
    no_wait: NoWaitOpt = False,
    verbose: VerboseOpt = 0,
    project: ProjectOpt = None,
) -> None:
    """Lock the cluster as it runs: each node's OS, kernel, driver, CUDA, NCCL, fabric, Docker, the served
    engine's images, packages and program, the checkpoints' revisions; and hold the locked packages."""
    root = project_dir(project)
    hosts = hosts_file(inventory)
    extra = {"recipe": recipe} if recipe else {}
    planned = run(root, "lock.yml", hosts, "plan lock", verbose=verbose, check=True, **extra)
    if planned.exit_code != ExitCode.OK:
        finish(planned, "lock")
    before = locked(hosts)
    drift = planned.custom.get("sparkplay_drift") or {}
    if before and drift.get("lines"):
        print_drift(out, planned.custom)
        ask(
            f"Replace the lock {lock_file(hosts)} (the old one is backed up)?",
            yes,
            "the lock differs from what runs and there is no terminal to ask on: nothing was changed",
            "rerun with --yes to lock what runs now",
        )
    result = run(root, "lock.yml", hosts, "lock", verbose=verbose, **extra)
    if result.exit_code == ExitCode.OK:
        doc = locked(hosts) or {}
        same = before is not None and before.get("hash") == doc.get("hash")
        name = (doc.get("recipe") or {}).get("name") or "none"
        out.print(
            f"{lock_file(hosts)}: {'unchanged' if same else 'written'} ({doc.get('hash')}, recipe {name})",
            markup=False,
            highlight=False,
        )
        for host, held in sorted(((result.custom.get("sparkplay_lock") or {}).get("held") or {}).items()):
            out.print(
                f"  {host}: held {', '.join(held) or 'nothing (none of the locked packages is installed)'}",
                markup=False,
                highlight=False,
            )
    finish(result, "lock")


@reports_errors
@changes_nodes
def rollback(
    name: Annotated[
        str | None, typer.Argument(help="An added deployment (up --add) to roll back (default: the primary).")
    ] = None,
    inventory: InventoryOpt = None,
    yes: YesOpt = False,
    no_wait: NoWaitOpt = False,
    verbose: VerboseOpt = 0,
    project: ProjectOpt = None,
) -> None:
    """Go back to the previous deployment that answered (its units, environment and record), prove it
    answers, and record its recipe in the inventory again; a second rollback comes forward again."""
    root = project_dir(project)
    hosts = hosts_file(inventory)
    primary = inv_mod.recorded_recipe(inv_mod.hosts(hosts))
    slot = None if name in (None, primary) else name
    what = f"{name}'s deployment" if slot else "the primary deployment"
    ask(
        f"Put back the previous deployment of {what} (it is restarted)?",
        yes,
        "a rollback restarts the engine and there is no terminal to ask on: nothing was changed",
        "rerun with --yes to roll back",
    )
    extra = {"rollback_recipe": slot} if slot else {}
    result = run(root, "rollback.yml", hosts, f"rollback {name or ''}".strip(), verbose=verbose, **extra)
    back = result.custom.get("sparkplay_rolled_back") or {}
    if back.get("ready"):
        out.print(
            f"{back.get('recipe')} answers again, {back.get('seconds')} s after the rollback began",
            markup=False,
            highlight=False,
        )
        if slot is None and back.get("recipe") != primary:
            try:
                recorded = apply_mod.record(root, str(back["recipe"]), hosts, [], lambda *_: True)
                out.print(f"{recorded.path}: records {back['recipe']}", markup=False, highlight=False)
            except BadInput as exc:
                err.print(f"warning: the inventory still records {primary}: {exc}", markup=False, highlight=False)
        if slot is None and locked(hosts):  # what answers again is the known-good stack
            print_summary(out, result, verb="rollback")
            result = relock(root, hosts, str(back["recipe"]), verbose, "rolled back")
    finish(result, "rollback")


COMMANDS = (lock, rollback)
