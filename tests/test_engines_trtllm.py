"""TensorRT-LLM, the fifth engine, added as one package (src/sparkplay/engines/trtllm/).

Test doubles: no GPU, no TensorRT-LLM image and no MPI exist here, so the two-rank plan is held to a golden
file (tests/fixtures/trtllm/plan-two-ranks.json; SPARKPLAY_UPDATE_GOLDEN=1 rewrites it, to be read before it
is committed) and every flag a plan gives trtllm-serve is held to the options its source defines
(engines/trtllm/spec.py SERVE_OPTIONS). Its own parser cannot check the plans here: trtllm-serve's module
imports torch and TensorRT-LLM's CUDA bindings at import, and no build of it installs without CUDA."""

from __future__ import annotations

import json
import os

import pytest

from sparkplay import admission, argv, importing
from sparkplay.engines import registry
from sparkplay.engines.plan import Node, Options, build, stand_in_nodes
from sparkplay.engines.trtllm.spec import SERVE_OPTIONS
from sparkplay.errors import BadInput
from tests.conftest import PROJECT

FIXTURES = PROJECT / "tests" / "fixtures" / "trtllm"
IMAGE = "engine.image=nvcr.io/nvidia/tensorrt-llm/release:1.3.0rc5"
ROOT = "/var/lib/sparkplay/models"


def imported(name: str, *sets: str) -> dict:
    return importing.import_source(str(FIXTURES / name), sets=sets)


def pinned(doc: dict) -> dict:
    for ckpt in doc["model"]["checkpoints"]:
        ckpt["revision"] = "0" * 40
    return doc


def said(doc: dict, how: str) -> str:
    return "\n".join(n["detail"] for n in doc["provenance"] if n["how"] == how)


def test_the_playbooks_two_spark_command_imports_with_its_launcher_and_config_file_named():
    doc = imported("playbook-two-sparks.sh", IMAGE)
    assert doc["engine"]["name"] == "trtllm" and doc["engine"]["runtime"] == "docker"
    assert doc["model"]["repo"] == "nvidia/Qwen3-235B-A22B-FP4" and doc["model"]["served_name"] == doc["model"]["repo"]
    assert doc["topology"]["nodes"] == 2 and doc["topology"]["tensor_parallel"] == 2
    assert doc["serve"]["port"] == 8355 and doc["serve"]["bind"] == "127.0.0.1"
    expected = "--tp_size 2 --backend pytorch --max_num_tokens 32768 --max_batch_size 4 --port 8355"
    assert doc["serve"]["args"] == expected.split()
    ignored = said(doc, "ignored")
    assert "mpirun -x HF_TOKEN trtllm-llmapi-launch" in ignored and "its own launcher" in ignored
    assert "--extra_llm_api_options /tmp/extra-llm-api-config.yml" in ignored and "not applied" in ignored


def test_the_playbooks_page_imports_from_its_docker_exec_with_the_containers_environment():
    """The page's step 10 runs `docker exec -e MODEL=... CONTAINER bash -c '... trtllm-serve $MODEL ...'` in the
    container step 4 started: $MODEL is the exec's environment, the image the run's."""
    doc = imported("playbook-two-sparks-page.md")
    assert doc["engine"]["name"] == "trtllm" and doc["engine"]["image"] == IMAGE.split("=", 1)[1]
    assert doc["model"]["repo"] == "nvidia/Qwen3-235B-A22B-FP4" and doc["topology"]["nodes"] == 2
    assert "HF_TOKEN" not in doc["serve"]["env"]
    overridden = said(doc, "overridden")
    for name in ("OMPI_MCA_orte_default_hostfile", "OMPI_ALLOW_RUN_AS_ROOT", "NCCL_SOCKET_IFNAME", "UCX_NET_DEVICES"):
        assert name in overridden, name  # the plan's mpirun and the node's cable decide them


def test_a_compose_service_running_trtllm_serve_imports_with_its_image():
    doc = imported("compose-gpt-oss.yml")
    assert doc["engine"] == {
        "name": "trtllm",
        "image": "nvcr.io/nvidia/tensorrt-llm/release:1.3.0rc5",
        "image_dir": None,
        "packages": [],
        "runtime": "docker",
    }
    assert doc["model"]["repo"] == "openai/gpt-oss-120b" and doc["context_length"] == 32768
    assert doc["topology"]["nodes"] == 1 and "--trust_remote_code" in doc["serve"]["args"]


def test_the_serve_subcommand_and_its_kv_fraction_read_as_trtllm_serve_reads_them():
    doc = imported("one-line.txt", IMAGE)
    assert doc["model"]["repo"] == "nvidia/Llama-3.1-8B-Instruct-FP4" and doc["context_length"] == 8192
    assert doc["knobs"]["gpu_memory_utilization"] == 0.7  # --kv_cache_free_gpu_memory_fraction


def two_rank_plan() -> dict:
    doc = pinned(imported("playbook-two-sparks.sh", IMAGE))
    return build(doc, stand_in_nodes(2), Options(model_root=ROOT))


