"""Inventories for people who have never written one, and finding a rank's host in one.

`render()` writes what `sparkplay init` saves: a hosts.yml for the user's
nodes plus the sample's documented knob file. `hosts()` reads any inventory
through `ansible-inventory --list`, so the CLI reaches a node the way
Ansible would (ssh, or docker exec for the lab).
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from sparkplay.errors import BadInput, MissingPrerequisite
from sparkplay.topology import rank_layout_problems

HOST = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,252}\Z")
HEADER = """---
# Written by `sparkplay init`: your nodes, as sparkplay expects them.
# Every node is in `sparkplay_nodes` and carries `sparkplay_rank`: exactly one
# rank 0 (the leader: it downloads the checkpoints, mirrors them over the
# cable and serves the API), the others 1, 2, ... with no gaps. The host names
# are how Ansible reaches each node (management address or name, not the
# cable). Every knob is listed in group_vars/sparkplay_nodes/main.yml.
"""


@dataclass(frozen=True)
class NodeSpec:
    host: str
    rank: int


def parse_nodes(specs: list[str]) -> list[NodeSpec]:
    """`HOST[:RANK]` strings; ranks default to the order given. Refuses a layout sparkplay cannot run."""
    if not specs:
        raise BadInput("no nodes given", "pass --node HOST[:RANK] once per node, the leader first")
    nodes = []
    for index, spec in enumerate(specs):
        host, sep, rank_text = spec.partition(":")
        if not HOST.match(host):
            raise BadInput(f"--node {spec!r}: {host!r} is not a host name or IPv4 address", "use HOST or HOST:RANK")
        if sep and not rank_text.isdigit():
            raise BadInput(f"--node {spec!r}: the rank must be a number", "use HOST:RANK, e.g. spark-a:0")
        nodes.append(NodeSpec(host, int(rank_text) if sep else index))
    if len({n.host for n in nodes}) != len(nodes):
        raise BadInput("a host is listed twice", "give each node once")
    problems = rank_layout_problems({n.host: n.rank for n in nodes})
    if problems:
        raise BadInput(f"the ranks are not a valid layout: {problems[0]}", "give ranks 0, 1, ... with one leader (0)")
    return sorted(nodes, key=lambda n: n.rank)


def render(nodes: list[NodeSpec], user: str | None, knobs_text: str) -> dict[str, str]:
    """Relative path -> content of the inventory `init` writes."""
    group: dict[str, Any] = {"hosts": {n.host: {"sparkplay_rank": n.rank} for n in nodes}}
    group["vars"] = {"ansible_become": True, **({"ansible_user": user} if user else {})}
    hosts = HEADER + yaml.safe_dump({"all": {"children": {"sparkplay_nodes": group}}}, sort_keys=False)
    return {"hosts.yml": hosts, "group_vars/sparkplay_nodes/main.yml": knobs_text}


@dataclass(frozen=True)
class Host:
    name: str
    rank: int | None
    vars: dict[str, Any]

    def shell_argv(self, argv: list[str]) -> list[str]:
        """argv to run `argv` on this host the way Ansible connects to it."""
        connection = self.vars.get("ansible_connection", "ssh")
        if connection in ("community.docker.docker", "docker"):
            return ["docker", "exec", str(self.vars.get("ansible_host", self.name)), *argv]
        if connection == "local":
            return argv
        if connection not in ("ssh", "ansible.builtin.ssh", "paramiko", "ansible.builtin.paramiko_ssh"):
            raise BadInput(f"{self.name} uses connection {connection}", "read its journal with ansible instead")
        target = str(self.vars.get("ansible_host", self.name))
        user = self.vars.get("ansible_user")
        ssh = ["ssh", "-o", "BatchMode=yes"]
        if self.vars.get("ansible_port"):
            ssh += ["-p", str(self.vars["ansible_port"])]
        key = self.vars.get("ansible_ssh_private_key_file") or self.vars.get("ansible_private_key_file")
        if key:
            ssh += ["-i", str(key)]
        for name in ("ansible_ssh_common_args", "ansible_ssh_extra_args"):  # jump hosts, ports, options
            ssh += shlex.split(str(self.vars.get(name) or ""))
        return [*ssh, f"{user}@{target}" if user else target, "--", *self._become(user), *argv]

    def _become(self, user: Any) -> list[str]:
        """The inventory's privilege escalation, non-interactive (sudo or doas; su cannot be)."""
        if str(self.vars.get("ansible_become", False)).lower() not in ("true", "yes", "1"):
            return []
        to = str(self.vars.get("ansible_become_user") or "root")
        if user == to:
            return []
        method = str(self.vars.get("ansible_become_method") or "sudo").rsplit(".", 1)[-1]
        if method in ("sudo", "doas"):
            return [method, "-n", "-u", to]
        raise BadInput(
            f"{self.name} becomes {to} with {method}, which asks for a password",
            "use sudo or doas with NOPASSWD for the logs command, or read the journal with ansible",
        )


def recorded_recipe(hosts: list[Host]) -> str | None:
    """The recipe `sparkplay apply` (or `up`) recorded for these hosts, if any."""
    return next((str(h.vars["sparkplay_recipe"]) for h in hosts if h.vars.get("sparkplay_recipe")), None)


def hosts(inventory: Path) -> list[Host]:
    """The sparkplay_nodes of an inventory, with their variables, by rank."""
    tool = shutil.which("ansible-inventory") or str(Path(sys.executable).parent / "ansible-inventory")
    if not Path(tool).exists():
        raise MissingPrerequisite("ansible-inventory is not installed", "install sparkplay with its dependencies")
    proc = subprocess.run(
        [tool, "-i", str(inventory), "--list"], capture_output=True, text=True, check=False, timeout=120
    )
    if proc.returncode != 0:
        detail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise BadInput(f"cannot read inventory {inventory}: {detail}", "pass -i with your inventory folder or file")
    data = json.loads(proc.stdout)
    hostvars = data.get("_meta", {}).get("hostvars", {})
    names = data.get("sparkplay_nodes", {}).get("hosts", [])
    if not names:
        raise BadInput(f"inventory {inventory} has no hosts in sparkplay_nodes", "run `sparkplay init` to write one")
    found = [Host(n, hostvars.get(n, {}).get("sparkplay_rank"), hostvars.get(n, {})) for n in names]
    return sorted(found, key=lambda h: (h.rank is None, h.rank if h.rank is not None else 0, h.name))
