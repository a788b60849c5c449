#!/usr/bin/python
"""Ansible module: probe the files a role is about to write, or record the ones it wrote, in one call."""

from __future__ import annotations

DOCUMENTATION = r"""
module: sparkplay_managed_files
short_description: Tell sparkplay's files from other people's on a node, and record what sparkplay wrote
description:
  - C(state=probe) reads the registry and each path, and returns the paths that exist and were not last
    written by sparkplay (C(foreign)); it changes nothing.
  - C(state=record) stores the sha256 of each existing path in the registry (atomically); changed only when
    the registry's content changes.
  - One module call for any number of paths, where a stat loop would make one per path.
options:
  paths:
    description: The files a role is about to write (probe) or has just written (record).
    type: list
    elements: path
    required: true
  registry:
    description: The registry of the files sparkplay wrote on this node (path to sha256, JSON).
    type: path
    default: /etc/sparkplay/managed-files.json
  state:
    description: probe or record.
    type: str
    choices: [probe, record]
    default: probe
author: sparkplay
"""

RETURN = r"""
foreign:
  description: Paths that exist and were not last written by sparkplay (probe).
  returned: always
  type: list
registry:
  description: The registry as it is after the call.
  returned: always
  type: dict
"""

# Ansible modules put their documentation before the imports.
from ansible.module_utils.basic import AnsibleModule  # noqa: E402
from ansible.module_utils.sparkplay_managed import (  # noqa: E402
    foreign,
    load_registry,
    recorded,
    state,
    write_registry,
)


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "paths": {"type": "list", "elements": "path", "required": True},
            "registry": {"type": "path", "default": "/etc/sparkplay/managed-files.json"},
            "state": {"type": "str", "choices": ["probe", "record"], "default": "probe"},
        },
        supports_check_mode=True,
    )
    registry = load_registry(module.params["registry"])
    states = {path: state(path) for path in module.params["paths"]}
    if module.params["state"] == "probe":
        module.exit_json(changed=False, foreign=foreign(states, registry), registry=registry)
    updated = recorded(states, registry)
    changed = updated != registry
    if changed and not module.check_mode:
        write_registry(module.params["registry"], updated)
    module.exit_json(changed=changed, foreign=[], registry=updated)


if __name__ == "__main__":
    main()
