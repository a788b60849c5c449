"""What every CLI module shares: consoles, the error wrapper, common options."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from functools import wraps
from pathlib import Path
from typing import Annotated, Any, TypeVar

import click
import typer
from rich.console import Console

from sparkplay.errors import ExitCode, SparkplayError
from sparkplay.paths import default_inventory, project_dir

EXIT_CODES_HELP = (
    "Exit codes: 0 ok; 1 failed; 2 bad input; 3 confirmation declined; "
    "4 hosts failed; 5 hosts unreachable; 6 a prerequisite is missing (Docker engine, debootstrap, ...); "
    "7 another run is changing these nodes (--no-wait); 8 verify repaired or restarted what it found."
)


def _width(stream: Any) -> int | None:
    """A terminal's own width; into a file, a pipe or CI's log, wide enough that no table cuts a name."""
    return None if stream.isatty() or os.environ.get("COLUMNS") else 1000


out = Console(soft_wrap=True, width=_width(sys.stdout))
# one error, one line: never wrapped, never highlighted
err = Console(stderr=True, highlight=False, soft_wrap=True, width=_width(sys.stderr))

F = TypeVar("F", bound=Callable[..., Any])

ProjectOpt = Annotated[
    Path | None,
    typer.Option("--project-dir", help="The sparkplay checkout (default: found from the working directory)."),
]


def reports_errors(func: F) -> F:
    """Turn a SparkplayError into one stderr line and its exit code."""

    @wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except SparkplayError as exc:
            err.print(f"sparkplay: error: {exc}", markup=False)
            raise typer.Exit(int(exc.exit_code)) from None
        except KeyboardInterrupt:
            err.print("sparkplay: interrupted", markup=False)
            raise typer.Exit(int(ExitCode.FAILED)) from None

    return wrapper  # type: ignore[return-value]


def confirm(question: str) -> bool:
    """A yes/no on the terminal. End of input (Ctrl-D) or Ctrl-C at the prompt is a no (exit 3), not a crash."""
    try:
        return bool(typer.confirm(question, default=False))
    except click.exceptions.Abort:
        err.print("")
        return False


InventoryOpt = Annotated[
    Path | None,
    typer.Option(
        "--inventory",
        "-i",
        envvar="SPARKPLAY_INVENTORY",
        show_default=False,
        help="Your inventory folder or hosts file (default: $SPARKPLAY_INVENTORY, else the one `init` writes "
        "by default: inventory/local in a checkout, ~/.config/sparkplay/inventory when installed).",
    ),
]


def inventory_of(inventory: Path | None) -> Path:
    """The inventory given, else the default one (paths.default_inventory)."""
    return inventory if inventory is not None else default_inventory(project_dir())


NoWaitOpt = Annotated[
    bool,
    typer.Option(
        "--no-wait", help="If another run is changing these nodes, refuse at once (exit 7) instead of waiting for it."
    ),
]


def changes_nodes(func: F) -> F:
    """A command that changes nodes (or what the next run reads) holds its inventory's run lock while it runs
    (sparkplay.runlock): a second one waits, naming the first, or refuses with --no-wait. Its `inventory` and
    `no_wait` parameters say which lock and how."""

    @wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        from sparkplay import runlock
        from sparkplay.paths import state_dir

        inventory = inventory_of(kwargs.get("inventory")).absolute()
        folder = inventory if inventory.is_dir() or not inventory.suffix else inventory.parent
        said = lambda line: err.print(line, markup=False, highlight=False)  # noqa: E731
        with runlock.holding(folder, state_dir(), wait=not kwargs.get("no_wait"), say=said):
            return func(*args, **kwargs)

    return wrapper  # type: ignore[return-value]
