#!/usr/bin/python
"""Ansible module: a node's run lock, so that two controllers never change one node at once."""

from __future__ import annotations

DOCUMENTATION = r"""
module: sparkplay_run_lock
short_description: Claim, renew or release a node's sparkplay run lock
description:
  - One run at a time per node, whatever controller it comes from (the controller's own lock, per inventory,
    covers one machine's runs; this covers two machines, or two checkouts, sharing nodes).
  - The lock is a note (JSON, root 0600) in O(path), read and written under an exclusive C(flock) of it. A
    claim takes it when it is free, when it is this run's own (a renewal), when its lease ran out (a run that
    died elsewhere holds a node for O(ttl) seconds at most), or when O(take_over) names its owner (the
    controller found that run gone). Otherwise it is left alone and the holder's note is returned.
  - A release removes the note when it is this run's own. A renewal extends this run's own lease and nothing
    else (a lock released, taken over or never taken is left as it is), so a run that lasts longer than O(ttl)
    (a download of hours) keeps its nodes while it is alive.
  - It never reports a change, as the lock is the run's own bookkeeping and not the node's configuration (a
    run that changes nothing stays a run that changed nothing).
options:
  state:
    description: >-
      C(claimed) takes or renews it, C(renewed) only extends this run's own lease, C(released) gives it back,
      C(read) only reads it.
    type: str
    choices: [claimed, renewed, released, read]
    default: claimed
  owner:
    description: This run's owner id (the controller's, its state folder's and the inventory's).
    type: str
    required: true
  note:
    description: Who this run is (command, host, pid, since), kept in the lock for a run that waits.
    type: dict
    default: {}
  ttl:
    description: Seconds the claim holds without a renewal.
    type: int
    default: 21600
  take_over:
    description: The owner of a lock this claim may take (a run its controller found gone); empty for none.
    type: str
    default: ""
  wait:
    description: Seconds a claim waits for the run holding the lock to release it (0 takes it or not, at once).
    type: int
    default: 0
  path:
    description: The lock file, on a tmpfs (a reboot ends every claim on the node).
    type: path
    default: /run/sparkplay/run.lock
author: sparkplay developers (@sparkplay)
"""

EXAMPLES = r"""
- name: Take this node for the run, waiting up to an hour for a run from another controller
  sparkplay.spark.sparkplay_run_lock:
    owner: 3f2a9c0d1e4b5a6c
    note: {command: sparkplay up lab-tiny, host: ctl, pid: 4242}
    wait: 3600
  register: claim

- name: Give it back at the end
  sparkplay.spark.sparkplay_run_lock:
    state: released
    owner: 3f2a9c0d1e4b5a6c
"""

RETURN = r"""
taken:
  description: Whether this run holds the lock now (after a claim), or held it (after a release).
  type: bool
  returned: always
holder:
  description: The note of the run holding it when this one did not get it (or, for C(read), any), else null.
  type: dict
  returned: always
took_over:
  description: The owner whose lock this claim took (a lease run out, or O(take_over)), else empty.
  type: str
  returned: always
"""

import contextlib  # noqa: E402
import fcntl  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import time  # noqa: E402

from ansible.module_utils.basic import AnsibleModule  # noqa: E402

POLL_S = 2  # how often a waiting claim looks again


def _read(fd: int) -> dict:
    os.lseek(fd, 0, os.SEEK_SET)
    raw = os.read(fd, 1 << 16)
    with contextlib.suppress(ValueError):
        note = json.loads(raw or b"{}")
        return note if isinstance(note, dict) else {}
    return {}


def _write(fd: int, note: dict) -> None:
    data = json.dumps(note, sort_keys=True).encode()
    os.lseek(fd, 0, os.SEEK_SET)
    os.ftruncate(fd, 0)
    os.write(fd, data)
    os.fsync(fd)


def decide(held: dict, owner: str, take_over: str, now: float) -> tuple[bool, str]:
    """(whether a claim by `owner` may take the lock whose note is `held`, whose lock it takes over)."""
    if not held.get("owner") or held.get("owner") == owner:
        return True, ""
    if float(held.get("expires") or 0) < now:
        return True, str(held["owner"])
    if take_over and held.get("owner") == take_over:
        return True, take_over
    return False, ""


def run(params: dict, now: float) -> dict:
    path = params["path"]
    os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)  # noqa: PTH103, PTH120 - a node's paths as strings
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        held = _read(fd)
        if params["state"] == "read":
            return {"changed": False, "taken": False, "holder": held or None, "took_over": ""}
        mine = held.get("owner") == params["owner"]
        if params["state"] == "released":
            if mine:
                os.ftruncate(fd, 0)
            return {"changed": False, "taken": mine, "holder": None if mine else held or None, "took_over": ""}
        if params["state"] == "renewed":
            if mine:
                _write(fd, {**held, "expires": now + params["ttl"], "renewed": now})
            return {"changed": False, "taken": mine, "holder": None if mine else held or None, "took_over": ""}
        may, took = decide(held, params["owner"], params["take_over"], now)
        if not may:
            return {"changed": False, "taken": False, "holder": held, "took_over": ""}
        note = {**params["note"], "owner": params["owner"], "expires": now + params["ttl"], "renewed": now}
        note.setdefault("since", held.get("since") if mine else now)
        _write(fd, note)
        return {"changed": False, "taken": True, "holder": None, "took_over": took}
    finally:
        os.close(fd)


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "state": {"type": "str", "choices": ["claimed", "renewed", "released", "read"], "default": "claimed"},
            "owner": {"type": "str", "required": True},
            "note": {"type": "dict", "default": {}},
            "ttl": {"type": "int", "default": 21600},
            "take_over": {"type": "str", "default": ""},
            "wait": {"type": "int", "default": 0},
            "path": {"type": "path", "default": "/run/sparkplay/run.lock"},
        },
        supports_check_mode=True,
    )
    if module.check_mode and module.params["state"] != "read":
        module.exit_json(changed=False, taken=False, holder=None, took_over="", skipped_in_check_mode=True)
    try:
        deadline = time.monotonic() + max(0, module.params["wait"])
        result = run(module.params, time.time())
        while module.params["state"] == "claimed" and not result["taken"] and time.monotonic() < deadline:
            time.sleep(POLL_S)
            result = run(module.params, time.time())
        module.exit_json(**result)
    except OSError as exc:
        module.fail_json(msg=f"{module.params['path']}: {exc}")


if __name__ == "__main__":
    main()
