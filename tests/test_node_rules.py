"""Rules the node roles reach through filters: managed files, cable addressing, host facts."""

from __future__ import annotations

import pytest

from sparkplay.fabric import address_map, peer_addresses, ping_plan, twin_addresses
from sparkplay.hostfacts import docker_daemon_merge, free_bytes_for, listener_pids, nvidia_arch
from sparkplay.managed import foreign_files, foreign_report, record


def stat(path, exists=True, checksum="aa", isdir=False):
    return {"item": path, "stat": {"exists": exists, "checksum": checksum, "isdir": isdir}}


def test_foreign_files_are_existing_files_not_last_written_by_sparkplay():
    registry = {"/etc/ours": "aa", "/etc/edited": "aa"}
    stats = [
        stat("/etc/ours"),
        stat("/etc/edited", checksum="bb"),  # sparkplay wrote it, someone changed it since
        stat("/etc/users"),  # never written by sparkplay
        stat("/etc/missing", exists=False),  # nothing to overwrite
    ]
    assert foreign_files(stats, registry) == ["/etc/edited", "/etc/users"]


def test_record_updates_only_written_files():
    assert record([stat("/b", checksum="2"), stat("/c", exists=False)], {"/a": "1"}) == {"/a": "1", "/b": "2"}


def test_foreign_report_lists_host_and_path():
    hostvars = {"a": {"managed_files_foreign": ["/etc/x"]}, "b": {}}
    assert foreign_report(["a", "b"], hostvars) == ["a: /etc/x"]


def test_twin_addresses_follow_rank():
    subnets = ["192.168.100.0/24", "192.168.101.0/24"]
    assert twin_addresses(subnets, 0) == ["192.168.100.10/24", "192.168.101.10/24"]
    assert twin_addresses(subnets, 1, count=1) == ["192.168.100.11/24"]
    with pytest.raises(ValueError, match="outside"):
        twin_addresses(subnets, 250)


def test_address_map_honours_per_host_override():
    hostvars = {"a": {"sparkplay_rank": 0}, "b": {"sparkplay_rank": 1, "fabric_addresses": ["10.9.0.2/24"]}}
    mapping = address_map(["a", "b"], hostvars, ["192.168.100.0/24"], 10)
    assert mapping == {"a": ["192.168.100.10/24"], "b": ["10.9.0.2/24"]}


def test_ping_plan_and_peer_addresses():
    mapping = {"a": ["192.168.100.10/24", "192.168.101.10/24"], "b": ["192.168.100.11/24", "192.168.101.11/24"]}
    assert ping_plan(mapping, "a", ["t0", "t1"]) == [
        {"ifname": "t0", "peer": "b", "address": "192.168.100.11"},
        {"ifname": "t1", "peer": "b", "address": "192.168.101.11"},
    ]
    assert [p["address"] for p in peer_addresses(mapping, "b")] == ["192.168.100.10", "192.168.101.10"]


def test_free_bytes_for_uses_the_deepest_mount():
    mounts = [{"mount": "/", "size_available": 10}, {"mount": "/var/lib", "size_available": 99}]
    assert free_bytes_for("/var/lib/sparkplay/models", mounts) == 99
    assert free_bytes_for("/var/libx", mounts) == 10
    assert free_bytes_for("/srv", []) is None


def test_docker_daemon_merge_keeps_user_keys():
    user = {"log-driver": "journald", "runtimes": {"crun": {"path": "/usr/bin/crun"}}}
    merged = docker_daemon_merge(user, "nvidia", "nvidia-container-runtime")
    assert merged["log-driver"] == "journald" and merged["runtimes"]["crun"] == {"path": "/usr/bin/crun"}
    assert merged["runtimes"]["nvidia"] == {"path": "nvidia-container-runtime", "args": []}
    assert user == {"log-driver": "journald", "runtimes": {"crun": {"path": "/usr/bin/crun"}}}  # not mutated
    assert docker_daemon_merge(merged, "nvidia", "x") == merged  # already there: nothing to do


def test_listener_pids_and_nvidia_arch():
    assert listener_pids('LISTEN 0 4096 127.0.0.1:8893 0.0.0.0:* users:(("atlas",pid=4242,fd=7))') == [4242]
    assert (nvidia_arch("aarch64"), nvidia_arch("x86_64")) == ("sbsa", "x86_64")


def test_checkpoint_and_overlay_folders_follow_one_rule():
    from sparkplay.checkpoints import checkpoint_dir, overlay_dir, sources
    from sparkplay.errors import BadInput

    assert checkpoint_dir("/models/", "zai-org/GLM-5.3") == "/models/zai-org--GLM-5.3"
    assert overlay_dir("/models", "/models/atlas-overlay/") == overlay_dir("/models/", "/x/atlas-overlay")
    assert overlay_dir("/models", "/models/atlas-overlay/") == "/models/atlas-overlay"
    for bad in ("/", "", "/models/..", "."):
        with pytest.raises(BadInput, match="names no folder"):
            overlay_dir("/models", bad)  # never the model root itself
    with pytest.raises(BadInput, match="not an absolute path"):
        checkpoint_dir("models/../etc", "a/b")
    recipe = {"model": {"checkpoints": [{"repo": "a/b", "role": "target"}, {"repo": "c/d", "role": "draft"}]}}
    assert [s["dest"] for s in sources(recipe, "/m/")] == ["/m/a--b", "/m/c--d"]
