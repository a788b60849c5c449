#!/usr/bin/python
"""Ansible module: a role's folders and files on a node in one call, guarded and recorded as sparkplay's."""

from __future__ import annotations

DOCUMENTATION = r"""
module: sparkplay_files
short_description: Converge a role's folders and files on a node in one call
description:
  - Makes each folder in O(directories) with its owner and mode, then writes each file in O(files) in the
    order given, as M(ansible.builtin.copy) does with C(backup=true) (a temporary file beside it with the
    owner and mode, checked by O(files[].validate), renamed over the old one, the old bytes backed up
    under Ansible's backup name). A file whose bytes, owner and mode are already right is left alone.
  - With O(managed=true), sparkplay's guard comes first (when any file exists and was not last written by
    sparkplay (its registry says so), nothing is written unless O(confirm=true)). After writing, the sha256
    of each file goes into the registry.
  - One module run for a whole role, where a task per path costs a round trip each.
  - The files' contents never appear in the result (C(invocation) shows each as its size and sha256);
    O(files[].secret) also keeps one out of the diff.
options:
  folders:
    description: Folders to make (missing parents get 0755) or bring to root:root 0755, before O(directories).
    type: list
    elements: path
    default: []
  directories:
    description: Folders to make (missing parents get 0755) or bring to this owner and mode.
    type: list
    elements: dict
    default: []
    suboptions:
      path:
        description: The folder.
        type: path
        required: true
      owner:
        description: The folder's owner.
        type: str
        default: root
      group:
        description: The folder's group.
        type: str
        default: root
      mode:
        description: The folder's mode, an octal string.
        type: raw
        default: "0755"
  files:
    description: Files to write, in order (a later file's O(files[].validate) may run one written before).
    type: list
    elements: dict
    default: []
    suboptions:
      path:
        description: The file.
        type: path
        required: true
      content:
        description: Its text (UTF-8).
        type: str
      content_base64:
        description: Its bytes in base64, for a binary file.
        type: str
      owner:
        description: The file's owner.
        type: str
        default: root
      group:
        description: The file's group.
        type: str
        default: root
      mode:
        description: The file's mode, an octal string.
        type: raw
        default: "0644"
      validate:
        description: A command that checks the staged file (C(%s) for its path) before it lands.
        type: str
      secret:
        description: Keep its text out of the diff.
        type: bool
        default: false
      managed:
        description: Guard and record this file with O(managed) (false for a file in sparkplay's own folder).
        type: bool
        default: true
  managed:
    description: Guard against replacing files sparkplay did not write, and record the ones it wrote.
    type: bool
    default: true
  confirm:
    description: With O(managed), replace (after backing up) files sparkplay did not write.
    type: bool
    default: false
  registry:
    description: The registry of the files sparkplay wrote on this node.
    type: path
    default: /etc/sparkplay/managed-files.json
author: sparkplay developers (@sparkplay)
"""

EXAMPLES = r"""
- name: The app's folder, its config (checked before it lands) and its environment
  sparkplay.spark.sparkplay_files:
    directories:
      - path: /etc/example
    files:
      - path: /etc/example/app.conf
        content: "port = 8080\n"
        validate: /usr/bin/example-check %s
      - path: /etc/example/example.env
        content: "{{ lookup('ansible.builtin.template', 'example.env.j2') }}"
        mode: "0600"
        secret: true
  register: written
"""

RETURN = r"""
changed_paths:
  description: The folders and files whose bytes, owner or mode changed (or would, in check mode).
  returned: always
  type: list
foreign:
  description: Files that exist and were not last written by sparkplay (with O(managed)).
  returned: always
  type: list
"""

# Ansible modules put their documentation before the imports.
import json  # noqa: E402
import shlex  # noqa: E402

from ansible.module_utils.basic import AnsibleModule  # noqa: E402
from ansible_collections.sparkplay.spark.plugins.module_utils.sparkplay_files import (  # noqa: E402
    converge,
    folder,
    ids,
    mode_of,
    shown,
    wanted,
)
from ansible_collections.sparkplay.spark.plugins.module_utils.sparkplay_managed import (  # noqa: E402
    foreign,
    load_registry,
    prune_backups,
    recorded,
    state,
    write_registry,
)

