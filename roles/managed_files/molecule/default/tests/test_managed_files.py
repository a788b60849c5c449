"""Verify the registry of what sparkplay wrote: every file it lists exists with the bytes recorded (so a
later run can tell its own file from one a person edited), and only root can change the registry
(testinfra, read-only)."""

import hashlib
import json

REGISTRY = "/etc/sparkplay/managed-files.json"


def test_the_registry_is_root_owned_and_not_world_writable(host):
    registry = host.file(REGISTRY)
    assert registry.exists and registry.user == "root" and not registry.mode & 0o022


def test_every_file_listed_holds_the_bytes_recorded(host):
    listed = json.loads(host.file(REGISTRY).content_string)
    files = listed.get("files", listed)
    assert files, "provisioning recorded no file"
    for path, entry in files.items():
        want = entry if isinstance(entry, str) else entry.get("sha256")
        got = hashlib.sha256(host.file(path).content).hexdigest()
        assert got == want, path
