"""A group engine's workers, restarted before their leader starts (vLLM's mp back end, SGLang).

Their ranks form one process group that cannot be rejoined: a headless worker whose leader died keeps
waiting on it (a zombie deployment), and a restarted leader waits for a rendezvous that such a worker
never joins. So each start of the leader's unit (the serve role's, systemd's own restart, the
watchdog's) first restarts every worker, in order, over the peer ssh trust.
"""

from __future__ import annotations

import argparse
import shlex
import subprocess
import sys


def on_peer(peer: str, argv: list[str], timeout: float = 180) -> subprocess.CompletedProcess[str]:
    """A command on another rank over the peer ssh trust (root to root over the cable)."""
    ssh = ["ssh", "-o", "BatchMode=yes", "-o", "ConnectTimeout=5", peer, *argv]
    return subprocess.run(ssh, check=False, timeout=timeout, capture_output=True, text=True)


def kill_and_restart(unit: str) -> list[str]:
    """The remote command: a worker of a dead group may never finish a graceful stop (it waits on its
    leader, deaf to SIGTERM until systemd's stop timeout): kill it, then start it anew."""
    name = shlex.quote(unit)
    return [f"systemctl kill --signal=SIGKILL {name}; systemctl restart {name}"]


def cmd_restart_workers(args: argparse.Namespace) -> int:
    failed = []
    for peer in args.peers:
        try:
            done = on_peer(peer, kill_and_restart(args.unit))
        except subprocess.TimeoutExpired:
            failed.append(f"{peer}: no answer in 180 s")
            continue
        if done.returncode != 0:
            failed.append(f"{peer}: exit {done.returncode}: {(done.stderr or done.stdout).strip()[-300:]}")
        else:
            print(f"restarted {args.unit} on {peer} before the leader starts", flush=True)
    for line in failed:
        print(f"could not restart the worker {line}", file=sys.stderr, flush=True)
    # the leader cannot form its group without every worker: fail the start, systemd retries with backoff
    return 1 if failed else 0
