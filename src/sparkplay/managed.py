"""Which files on a node sparkplay may update without asking.

sparkplay keeps a registry on each node (/etc/sparkplay/managed-files.json)
of the sha256 of every file it wrote. A file that exists and whose content
is not what sparkplay last wrote there is someone else's (a user's own
netplan file, or one they edited since): replacing it needs confirmation.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any


def foreign_files(stats: Iterable[Mapping[str, Any]], registry: Mapping[str, str]) -> list[str]:
    """Paths from `stat` results that exist and differ from what sparkplay recorded.

    `stats` are the results of ansible.builtin.stat (looped, with
    checksum_algorithm sha256), each carrying `item` (the path) and `stat`.
    """
    found = []
    for result in stats:
        stat = result.get("stat") or {}
        path = result.get("item")
        if not stat.get("exists") or not isinstance(path, str):
            continue
        if stat.get("isdir") or registry.get(path) != stat.get("checksum"):
            found.append(path)
    return found


def record(stats: Iterable[Mapping[str, Any]], registry: Mapping[str, str]) -> dict[str, str]:
    """The registry updated with the checksums of the files just written (sorted for stable output)."""
    updated = dict(registry)
    for result in stats:
        stat = result.get("stat") or {}
        path = result.get("item")
        if isinstance(path, str) and stat.get("exists") and stat.get("checksum"):
            updated[path] = stat["checksum"]
    return dict(sorted(updated.items()))


def foreign_report(hosts: Iterable[str], hostvars: Mapping[str, Any]) -> list[str]:
    """'host: path' for every foreign file noted on any of `hosts`."""
    return [f"{host}: {path}" for host in hosts for path in hostvars[host].get("managed_files_foreign") or []]
