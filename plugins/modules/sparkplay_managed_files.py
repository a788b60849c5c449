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
  - C(state=reset) puts every file in the registry back as it was before sparkplay (a replaced file gets
    its earlier bytes from the backup, a file sparkplay created is removed), then removes the registry.
  - One module call for any number of paths, where a stat loop would make one per path.
options:
  paths:
    description: The files a role is about to write (probe) or has just written (record); reset takes none.
    type: list
    elements: path
    default: []
  registry:
    description: The registry of the files sparkplay wrote on this node (path to sha256, JSON).
    type: path
    default: /etc/sparkplay/managed-files.json
  confirm:
    description:
      - reset only. A file changed since sparkplay wrote it is put back only when this is true (its current
        bytes are kept beside it as PATH.sparkplay-edited-TIME~); otherwise reset fails naming the files,
        having changed nothing.
    type: bool
    default: false
  state:
    description: probe or record.
    type: str
    choices: [probe, record, reset]
    default: probe
author: sparkplay developers (@sparkplay)
"""

EXAMPLES = r"""
- name: Which of the files about to be written are someone else's
  sparkplay.spark.sparkplay_managed_files:
    paths: [/etc/example/app.conf]
  register: probe

- name: Record what was just written
  sparkplay.spark.sparkplay_managed_files:
    paths: [/etc/example/app.conf]
    state: record

- name: Put every file back as it was before sparkplay, edited ones included
  sparkplay.spark.sparkplay_managed_files:
    state: reset
    confirm: true
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
actions:
  description: What reset did (or would do, in check mode), one line per file.
  returned: when state is reset
  type: list
edited:
  description: Files changed since sparkplay wrote them (reset).
  returned: when state is reset
  type: list
"""

# Ansible modules put their documentation before the imports.
from pathlib import Path  # noqa: E402

from ansible.module_utils.basic import AnsibleModule  # noqa: E402
from ansible_collections.sparkplay.spark.plugins.module_utils.sparkplay_managed import (  # noqa: E402
    edited,
    foreign,
    load_registry,
    recorded,
    reset,
    reset_plan,
    state,
    write_registry,
)


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "paths": {"type": "list", "elements": "path", "default": []},
            "registry": {"type": "path", "default": "/etc/sparkplay/managed-files.json"},
            "state": {"type": "str", "choices": ["probe", "record", "reset"], "default": "probe"},
            "confirm": {"type": "bool", "default": False},
        },
        supports_check_mode=True,
    )
    registry = load_registry(module.params["registry"])
    if module.params["state"] == "reset":
        plan = reset_plan(registry)
        changed_since = edited(registry)
        actions = [
            f"{action} {path}"
            + (f" from {original}" if original else "")
            + (
                " (edited since sparkplay wrote it: its current bytes are kept beside it)"
                if path in changed_since
                else ""
            )
            for path, action, original in plan
        ]
        changed = bool(plan) or Path(module.params["registry"]).exists()
        if changed_since and not module.params["confirm"] and not module.check_mode:
            module.fail_json(
                msg=f"These files changed since sparkplay wrote them: {', '.join(changed_since)}. Nothing was "
                "changed. To keep a copy of each beside it and put it back, run again with "
                "-e sparkplay_confirm_overwrite=true (sparkplay reset asks first).",
                edited=changed_since,
            )
        if changed and not module.check_mode:
            actions = reset(module.params["registry"], registry)
        module.exit_json(changed=changed, foreign=[], registry={}, actions=actions, edited=changed_since)
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
