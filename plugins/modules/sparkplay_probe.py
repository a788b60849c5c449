#!/usr/bin/python
"""Ansible module: which of some paths exist and which Debian packages are installed, in one call."""

from __future__ import annotations

DOCUMENTATION = r"""
module: sparkplay_probe
short_description: Look for paths and installed Debian packages on a node in one call
description:
  - Returns which of O(paths) exist (through links) and which of O(packages) dpkg does not list as
    installed, reading dpkg's status file directly; it changes nothing.
  - A role asks once, then runs M(ansible.builtin.apt) only for what is missing. The apt module opens the
    package cache on every call, which on a run that changes nothing costs a second per package task.
  - On a node without dpkg every package is reported missing (the install that follows says why it cannot).
options:
  paths:
    description: Paths to look for.
    type: list
    elements: path
    default: []
  packages:
    description: Debian package names to look for.
    type: list
    elements: str
    default: []
  hash:
    description: Files whose sha256 to compute (an absent one hashes as null).
    type: list
    elements: path
    default: []
  read:
    description:
      - Small text files to read (at most 1 MiB each); an absent one reads as null.
      - Their text is in the result, and so in logs, so this is not for secrets.
    type: list
    elements: path
    default: []
  read_json:
    description:
      - Small JSON files to read and parse (at most 1 MiB each), in RV(documents); an absent one, or one that
        is not JSON, reads as null. As with O(read), not for secrets.
    type: list
    elements: path
    default: []
  users:
    description: User names to look up in the passwd database.
    type: list
    elements: str
    default: []
  disk:
    description: Paths whose filesystem's free bytes to measure (at the nearest existing parent, as df does).
    type: list
    elements: path
    default: []
  listening:
    description: TCP ports whose listeners to list (C(ss -Htlnp --cgroup), one line per listening socket).
    type: list
    elements: int
    default: []
  sizes:
    description: Paths whose bytes to measure (a file's size; a folder's regular files, links not followed).
    type: list
    elements: path
    default: []
  read_dir:
    description: Folders whose C(*.json) files (regular, at most 1 MiB, not in subfolders) to read, as O(read) does.
    type: list
    elements: path
    default: []
  gguf:
    description:
      - GGUF files whose header fields that size llama.cpp's KV cache to read (general.architecture and the
        block, head, embedding, key and value counts); each length in the header is bounded.
    type: list
    elements: path
    default: []
  units:
    description: systemd units whose active and enabled states to read.
    type: list
    elements: str
    default: []
  managed:
    description:
      - Files a role is about to write; those that exist and were not last written by sparkplay (its
        registry says so) come back in RV(foreign), for the play-wide question before anything changes.
    type: list
    elements: path
    default: []
  registry:
    description: The registry of the files sparkplay wrote on this node.
    type: path
    default: /etc/sparkplay/managed-files.json
  dpkg_status:
    description: dpkg's status file.
    type: path
    default: /var/lib/dpkg/status
author: sparkplay developers (@sparkplay)
"""

EXAMPLES = r"""
- name: Look for the model and the packages the role installs
  sparkplay.spark.sparkplay_probe:
    paths: [/var/lib/example/model.gguf]
    packages: [rsync, nftables]
  register: probe

- name: Install what is missing
  ansible.builtin.apt:
    name: "{{ probe.missing_packages }}"
  when: probe.missing_packages | length > 0
"""

RETURN = r"""
missing_paths:
  description: The paths of O(paths) that do not exist.
  returned: always
  type: list
modes:
  description: The mode of each path of O(paths) that exists, as an octal string ("0600").
  returned: always
  type: dict
executable:
  description: The paths of O(paths) this user may execute (a file) or enter (a folder).
  returned: always
  type: list
missing_packages:
  description: The packages of O(packages) dpkg does not list as installed.
  returned: always
  type: list
sha256:
  description: Each file of O(hash) as its sha256, or null when absent.
  returned: always
  type: dict
contents:
  description: Each file of O(read) as text (UTF-8, undecodable bytes replaced), or null when absent.
  returned: always
  type: dict
documents:
  description: Each file of O(read_json), parsed, or null when it is absent or not JSON.
  returned: always
  type: dict
users:
  description: Each user of O(users) as {uid, gid, home, shell}, or null when there is none.
  returned: always
  type: dict
free:
  description: Each path of O(disk) as {at, bytes} (the existing folder measured, the bytes free to a user).
  returned: always
  type: dict
listeners:
  description: Each port of O(listening) as the lines C(ss) printed for it (empty when nothing listens).
  returned: always
  type: dict
bytes:
  description: Each path of O(sizes) as its bytes, or null when absent.
  returned: always
  type: dict
directory_contents:
  description: Each file found by O(read_dir) as text.
  returned: always
  type: dict
gguf_headers:
  description: Each file of O(gguf) as its header fields, or null when absent.
  returned: always
  type: dict
unit_states:
  description: Each unit of O(units) as {active, enabled} (systemd's ActiveState and UnitFileState).
  returned: always
  type: dict
foreign:
  description: The files of O(managed) that exist and were not last written by sparkplay.
  returned: always
  type: list
"""

