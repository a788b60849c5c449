#!/usr/bin/python
"""Ansible module: the rows of a node's stack, what `sparkplay lock` records and drift compares."""

from __future__ import annotations

DOCUMENTATION = r"""
module: sparkplay_stack_facts
short_description: Read what a node's serving stack is made of
description:
  - Reads, without changing anything, the OS release, the running kernel, the loaded NVIDIA driver, the
    CUDA toolkit, the stack's Debian packages (NCCL, the container toolkit, Docker, RDMA, the driver's),
    the NCCL and RDMA libraries by sha256 (in the library folders and in the nvidia wheels of any
    virtualenv among O(files)), each cable twin's driver and firmware, the Docker engine and each of
    O(images) by digest, each of O(packages), each of O(files) by sha256 and each of O(checkpoints) by
    its completion marker.
  - What a node does not have reads as null.
options:
  twins:
    description: Network interfaces whose driver and firmware to read (C(ethtool -i)).
    type: list
    elements: str
    default: []
  fabric_env:
    description: A node's fabric environment file; the twins its C(SPARKPLAY_FABRIC_TWINS) names are read too.
    type: path
  holds_file:
    description: The JSON file where sparkplay records the holds it placed (C(held), a list); read into RV(ours).
    type: path
  images:
    description: Docker images to read by digest.
    type: list
    elements: str
    default: []
  docker:
    description: The Docker client.
    type: path
    default: /usr/bin/docker
  packages:
    description: Debian packages whose version to read (besides the stack's own).
    type: list
    elements: str
    default: []
  files:
    description: Files (or a virtualenv folder) whose content to fingerprint.
    type: list
    elements: path
    default: []
  checkpoints:
    description: Checkpoint folders whose completion marker to read.
    type: list
    elements: path
    default: []
author: sparkplay developers (@sparkplay)
"""

EXAMPLES = r"""
- name: Read the stack
  sparkplay.spark.sparkplay_stack_facts:
    twins: [enp1s0f1np1]
    packages: [llama.cpp-tools]
  register: stack
"""

RETURN = r"""
ours:
  description: The installed packages the holds file says sparkplay held (empty without one).
  returned: always
  type: list
holdable:
  description: The installed packages a lock holds (the running kernel's, the NVIDIA driver's).
  returned: always
  type: list
stack:
  description: os, kernel, driver, cuda, packages {name, version, held}, libraries, fabric, docker, images, files,
    checkpoints.
  returned: always
  type: dict
"""

import os  # noqa: E402

from ansible.module_utils.basic import AnsibleModule  # noqa: E402
from ansible_collections.sparkplay.spark.plugins.module_utils.sparkplay_stack import (  # noqa: E402
    HOLD_PACKAGES,
    STACK_PACKAGES,
    checkpoints,
    cuda,
    docker,
    dpkg_packages,
    fabric,
    fabric_twins,
    files,
    held_by_sparkplay,
    libraries,
    nvidia_driver,
    os_release,
)


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "twins": {"type": "list", "elements": "str", "default": []},
            "fabric_env": {"type": "path"},
            "holds_file": {"type": "path"},
            "images": {"type": "list", "elements": "str", "default": []},
            "docker": {"type": "path", "default": "/usr/bin/docker"},
            "packages": {"type": "list", "elements": "str", "default": []},
            "files": {"type": "list", "elements": "path", "default": []},
            "checkpoints": {"type": "list", "elements": "path", "default": []},
        },
        supports_check_mode=True,
    )
    p = module.params

    def run(argv: list) -> tuple:
        return module.run_command(argv, environ_update={"LC_ALL": "C"})

    twins = list(p["twins"])
    for twin in fabric_twins(p["fabric_env"]) if p["fabric_env"] else []:
        twins += [twin] if twin not in twins else []
    installed = dpkg_packages("/var/lib/dpkg/status")
    wanted = set(p["packages"])
    packages = {name: installed.get(name) for name in sorted(wanted)}
    packages.update({n: v for n, v in installed.items() if STACK_PACKAGES.match(n) or HOLD_PACKAGES.match(n)})
    kernel = os.uname().release
    # the running kernel's own packages are the ones held (a newer one installed beside it would boot next)
    running = [n for n in (f"linux-image-{kernel}", f"linux-modules-{kernel}") if n in installed]
    packages.update({name: installed[name] for name in running})
    server, images = docker(p["docker"], p["images"], run)
    module.exit_json(
        changed=False,
        stack={
            "os": os_release(),
            "kernel": kernel,
            "driver": nvidia_driver(),
            "cuda": cuda(),
            "packages": packages,
            "libraries": libraries(p["files"]),
            "fabric": {twin: fabric(twin, module.get_bin_path("ethtool"), run) for twin in twins},
            "docker": server,
            "images": images,
            "files": files(p["files"]),
            "checkpoints": checkpoints(p["checkpoints"]),
        },
        # what a lock holds against unattended upgrades where installed (with the engine's own packages)
        ours=[n for n in held_by_sparkplay(p["holds_file"]) if n in installed] if p["holds_file"] else [],
        holdable=sorted([*running, *(n for n in installed if HOLD_PACKAGES.match(n))]),
    )


if __name__ == "__main__":
    main()
