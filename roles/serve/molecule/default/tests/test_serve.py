"""Verify lab-tiny is served across both ranks (testinfra, read-only)."""

import json
import re

UNIT = "sparkplay-serve.service"


def test_every_rank_runs_its_unit_enabled(host):
    service = host.service("sparkplay-serve")
    assert service.is_running and service.is_enabled
    record = json.loads(host.file("/etc/sparkplay/serve.json").content_string)
    assert record["recipe"] == "lab-tiny"
    assert host.file("/etc/sparkplay/serve.env").mode == 0o600


def test_leader_answers_and_the_worker_serves_rpc_on_its_cable_address_only(host):
    record = json.loads(host.file("/etc/sparkplay/serve.json").content_string)
    if record["role"] == "worker":
        listening = host.check_output("ss -Htln")
        assert f"{record['address']}:50052" in listening and "0.0.0.0:50052" not in listening
        assert ":9931" not in listening  # the API is the leader's alone
        return
    body = json.dumps({"messages": [{"role": "user", "content": "What is 17*23?"}], "temperature": 0, "max_tokens": 8})
    out = host.check_output(
        "curl -s -m 10 -H 'Content-Type: application/json' -d %s %s/v1/chat/completions", body, record["api_url"]
    )
    assert json.loads(out)["choices"][0]["message"]["content"]


def test_model_layers_are_placed_on_rank_1s_rpc_backend(host):
    record = json.loads(host.file("/etc/sparkplay/serve.json").content_string)
    journal = host.check_output("journalctl -u %s --no-pager -o cat", UNIT)
    if record["role"] == "leader":
        assert "offloaded 5/5 layers" in journal
        assert re.search(r"RPC0\[192\.168\.100\.11:50052\] model buffer size", journal)
    else:
        assert re.search(r"\[alloc_buffer\] device: 0, size: [\d.]+ MiB", journal)