# Ansible modules put their documentation before the imports.
from ansible.module_utils.basic import AnsibleModule  # noqa: E402
from ansible_collections.sparkplay.spark.plugins.module_utils.sparkplay_gguf import GGUFError, headers  # noqa: E402
from ansible_collections.sparkplay.spark.plugins.module_utils.sparkplay_managed import (  # noqa: E402
    foreign,
    load_registry,
    state,
)
from ansible_collections.sparkplay.spark.plugins.module_utils.sparkplay_probe import (  # noqa: E402
    digests,
    executable,
    free,
    installed,
    missing,
    modes,
    read,
    read_dir,
    read_json,
    sizes,
    unit_states,
    user,
)

# the header fields that size llama.cpp's KV cache (sparkplay.kvcache.HEADER_KEYS says the same)
GGUF_KEYS = (
    "block_count",
    "attention.head_count",
    "attention.head_count_kv",
    "embedding_length",
    "attention.key_length",
    "attention.value_length",
)


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "paths": {"type": "list", "elements": "path", "default": []},
            "packages": {"type": "list", "elements": "str", "default": []},
            "hash": {"type": "list", "elements": "path", "default": []},
            "read": {"type": "list", "elements": "path", "default": []},
            "read_json": {"type": "list", "elements": "path", "default": []},
            "users": {"type": "list", "elements": "str", "default": []},
            "disk": {"type": "list", "elements": "path", "default": []},
            "listening": {"type": "list", "elements": "int", "default": []},
            "units": {"type": "list", "elements": "str", "default": []},
            "sizes": {"type": "list", "elements": "path", "default": []},
            "read_dir": {"type": "list", "elements": "path", "default": []},
            "gguf": {"type": "list", "elements": "path", "default": []},
            "managed": {"type": "list", "elements": "path", "default": []},
            "registry": {"type": "path", "default": "/etc/sparkplay/managed-files.json"},
            "dpkg_status": {"type": "path", "default": "/var/lib/dpkg/status"},
        },
        supports_check_mode=True,
    )
    have = installed(module.params["dpkg_status"]) if module.params["packages"] else set()
    managed = module.params["managed"]
    registry = load_registry(module.params["registry"]) if managed else {}
    try:
        contents = {p: read(p) for p in module.params["read"]}
        documents = {p: read_json(p) for p in module.params["read_json"]}
        space = {p: free(p) for p in module.params["disk"]}
        hashes = digests(module.params["hash"])
        measured = sizes(module.params["sizes"])
        listed = read_dir(module.params["read_dir"])
        found_headers = headers(module.params["gguf"], GGUF_KEYS)
    except GGUFError as exc:
        module.fail_json(msg=f"sparkplay_probe: a GGUF header: {exc}; the file is not one llama.cpp can serve")
    except (OSError, ValueError) as exc:
        module.fail_json(msg=f"sparkplay_probe: {exc}")
    listeners = {}
    if module.params["listening"]:
        ss = module.get_bin_path("ss", required=True)  # iproute2
        for port in module.params["listening"]:
            rc, out, err = module.run_command([ss, "-Htlnp", "--cgroup", f"sport = :{port}"])
            if rc != 0:
                module.fail_json(msg=f"sparkplay_probe: ss could not list port {port}'s listeners: {err.strip()}")
            listeners[str(port)] = out
    module.exit_json(
        changed=False,
        listeners=listeners,
        contents=contents,
        documents=documents,
        bytes=measured,
        directory_contents=listed,
        gguf_headers=found_headers,
        sha256=hashes,
        users={name: user(name) for name in module.params["users"]},
        free=space,
        unit_states=unit_states(module.get_bin_path("systemctl"), module.run_command, module.params["units"]),
        missing_paths=missing(module.params["paths"]),
        executable=executable(module.params["paths"]),
        modes=modes(module.params["paths"]),
        missing_packages=[p for p in module.params["packages"] if p.split("=", 1)[0] not in have],
        foreign=foreign({p: state(p) for p in managed}, registry),
    )


if __name__ == "__main__":
    main()
