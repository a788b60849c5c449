"""A whole-site run that changes nothing, on the served two-node lab: before and after, in one run.

Before: the project at a git revision (default: the one this work started from), checked out into a
temporary worktree and run with its own code (its src/ first on PYTHONPATH). After: this working tree.
Each side first converges the lab once (untimed; the two sides write the same files), then runs
`ansible-playbook site.yml -e recipe=lab-tiny` ROUNDS times; the median wall time is reported, with the
tasks each run executed per host. Then this tree again under Ansible's own options (--variants): the
`free` strategy, and Mitogen's strategy where the `mitogen` package is installed (it replaces the docker
connection with its own, so the lab's inventory is read with the plain `docker` connection name, which
Mitogen redirects). Needs a served lab (`make demo`). The last line is JSON.

    python benchmarks/site_noop.py [--before a264583] [--rounds 3] [--variants free,mitogen]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

PROJECT = Path(__file__).resolve().parents[1]
INVENTORY = PROJECT / "inventory" / "lab" / "hosts.yml"


def variant(name: str, scratch: Path) -> tuple[dict[str, str], Path]:
    """The environment and inventory of one of Ansible's own options."""
    if name == "default":
        return {}, INVENTORY
    if name == "free":
        return {"ANSIBLE_STRATEGY": "free"}, INVENTORY
    if name == "mitogen":
        import ansible_mitogen  # the package from the index, installed by hand for this measurement

        plugins = Path(ansible_mitogen.__file__).parent / "plugins" / "strategy"
        hosts = yaml.safe_load(INVENTORY.read_text())
        for node in hosts["all"]["children"]["sparkplay_nodes"]["hosts"].values():
            node["ansible_connection"] = "docker"  # the name Mitogen redirects to its own docker transport
        inventory = scratch / "mitogen" / "hosts.yml"
        shutil.copytree(INVENTORY.parent, inventory.parent)
        inventory.write_text(yaml.safe_dump(hosts))
        return {"ANSIBLE_STRATEGY_PLUGINS": str(plugins), "ANSIBLE_STRATEGY": "mitogen_linear"}, inventory
    raise SystemExit(f"unknown variant {name!r}: default, free or mitogen")


def site(tree: Path, extra: dict[str, str] | None = None, inventory: Path = INVENTORY) -> tuple[float, int, int]:
    """(seconds, tasks run on rank 0, changed) of one whole-site run from `tree`."""
    env = {
        **os.environ,
        "PYTHONPATH": str(tree / "src"),
        "ANSIBLE_CONFIG": str(tree / "ansible.cfg"),
        "SPARKPLAY_PROJECT_DIR": str(tree),
        **(extra or {}),
    }
    playbook = Path(sys.executable).with_name("ansible-playbook")
    started = time.perf_counter()
    proc = subprocess.run(
        [str(playbook), "-i", str(inventory), "site.yml", "-e", "recipe=lab-tiny"],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=1800,
    )
    took = time.perf_counter() - started
    if proc.returncode != 0:
        raise SystemExit(f"site.yml failed in {tree}:\n{proc.stdout[-3000:]}{proc.stderr[-2000:]}")
    recap = re.search(r"sparkplay-lab-rank0\s+: ok=(\d+)\s+changed=(\d+)", proc.stdout)
    return took, int(recap.group(1)) if recap else -1, int(recap.group(2)) if recap else -1


def fresh_ranks() -> None:
    """Workers then the leader restarted: before its fix, every run's probe of a running worker's port sat in
    ggml-rpc-server's accept queue (one client at a time), and the third run on the same worker hung."""
    for rank in (1, 0):
        subprocess.run(
            ["docker", "exec", f"sparkplay-lab-rank{rank}", "systemctl", "restart", "sparkplay-serve"],
            check=True,
            capture_output=True,
        )
    time.sleep(5)


def measure(tree: Path, rounds: int, extra: dict[str, str] | None = None, inventory: Path = INVENTORY) -> dict:
    fresh_ranks()
    site(tree, extra, inventory)  # converge: this side's own files in place
    runs = [site(tree, extra, inventory) for _ in range(rounds)]
    return {
        "median_s": round(statistics.median(r[0] for r in runs), 1),
        "tasks_rank0": runs[-1][1],
        "changed": max(r[2] for r in runs),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", default="a264583")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--before-rounds", type=int, default=1)
    parser.add_argument("--variants", default="", help="comma-separated: free, mitogen")
    args = parser.parse_args()
    if not INVENTORY.exists():
        raise SystemExit("no lab: run `make demo` first")
    with tempfile.TemporaryDirectory() as scratch:
        old = Path(scratch) / "before"
        subprocess.run(
            ["git", "-C", str(PROJECT), "worktree", "add", "--detach", str(old), args.before],
            check=True,
            capture_output=True,
        )
        try:
            before = measure(old, args.before_rounds)
            after = measure(PROJECT, args.rounds)
        finally:
            subprocess.run(["git", "-C", str(PROJECT), "worktree", "remove", "--force", str(old)], check=False)
        options = {}
        for name in filter(None, args.variants.split(",")):
            extra, inventory = variant(name, Path(scratch))
            try:
                options[name] = measure(PROJECT, args.rounds, extra, inventory)
            except SystemExit as failed:  # an option that cannot run this site is a finding, not the end
                options[name] = {"failed": str(failed)[-600:]}
                print(f"this tree, {name}: failed: {str(failed)[-600:]}", flush=True)
                continue
            print(f"this tree, {name}: {options[name]['median_s']} s", flush=True)
    result = {
        "before": before,
        "after": after,
        "speedup": round(before["median_s"] / after["median_s"], 2),
        "options": options,
    }
    print(f"before ({args.before}): {before['median_s']} s, {before['tasks_rank0']} tasks on rank 0", flush=True)
    print(f"after  (this tree)   : {after['median_s']} s, {after['tasks_rank0']} tasks on rank 0; {result['speedup']}x")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
