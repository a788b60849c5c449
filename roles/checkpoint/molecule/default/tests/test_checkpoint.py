"""Verify the mirrored checkpoint on each lab node (testinfra, read-only)."""

import json

DEST = "/var/lib/sparkplay/models/lab-gen"


def test_checkpoint_is_marked_complete_on_every_rank(host):
    marker = json.loads(host.file(f"{DEST}/.sparkplay/complete.json").content_string)
    manifest = json.loads(host.file(f"{DEST}/.sparkplay/manifest.json").content_string)
    assert marker["manifest_digest"] == manifest["digest"]
    assert marker["files"] == manifest["count"] == 2 + 20 + 2 + 1  # shards, small files, config, blob, link


def test_every_file_matches_the_manifest_by_hash(host):
    result = host.run(f"/usr/local/lib/sparkplay/sparkplay-ckpt verify {DEST} --full")
    assert result.rc == 0, result.stdout + result.stderr
    assert json.loads(result.stdout)["ok"] is True


def test_hub_style_symlink_survived(host):
    link = host.file(f"{DEST}/snapshots/main/config.json")
    assert link.is_symlink and link.linked_to.startswith(f"{DEST}/blobs/")
