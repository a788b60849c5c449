"""The lab's Ansible inventory: written by `lab up`, removed by `lab down`."""

from __future__ import annotations

from pathlib import Path

import yaml

from sparkplay.fsutil import atomic_write
from sparkplay.lab.cable import TWINS
from sparkplay.lab.staging import MODEL_ROOT

MARKER = "# Written by `sparkplay lab up`"
HEADER = f"""{MARKER}; `sparkplay lab down` removes it.
# Rewritten on every `lab up`: put your own settings in another file.
"""

# What the lab is not, compared with a real Spark pair. Each knob is read by
# the role named in its prefix (see that role's meta/argument_specs.yml).
LAB_OVERRIDES: dict[str, object] = {
    # No GPU in a lab node: GPU checks report "not expected" instead of failing.
    "sparkplay_gpu_expected": False,
    # No /sys/class/infiniband and no Soft-RoCE in this kernel: NCCL/GLOO may
    # use TCP sockets on the cable; a real Spark must not.
    "fabric_socket_fallback": True,
    # `netplan apply` runs `udevadm trigger`, and no udev runs in a container:
    # generate, then have networkd pick the files up, one twin at a time.
    "fabric_netplan_apply_commands": [
        ["netplan", "generate"],
        ["networkctl", "reload"],
        *[["networkctl", "reconfigure", twin] for twin in TWINS],
    ],
    # The lab-tiny recipe's model, generated and staged on rank 0 by `lab up`
    # (a real pair downloads from Hugging Face instead).
    "checkpoint_staged": [
        {"name": "lab-tiny", "staged": f"{MODEL_ROOT}/lab-tiny"},
        {"name": "lab-small", "staged": f"{MODEL_ROOT}/lab-small"},
    ],  # served beside it (--add)
}


def paths(project: Path) -> tuple[Path, Path]:
    lab = project / "inventory" / "lab"
    return lab / "hosts.yml", lab / "group_vars" / "sparkplay_nodes" / "lab.yml"


def fabric_settings(nodes: int, topology: str) -> dict[str, object]:
    """The fabric role's cabling settings for the lab: a ring has one subnet per link."""
    if topology != "ring":
        return {}
    return {"fabric_topology": "ring", "fabric_subnets": [f"192.168.{100 + link}.0/24" for link in range(nodes)]}


def render(containers: list[str], topology: str = "switch") -> tuple[str, str]:
    hosts = {
        "all": {
            "children": {
                "sparkplay_nodes": {
                    "hosts": {name: {"sparkplay_rank": rank} for rank, name in enumerate(containers)},
                    "vars": {
                        "ansible_connection": "community.docker.docker",
                        "ansible_python_interpreter": "/usr/bin/python3",
                    },
                }
            }
        }
    }
    dump = lambda data: yaml.safe_dump(data, sort_keys=False, default_flow_style=None)  # noqa: E731
    settings = {**LAB_OVERRIDES, **fabric_settings(len(containers), topology)}
    return HEADER + "---\n" + dump(hosts), HEADER + "---\n" + dump(settings)


def write(project: Path, containers: list[str], topology: str = "switch") -> list[str]:
    """Write both files; return the ones that changed (relative to the project)."""
    changed = []
    for path, content in zip(paths(project), render(containers, topology), strict=True):
        if atomic_write(path, content):
            changed.append(str(path.relative_to(project)))
    return changed


def remove(project: Path) -> list[str]:
    """Remove the files lab up wrote (only if they still carry its marker)."""
    removed = []
    for path in paths(project):
        if path.is_file() and path.read_text().startswith(MARKER):
            path.unlink()
            removed.append(str(path.relative_to(project)))
            # prune the folders lab up made, if now empty
            for parent in path.parents:
                if parent == project / "inventory" or any(parent.iterdir()):
                    break
                parent.rmdir()
    return removed