FOLDER = {
    "path": {"type": "path", "required": True},
    "owner": {"type": "str", "default": "root"},
    "group": {"type": "str", "default": "root"},
    "mode": {"type": "raw", "default": "0755"},
}
FILE = {
    "path": {"type": "path", "required": True},
    "content": {"type": "str"},
    "content_base64": {"type": "str"},
    "owner": {"type": "str", "default": "root"},
    "group": {"type": "str", "default": "root"},
    "mode": {"type": "raw", "default": "0644"},
    "validate": {"type": "str"},
    "secret": {"type": "bool", "default": False},
    "managed": {"type": "bool", "default": True},
}


class FilesModule(AnsibleModule):
    """AnsibleModule, but the record of the call it writes to the node's system log shows each file's content
    as its size and sha256, as the result does: an env file holds an engine's API key. (no_log on the option
    would hide the contents too, and so every unit's check-mode diff, which are not secret.)"""

    def _log_invocation(self) -> None:
        self.log(f"Invoked with {json.dumps({**self.params, 'files': shown(self.params['files'])}, sort_keys=True)}")


def main() -> None:
    module = FilesModule(
        argument_spec={
            "folders": {"type": "list", "elements": "path", "default": []},
            "directories": {"type": "list", "elements": "dict", "default": [], "options": FOLDER},
            "files": {
                "type": "list",
                "elements": "dict",
                "default": [],
                "options": FILE,
                "mutually_exclusive": [["content", "content_base64"]],
                "required_one_of": [["content", "content_base64"]],
            },
            "managed": {"type": "bool", "default": True},
            "confirm": {"type": "bool", "default": False},
            "registry": {"type": "path", "default": "/etc/sparkplay/managed-files.json"},
        },
        supports_check_mode=True,
    )
    params = module.params
    # the result's record of the call: each content as its size and digest (an env file may hold a token)
    invocation = {"module_args": {**params, "files": shown(params["files"])}}

    def fail(msg: str, **extra: object) -> None:
        module.fail_json(msg=msg, invocation=invocation, **extra)

    try:
        files = [wanted(entry) for entry in params["files"]]
    except (KeyError, ValueError) as exc:  # an unknown owner or group, a mode that is not octal, bad base64
        fail(f"sparkplay_files: {exc}")
    paths = [entry["path"] for entry in params["files"] if entry["managed"]]
    registry = load_registry(params["registry"]) if params["managed"] else {}
    others = foreign({p: state(p) for p in paths}, registry) if params["managed"] else []
    if others and not params["confirm"] and not module.check_mode:
        fail(
            f"These files exist and were not written by sparkplay: {', '.join(others)}. Nothing was changed. "
            "To back them up and replace them, run again with -e sparkplay_confirm_overwrite=true (the "
            "sparkplay CLI asks first).",
            foreign=others,
        )
    changed = []
    try:
        plain = [{"path": p, "owner": "root", "group": "root", "mode": "0755"} for p in params["folders"]]
        for entry in plain + params["directories"]:
            try:
                uid, gid = ids(entry["owner"], entry["group"])
            except KeyError:
                if not module.check_mode:
                    raise
                # a user an earlier task of this run makes (which check mode only said it would): the folder
                # would be made for it
                changed.append(entry["path"])
                continue
            if folder(entry["path"], mode_of(entry["mode"]), uid, gid, module.check_mode):
                changed.append(entry["path"])
        outcome = converge(
            files,
            module.check_mode,
            module._diff,
            run=lambda cmd: module.run_command(shlex.split(cmd)),
            backup=module.backup_local,
        )
    except (KeyError, ValueError, OSError) as exc:
        fail(f"sparkplay_files: {exc}", changed_paths=changed)
    changed += outcome.changed
    if params["managed"] and not module.check_mode:
        updated = recorded({p: state(p) for p in paths}, registry)
        if updated != registry:
            write_registry(params["registry"], updated)
        registry = updated
    if not module.check_mode:  # the newest backups of each file rewritten, and its original, are kept
        originals = {entry.get("original") for entry in registry.values()}
        for path in outcome.changed:
            prune_backups(path, originals)
    result = {"changed": bool(changed), "changed_paths": changed, "foreign": others, "invocation": invocation}
    if module._diff and outcome.diff:
        result["diff"] = outcome.diff
    module.exit_json(**result)


if __name__ == "__main__":
    main()
