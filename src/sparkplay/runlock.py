"""One run at a time per inventory: every command that changes nodes holds its inventory's lock here.

Two `sparkplay up` started seconds apart from two terminals both ran to the end, each writing units, routes
and the last-good record without a word about the other. Now the second one waits, saying which run it waits
for (its command, pid, host and since when), or with `--no-wait` refuses at once (exit 7). Read-only commands
(status, plan, doctor, logs) never take it.

The lock is an advisory `flock` on a file per inventory (named by a hash of its folder's path) in the
state folder, so it goes with its process however that process ends: a run that was killed leaves no lock,
only its note, and the next run says it took over from a run that ended without finishing. The note (who
holds it) is written after the lock is taken, through the same open file, 0600.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import socket
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from sparkplay import paths
from sparkplay.errors import ExitCode, SparkplayError

# One run at a time per node too (two controllers, or two checkouts, sharing nodes): every changing entry playbook
# claims each node's lock first (playbooks/claim.yml, the sparkplay_run_lock module) and releases it last. The
# owner is this controller and inventory, so a run that failed or died here is taken over by the next one here;
# a run from elsewhere waits (or refuses with --no-wait) until the holder releases it or its lease runs out.
NODE_LEASE_S = 21600  # a run that died elsewhere holds its nodes this long at most
RENEW_S = 3600.0  # a live run renews its nodes' leases this often (sparkplay.runner), however long it lasts


def owner(sources: Any) -> str:
    """The owner id of this controller's runs of an inventory for the nodes' run lock (the filter
    sparkplay_run_owner): the machine, its state folder and the inventory, as the controller's own lock is
    per state folder and inventory (so the runs it already serializes share an owner, and no others do)."""
    listed = sources if isinstance(sources, list | tuple) else [sources]
    where = ",".join(sorted(str(Path(str(s)).absolute()) for s in listed))
    mine = f"{socket.gethostname()}:{paths.state_dir().absolute()}:{where}"
    return hashlib.sha256(mine.encode()).hexdigest()[:16]


def node_note(given: Any = None) -> dict:
    """Who this run is, kept in each node's lock (the CLI's note, or ansible-playbook's own)."""
    note = dict(given) if isinstance(given, dict) else {}
    return {"command": "ansible-playbook (not the sparkplay CLI)", "host": socket.gethostname(), **note}


def node_holder(claim: Any, node: str = "") -> str:
    """The line naming the run that holds a node (the claim's `holder`), for the wait and the refusal."""
    holder = (claim or {}).get("holder") if isinstance(claim, dict) else None
    if not isinstance(holder, dict):
        return f"another run holds {node or 'the node'}"
    until = time.strftime("%H:%M:%S", time.localtime(float(holder.get("expires") or 0)))
    return f"{node or 'the node'} is held by {describe(holder)}; its lease runs out at {until} if that run died"


class Busy(SparkplayError):
    """Another run holds the inventory and the user asked not to wait."""

    exit_code = ExitCode.BUSY


# the run this process holds its inventory's lock for: its note and whether it waits (the runs' extravars)
CURRENT: dict[str, Any] = {}


def extravars() -> dict[str, Any]:
    """What a playbook run of the held run passes to the nodes' lock (playbooks/claim.yml)."""
    if not CURRENT:
        return {}
    return {"sparkplay_run_note": CURRENT["note"], "sparkplay_run_wait": NODE_LEASE_S if CURRENT["wait"] else 0}


def lock_path(inventory: Path, state: Path) -> Path:
    key = hashlib.sha256(str(inventory.resolve()).encode()).hexdigest()[:16]
    return state / "locks" / f"inventory-{key}.lock"


def describe(note: dict) -> str:
    """`sparkplay up lab-tiny (pid 12, on ctl, since 08:20:01)`, from a holder's note."""
    since = time.strftime("%H:%M:%S", time.localtime(float(note.get("since") or 0)))
    return f"`{note.get('command', '?')}` (pid {note.get('pid', '?')} on {note.get('host', '?')}, since {since})"


def _read_note(fh: object) -> dict:
    fh.seek(0)  # type: ignore[attr-defined]
    try:
        note = json.loads(fh.read() or "{}")  # type: ignore[attr-defined]
    except ValueError:
        return {}
    return note if isinstance(note, dict) else {}


def _command() -> str:
    # argv holds no secret by design (tokens come from the environment or files): shown as typed, bounded
    return " ".join(["sparkplay", *sys.argv[1:]])[:200]


@contextlib.contextmanager
def holding(
    inventory: Path,
    state: Path,
    *,
    wait: bool = True,
    say: Callable[[str], None] = print,
    poll: float = 0.5,
) -> Iterator[None]:
    """Hold the inventory's run lock for the `with` block: wait for a run holding it (saying which, once) or,
    with `wait=False`, refuse with Busy naming it."""
    path = lock_path(inventory, state)
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    with os.fdopen(fd, "r+") as fh:
        waited_for: dict | None = None
        asked = time.monotonic()
        while True:
            try:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                note = _read_note(fh)
                if not note.get("pid") and time.monotonic() - asked < 2:
                    time.sleep(0.05)  # the holder has the lock and is writing its note: read it once it is there
                    continue
                if not wait:
                    raise Busy(
                        f"another run is changing the nodes of {inventory}: {describe(note)}",
                        "wait for it to finish, or run again without --no-wait to wait for it",
                    ) from None
                if waited_for is None or note.get("pid") != waited_for.get("pid"):
                    say(f"waiting for {describe(note)} to finish with {inventory} (--no-wait refuses instead)")
                    waited_for = note
                time.sleep(poll)
        left = _read_note(fh)
        if left.get("pid") and left.get("pid") != os.getpid():
            say(f"took over the lock of {describe(left)}, which ended without finishing")
        note = {"command": _command(), "pid": os.getpid(), "host": socket.gethostname(), "since": time.time()}
        CURRENT.update(note=note, wait=wait)
        fh.seek(0)
        fh.truncate()
        fh.write(json.dumps(note))
        fh.flush()
        try:
            yield
        finally:
            CURRENT.clear()
            fh.seek(0)
            fh.truncate()  # a clean end leaves no note: only a run that died leaves one
            fh.flush()
            fcntl.flock(fh, fcntl.LOCK_UN)
