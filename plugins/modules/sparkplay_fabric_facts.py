#!/usr/bin/python
"""Ansible module: the ConnectX-7 fabric as this host's sysfs shows it (read-only)."""

from __future__ import annotations

DOCUMENTATION = r"""
module: sparkplay_fabric_facts
short_description: Detect a Spark's cabled ConnectX-7 port, its twin, RDMA devices and GID index
description:
  - Reads /sys/class/net and /sys/class/infiniband only; changes nothing.
  - Sets the fact C(sparkplay_fabric).
options:
  twin_pairing:
    description: Pair the cabled netdev with its twin in the other PCIe domain (off for ASUS GX10-style boards).
    type: bool
    default: true
  root:
    description: Filesystem root to read sysfs under (tests point it at captured trees).
    type: path
    default: /
author: sparkplay developers (@sparkplay)
"""

EXAMPLES = r"""
- name: Read the cabled ConnectX-7 port, its twin and the RDMA devices
  sparkplay.spark.sparkplay_fabric_facts:

- name: Read a board whose two PCIe halves are not twins (ASUS GX10-style)
  sparkplay.spark.sparkplay_fabric_facts:
    twin_pairing: false
"""

RETURN = r"""
ansible_facts:
  description: >-
    C(sparkplay_fabric) with netdevs, rdma_devices, rdma_present, twins, cabled_ports, hcas, gid_index, problems.
  returned: always
  type: dict
"""

# Ansible modules put their documentation before the imports.
from ansible.module_utils.basic import AnsibleModule  # noqa: E402
from ansible_collections.sparkplay.spark.plugins.module_utils.sparkplay_fabric import detect  # noqa: E402


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "twin_pairing": {"type": "bool", "default": True},
            "root": {"type": "path", "default": "/"},
        },
        supports_check_mode=True,
    )
    fabric = detect(module.params["root"], module.params["twin_pairing"])
    module.exit_json(changed=False, ansible_facts={"sparkplay_fabric": fabric})


if __name__ == "__main__":
    main()
