"""Verify status changed nothing: every rank's serve unit is still active and enabled, and rank 0's
model still answers (testinfra, read-only)."""

import json


def rank(host):
    return int(host.backend.get_variables()["sparkplay_rank"])


def test_every_rank_still_serves(host):
    unit = host.service("sparkplay-serve.service")
    assert unit.is_running and unit.is_enabled


def test_the_leader_still_answers(host):
    if rank(host) != 0:
        return
    record = json.loads(host.file("/etc/sparkplay/serve.json").content_string)
    models = json.loads(host.check_output(f"curl -s -m 10 {record['api_url']}/v1/models"))
    assert models["data"], models