def test_the_two_rank_plan_is_the_playbooks_launch_over_the_peer_trust():
    plan = two_rank_plan()
    leader, worker = plan["ranks"]
    assert leader["exec"][:3] == ["/usr/bin/docker", "run", "--rm"]
    assert leader["container_options"][-2:] == ["--entrypoint", "mpirun"]
    launch = leader["argv"]
    assert launch[launch.index("-np") + 1] == "2" and launch[launch.index("--host") + 1] == "192.0.2.10:1,192.0.2.11:1"
    serve = launch[launch.index("trtllm-serve") + 1 :]
    assert serve[0] == "nvidia/Qwen3-235B-A22B-FP4"  # by hub id, read offline from the mirrored cache
    assert argv.flag_value(serve, "--tp_size") == "2" and argv.flag_value(serve, "--port") == "8355"
    assert argv.flag_value(serve, "--host") == "127.0.0.1" and argv.flag_value(serve, "--gpus_per_node") == "1"
    assert leader["env"]["HF_HUB_OFFLINE"] == "1" and "-x" in launch and "HF_HUB_OFFLINE" in launch
    # the worker runs only an ssh server, on its cable address, trusting rank 0's peer key
    assert worker["container_options"][-2:] == ["--entrypoint", "/bin/sh"] and "sshd" in worker["argv"]
    assert "ListenAddress=192.0.2.11" in worker["argv"] and worker["peer_ports"] == [2233]
    assert {m["target"] for m in worker["mounts"]} >= {"/sparkplay-ssh/authorized_keys", "/sparkplay-ssh/host_key"}
    assert all(m["readonly"] for m in worker["mounts"] + leader["mounts"])
    assert leader["wait_for"] == ["192.0.2.11:2233"] and plan["leader_follows_workers"]
    config = next(f for f in leader["files"] if f["path"] == "/etc/sparkplay/trtllm-ssh.conf")
    assert "HostKeyAlias 192.0.2.11" in config["content"] and "StrictHostKeyChecking yes" in config["content"]
    assert "--cap-add" in worker["container_options"] and "SYS_CHROOT" in worker["container_options"]
    assert "SYS_CHROOT" not in leader["container_options"]  # the server's capabilities are the worker's alone


def test_the_two_rank_plan_is_the_golden_one():
    plan = two_rank_plan()
    golden = FIXTURES / "plan-two-ranks.json"
    got = json.dumps(plan, indent=1, sort_keys=True) + "\n"
    if os.environ.get("SPARKPLAY_UPDATE_GOLDEN") == "1":
        golden.write_text(got)
    assert got == golden.read_text(), "the plan changed: read the diff, then SPARKPLAY_UPDATE_GOLDEN=1 to keep it"


def test_every_flag_a_plan_gives_trtllm_serve_is_one_its_source_defines():
    plan = two_rank_plan()
    launch = plan["ranks"][0]["argv"]
    serve = launch[launch.index("trtllm-serve") + 2 :]
    one = build(pinned(imported("one-line.txt", IMAGE)), stand_in_nodes(1), Options(model_root=ROOT))
    for args in (serve, one["ranks"][0]["argv"][2:]):  # one node: `serve MODEL ...` is trtllm-serve's own line
        flags = {a.split("=", 1)[0] for a in args if a.startswith("--")}
        assert flags <= SERVE_OPTIONS, flags - SERVE_OPTIONS


def test_one_node_runs_trtllm_serve_itself():
    plan = build(pinned(imported("one-line.txt", IMAGE)), stand_in_nodes(1), Options(model_root=ROOT))
    (rank,) = plan["ranks"]
    assert rank["container_options"][-2:] == ["--entrypoint", "trtllm-serve"] and rank["wait_for"] == []
    assert rank["argv"][0] == "nvidia/Llama-3.1-8B-Instruct-FP4"
    assert not any(m["target"].startswith("/sparkplay-ssh") for m in rank["mounts"])


def test_what_the_plan_cannot_serve_is_refused_in_one_line():
    doc = pinned(imported("playbook-two-sparks.sh", IMAGE))
    with pytest.raises(BadInput, match="serves the model under its model argument"):
        build({**doc, "model": {**doc["model"], "served_name": "qwen"}}, stand_in_nodes(2), Options(model_root=ROOT))
    with pytest.raises(BadInput, match="names a file on the host"):
        args = [*doc["serve"]["args"], "--config", "/etc/x.yml"]
        build({**doc, "serve": {**doc["serve"], "args": args}}, stand_in_nodes(2), Options(model_root=ROOT))
    hostile = [*argv.without_flags(doc["serve"]["args"], "--tp_size"), "--tp_size", "two"]
    with pytest.raises(BadInput, match="--tensor_parallel_size 'two' is not a whole number"):
        build({**doc, "serve": {**doc["serve"], "args": hostile}}, stand_in_nodes(2), Options(model_root=ROOT))
    three = {**doc, "topology": {**doc["topology"], "nodes": 3}}
    with pytest.raises(BadInput, match=r"tensor 2 x pipeline 1 = 2 GPUs\) does not match the 3 node"):
        build(three, stand_in_nodes(3), Options(model_root=ROOT))
    nodes = stand_in_nodes(2)
    other = dict(nodes[1].fabric_env, SPARKPLAY_FABRIC_TWINS="enp1s0f0np0,enP2p1s0f0np0")
    odd = [nodes[0], Node.from_facts("rank1", {"rank": 1, "machine": "aarch64", "fabric_env": other})]
    with pytest.raises(BadInput, match="cable interfaces differ"):
        build(doc, odd, Options(model_root=ROOT))


def test_its_claim_is_the_weights_then_the_kv_cache_of_what_they_leave_free():
    plan = two_rank_plan()
    ranks = [{"host": r["host"], "role": r["role"], "argv": r["argv"], "env": r["env"]} for r in plan["ranks"]]
    total, weights = 121 * 2**30, 100 * 2**30
    found = admission.claims("qwen", "trtllm", ranks, dict.fromkeys(("rank0", "rank1"), total), weights)
    share = weights // 2
    assert found[0].bytes == share + int(0.9 * (total - share)) + registry.spec("trtllm").overhead_bytes
    assert "a KV cache of 0.9 of what they leave free" in found[0].how
