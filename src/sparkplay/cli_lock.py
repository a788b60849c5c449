"""`sparkplay lock|rollback`: a known-good stack locked, and the way back to the last deployment that answered.

Thin like cli_run: the playbooks (lock.yml, rollback.yml) do the work; this asks first and reports.
"""

from __future__ import annotations

from typing import Annotated

import typer

from sparkplay.cli_common import InventoryOpt, ProjectOpt, out, reports_errors
from sparkplay.cli_display import print_drift
from sparkplay.cli_run import VerboseOpt, YesOpt, ask, finish, hosts_file, lock_file, locked, run
from sparkplay.errors import ExitCode
from sparkplay.paths import project_dir


@reports_errors
def lock(
    inventory: InventoryOpt = None,
    recipe: Annotated[
        str | None, typer.Option("--recipe", help="The recipe served (default: the one the inventory records).")
    ] = None,
    yes: YesOpt = False,
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
        ask(f"Replace the lock {lock_file(hosts)} (the old one is backed up)?", yes,
            "the lock differs from what runs and there is no terminal to ask on: nothing was changed",
            "rerun with --yes to lock what runs now")  # fmt: skip
    result = run(root, "lock.yml", hosts, "lock", verbose=verbose, **extra)
    if result.exit_code == ExitCode.OK:
        doc = locked(hosts) or {}
        same = before is not None and before.get("hash") == doc.get("hash")
        name = (doc.get("recipe") or {}).get("name") or "none"
        out.print(f"{lock_file(hosts)}: {'unchanged' if same else 'written'} ({doc.get('hash')}, recipe {name})",
                  markup=False, highlight=False)  # fmt: skip
        for host, held in sorted(((result.custom.get("sparkplay_lock") or {}).get("held") or {}).items()):
            out.print(f"  {host}: held {', '.join(held) or 'nothing (none of the locked packages is installed)'}",
                      markup=False, highlight=False)  # fmt: skip
    finish(result, "lock")


COMMANDS = (lock,)
