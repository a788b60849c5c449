"""Every option a role's meta/argument_specs.yml documents has a test of its effect (no lab).

The sample inventory's knobs are covered by tests/test_knobs.py (EFFECT_TESTS: the lab, the plan, rendered
tasks). The other options are a role's interface for people who use the roles from the collection: each
is set here to another value, and the task argument, condition or file it feeds is rendered from the real
role with the real defaults, before and after: the new value must show there.
"""

from __future__ import annotations

import atexit
import json
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from sparkplay.served import records
from tests.conftest import PROJECT
from tests.role_render import render, role_vars, task, template
from tests.test_knobs import documented, effect_tests


def spec_options() -> dict[str, str]:
    """option -> role, for every option of every entry point of every role."""
    found: dict[str, str] = {}
    for path in sorted(PROJECT.glob("roles/*/meta/argument_specs.yml")):
        for entry in (yaml.safe_load(path.read_text())["argument_specs"] or {}).values():
            for option in entry.get("options") or {}:
                found[option] = path.parts[-3]
    return found


CKPT = {
    "checkpoint_tool": "/usr/local/lib/sparkplay/sparkplay-ckpt",
    "checkpoint_revision": "c0ffee",
    "checkpoint_source": {"name": "m", "repo": "org/m", "dest": "/models/org--m", "kind": "hf"},
    "checkpoint_cable_address": "192.168.100.11",
    "checkpoint_resolved_commit": "c0ffee",
    "inventory_dir": "/inv",
    "inventory_hostname": "spark0",
}
DEPLOYED = {
    "sparkplay_deployment": {
        "leader": "spark0",
        "checkpoints": [{"name": "m", "kind": "hf"}],
        "paths": {"model_root": "/var/lib/sparkplay/models", "unit_dir": "/u"},
        "api": {"port": 8000},
    }
}
FABRIC = {
    "inventory_hostname": "spark0",
    "sparkplay_fabric": {"rdma_present": True, "hcas": ["rocep1s0f1"], "gid_index": 3, "twins": ["enp1s0f1np1"]},
    "fabric_address_map": {"spark0": ["192.168.100.10/24"], "spark1": ["192.168.100.11/24"]},
}
PEER = {
    **DEPLOYED,
    "inventory_hostname": "spark1",
    "peer_ssh_user": "root",
    "peer_ssh_key": "/root/.ssh/k",
    "peers": ["spark0"],
    "fabric_address_map": FABRIC["fabric_address_map"],
    "peer_ssh_probe": {"users": {"root": {"uid": 0, "gid": 0, "home": "/root", "shell": "/bin/sh"}}},
    "hostvars": {"spark0": {"peer_ssh_public_key": "ssh-ed25519 AAAA"}},
    "fabric_subnets": ["192.168.100.0/24"],
}
BENCH = {
    "bench_served": {
        "api_url": "http://127.0.0.1:8000",
        "served_name": "m",
        "tool": "/t",
        "runtime": "native",
        "state_dir": "/var/lib/sparkplay",
    },
    "bench_model_tokenizer": {"stat": {"exists": False}},
    "sparkplay_recipe_plan": {},
    "sparkplay_deployment": {"model": {"repo": "org/m"}, "paths": {"tools": {"serve": "/t"}}},
}


@dataclass(frozen=True)
class Effect:
    """`option` set to `value` changes what `where` renders to (a key path into the task, or `when`)."""

    role: str
    path: str  # a task file (with `task`) or a template
    value: Any
    task: str = ""
    where: tuple[str, ...] = ()
    given: dict[str, Any] = field(default_factory=dict)
    shows: str | None = None  # what the rendered effect holds afterwards (default: the value itself)


STACK_PLAN = {
    "runtime": "native",
    "image": None,
    "packages": ["llama.cpp-tools"],
    "install": None,
    "ranks": [{"host": "n0", "exec": ["/usr/bin/llama-server", "-m", "m.gguf"]}],
}
STACK_DRIFT = {
    "sparkplay_stack_lock": {"hash": "sha256:0", "recipe": {"name": "r", "sha256": "0"}, "nodes": {}},
    "ansible_play_hosts": [],
    "groups": {"sparkplay_nodes": []},
    "hostvars": {"localhost": {"stack_drift": {"lines": ["rank 1 (n1): kernel 6.17 (locked 6.14)"], "hash": "x"}}},
}


def lab_tiny_leader() -> dict[str, Any]:
    """The serve role's view on lab-tiny's leader: its plan and deployment, computed by the Deployment."""
    from sparkplay import deployment
    from sparkplay.engines.plan import stand_in_nodes
    from sparkplay.recipes.store import catalog

    doc = catalog.load_for_use(catalog.catalog_dir(PROJECT), "lab-tiny")
    facts = {n.host: {"machine": "aarch64", "fabric_env": dict(n.fabric_env)} for n in stand_in_nodes(2)}
    full = deployment.with_launch(deployment.compute(doc, {"rank0": 0, "rank1": 1}, {}), doc, facts, {})
    return {
        "serve_plan": full["launch"],
        "serve_rank": full["launch"]["ranks"][0],
        "sparkplay_deployment": full,
        "serve_claim": None,
    }


def bench_effect(value: Any, shows: str | None = None) -> Effect:
    """An option of the bench role, seen in the command the bench runs on the leader."""
    return Effect(
        "bench",
        "roles/bench/tasks/main.yml",
        value,
        "Bench | Run the invariance check and llama-benchy",
        ("ansible.builtin.command", "argv"),
        BENCH,
        shows,
    )


def _records() -> dict[str, str]:
    """Two deployments' leader records on one node: the primary's (lab-tiny) and an added one (lab-small)."""
    tiny = {
        "recipe": "lab-tiny",
        "role": "leader",
        "unit": "sparkplay-serve.service",
        "served_name": "lab-tiny",
        "api_url": "http://127.0.0.1:9931",
        "slot": None,
    }
    small = {
        **tiny,
        "recipe": "lab-small",
        "unit": "sparkplay-serve@lab-small.service",
        "served_name": "lab-small",
        "api_url": "http://127.0.0.1:9933",
        "slot": "lab-small",
    }
    return {"/etc/sparkplay/serve.json": json.dumps(tiny), "/etc/sparkplay/serve.d/lab-small.json": json.dumps(small)}


def _admission_given() -> dict[str, Any]:
    """lab-small added beside nothing, on a node with 0.2 GiB free: the rule refuses it unless forced."""
    from tests.test_several import hosts, staged

    launch = staged("lab-small", {"serve_mode": "add"})["launch"]
    memory = hosts(available=0.2)
    return {
        "serve_deployment": {"launch": launch},
        "ansible_play_hosts": list(memory),
        "hostvars": {h: {"serve_node_memory": m, "serve_node_records": {}} for h, m in memory.items()},
        "sparkplay_deployment": {"leader": "rank0", "slot": "lab-small"},
        "inventory_hostname": "rank0",
    }


# the gateway's unit on the leader of a deployment (lab-tiny's leader rank, no engine key)
GATEWAY = {
    "ansible_managed": "x",
    "inventory_hostname": "spark0",
    "sparkplay_deployment": {
        "slot": None,
        "paths": {"unit_dir": "/etc/systemd/system", "fabric_env": "/etc/sparkplay/fabric.env"},
    },
    "serve_deployment": {"launch": {"ranks": [{"role": "leader", "host": "spark0", "record": {}, "env": {}}]}},
}
# a keys file as the controller holds it (0600), for the option that names one
KEYS_FILE = Path(tempfile.mkdtemp(prefix="sparkplay-keys.")) / "gateway-keys"
KEYS_FILE.write_text("sk-test\n")
KEYS_FILE.chmod(0o600)
atexit.register(shutil.rmtree, KEYS_FILE.parent, ignore_errors=True)  # a test leaves no secret behind in /tmp


def _gateway_routes_given() -> dict[str, Any]:
    """This run adds lab-small beside lab-tiny (the primary): the routes the gateway gets."""
    from sparkplay.served import records

    found = records({"spark0": _records()})
    small = next(r for r in found if r["slot"] == "lab-small")
    leader = {"role": "leader", "host": "spark0", "record": small}
    meminfo = "MemTotal:       25165824 kB\nMemAvailable:   20971520 kB\n"
    return {
        "serve_records_found": [r for r in found if r["slot"] is None],
        "sparkplay_deployment": {"slot": "lab-small", "paths": {"unit_dir": "/etc/systemd/system"}},
        "serve_deployment": {"launch": {"ranks": [leader]}},
        "ansible_play_hosts_all": ["spark0"],
        "hostvars": {"spark0": {"serve_node_memory": {"meminfo": meminfo}}},
    }


def _update_given() -> dict[str, Any]:
    """lab-small runs on rank1 and its recipe changed: the first pass of its update plans its stand-in."""
    from tests.test_several import record_of
    from tests.test_update_beside import ADD, changed_small, staged

    running = record_of(staged("lab-small", ADD)["launch"], {"rank1": {"bytes": 2**30, "how": "x"}})
    standin = staged("lab-small", {**ADD, "serve_standin": True}, changed_small())["launch"]
    return {"serve_records_found": running, "serve_deployment": {"launch": standin}, "serve_admission": {}}


EFFECTS: dict[str, Effect] = {
    "serve_force_admit": Effect(
        "serve",
        "roles/serve/tasks/admit.yml",
        True,
        "Serve | Admit the deployment beside",
        ("ansible.builtin.set_fact", "serve_admission"),
        _admission_given(),
        shows="does not fit on rank0",
    ),
    "serve_reload_timeout": Effect(
        "serve",
        "roles/serve/tasks/reload.yml",
        60,
        "Serve | Wait until each restarted model answers",
        ("retries",),
        shows="30",
    ),
    "serve_gateway_port": Effect(
        "serve", "roles/serve/templates/sparkplay-gateway.service.j2", 9940, given=GATEWAY, shows="127.0.0.1:9940"
    ),
    "serve_gateway_bind": Effect(
        "serve", "roles/serve/templates/sparkplay-gateway.service.j2", "::1", given=GATEWAY, shows="[::1]:9930"
    ),
    "serve_gateway_keys_file": Effect(
        "serve",
        "roles/serve/templates/sparkplay-gateway.service.j2",
        str(KEYS_FILE),
        given=GATEWAY,
        shows='"--keys" "/etc/sparkplay/gateway/keys"',
    ),
    "serve_gateway_default_model": Effect(
        "serve",
        "roles/serve/tasks/gateway.yml",
        "lab-small",
        "Serve | Note the gateway's routes",
        ("ansible.builtin.set_fact", "serve_gateway_routes"),
        _gateway_routes_given(),
        shows="'default': 'lab-small'",
    ),
    "stop_recipe": Effect(
        "stop",
        "roles/stop/tasks/main.yml",
        "lab-small",
        "Stop | Note the deployments to stop here",
        ("ansible.builtin.set_fact", "stop_records"),
        {"inventory_hostname": "spark0", "stop_read": {"directory_contents": {}, "contents": _records()}},
    ),
    "bench_model": Effect(
        "bench",
        "roles/bench/tasks/main.yml",
        "lab-small",
        "Bench | Find the deployment to measure",
        ("ansible.builtin.set_fact", "bench_found"),
        {
            "ansible_play_hosts": ["spark0"],
            "sparkplay_recipe_plan": {"name": "lab-tiny"},
            "hostvars": {"spark0": {"bench_records": records({"spark0": _records()})}},
        },
    ),
    "bench_pp": bench_effect([777]),
    "bench_tg": bench_effect([55]),
    "bench_depth": bench_effect([4096]),
    "bench_concurrency": bench_effect([3]),
    "bench_runs": bench_effect(7),
    "bench_invariance_tokens": bench_effect(99),
    "bench_timeout": bench_effect(321),
    "bench_tokenizer": bench_effect(
        "/mine/tokenizer.json",
        shows="/var/lib/sparkplay/bench/tokenizer.json",
    ),
    "bench_corpus": Effect(
        "bench",
        "roles/bench/tasks/main.yml",
        "/mine/book.txt",
        "Bench | Copy the corpus",
        ("ansible.builtin.copy", "src"),
        BENCH,
    ),
    "checkpoint_hf_token": Effect(
        "checkpoint",
        "roles/checkpoint/tasks/download.yml",
        "hf_secret",
        "Checkpoint | Keep the Hugging Face token",
        ("ansible.builtin.copy", "content"),
        CKPT,
    ),
    "checkpoint_hf_token_file": Effect(
        "checkpoint",
        "roles/checkpoint/tasks/download.yml",
        "/run/tok",
        "Checkpoint | Download",
        ("ansible.builtin.command", "argv"),
        CKPT,
    ),
    "checkpoint_record_dir": Effect(
        "checkpoint",
        "roles/checkpoint/tasks/leader.yml",
        "/srv/records",
        "Checkpoint | Is rank 0's copy complete",
        ("ansible.builtin.command", "argv"),
        CKPT,
    ),
    "checkpoint_accept_changed": Effect(
        "checkpoint",
        "roles/checkpoint/tasks/leader.yml",
        ["m"],
        "Checkpoint | Hash rank 0's copy into its manifest and mark it",
        ("ansible.builtin.command", "argv"),
        CKPT,
        shows="--accept",
    ),
    "checkpoint_tool": Effect(
        "checkpoint",
        "roles/checkpoint/tasks/download.yml",
        "/opt/ckpt",
        "Checkpoint | Download",
        ("ansible.builtin.command", "argv"),
        CKPT,
    ),
    "checkpoint_hub_packages": Effect(
        "checkpoint",
        "roles/checkpoint/tasks/install.yml",
        ["python3-hub-x"],
        "Checkpoint | Install huggingface_hub",
        ("ansible.builtin.apt", "name"),
        CKPT,
    ),
    "checkpoint_packages": Effect(
        "checkpoint",
        "roles/checkpoint/tasks/install.yml",
        ["rsync-x"],
        "Checkpoint | Install rsync and python3",
        ("ansible.builtin.apt", "name"),
        CKPT,
    ),
    "checkpoint_model_root": Effect(
        "checkpoint",
        "roles/checkpoint/tasks/install.yml",
        "/srv/models",
        "Checkpoint | Install the checkpoint tool and make the model root",
        ("sparkplay.spark.sparkplay_files", "folders"),
        CKPT,
    ),
    "checkpoint_leader": Effect(
        "checkpoint",
        "roles/checkpoint/tasks/install.yml",
        "spark9",
        "Checkpoint | Install huggingface_hub",
        ("when",),
        {**CKPT, **DEPLOYED},
    ),
    "checkpoint_sources": Effect(
        "checkpoint",
        "roles/checkpoint/tasks/install.yml",
        [],
        "Checkpoint | Install rsync and python3",
        ("when",),
        {**CKPT, **DEPLOYED},
    ),
    "checkpoint_lock": Effect(
        "checkpoint",
        "roles/checkpoint/tasks/resolve.yml",
        {"org/other": "feed"},
        "Checkpoint | Record it beside",
        ("ansible.builtin.copy", "content"),
        CKPT,
    ),
    "checkpoint_lock_file": Effect(
        "checkpoint",
        "roles/checkpoint/tasks/resolve.yml",
        "/inv/lock.yml",
        "Checkpoint | Record it beside",
        ("ansible.builtin.copy", "dest"),
        CKPT,
    ),
    "checkpoint_mirror_timeout": Effect(
        "checkpoint", "roles/checkpoint/tasks/download.yml", 1234, "Checkpoint | Download", ("async",), CKPT
    ),
    "checkpoint_progress_interval": Effect(
        "checkpoint", "roles/checkpoint/tasks/download.yml", 9, "Checkpoint | Download", ("poll",), CKPT
    ),
    "engine_docker": Effect(
        "engine",
        "roles/engine/tasks/docker.yml",
        "/opt/docker",
        "Engine | Pull the image",
        ("ansible.builtin.command", "argv"),
        {"engine_plan": {"image": "example/engine:1", "image_dir": "e"}},
    ),
    "engine_plan": Effect(
        "engine",
        "roles/engine/tasks/docker.yml",
        {"image": "example/other:2", "image_dir": "e"},
        "Engine | Pull the image",
        ("ansible.builtin.command", "argv"),
        {"engine_plan": {"image": "example/engine:1", "image_dir": "e"}},
    ),
    "fabric_memlock_file": Effect(
        "fabric",
        "roles/fabric/tasks/configure.yml",
        "/etc/security/limits.d/x.conf",
        "",
        ("var", "fabric_managed_files"),  # the files the role writes (fabric_files_wanted), guarded and recorded
        FABRIC,
    ),
    "fabric_nccl_rdma_env": Effect(
        "fabric", "roles/fabric/templates/fabric.env.j2", {"NCCL_IB_TIMEOUT": "99"}, given=FABRIC
    ),
    "fabric_nccl_socket_env": Effect(
        "fabric",
        "roles/fabric/templates/fabric.env.j2",
        {"NCCL_BUFFSIZE": "77"},
        given={**FABRIC, "sparkplay_fabric": {**FABRIC["sparkplay_fabric"], "rdma_present": False, "hcas": []}},
    ),
    "fabric_ping_size": Effect(
        "fabric",
        "roles/fabric/tasks/run.yml",
        1234,
        "Fabric | Jumbo ping every peer",
        ("ansible.builtin.command", "argv"),
        {**FABRIC, "item": {"ifname": "enp1s0f1np1", "address": "192.168.100.11"}},
    ),
    "fabric_rdma_packages": Effect(
        "fabric",
        "roles/fabric/tasks/install.yml",
        ["rdma-x"],
        "Fabric | Install the RDMA userland",
        ("ansible.builtin.apt", "name"),
        FABRIC,
    ),
    "managed_files_paths": Effect(
        "managed_files",
        "roles/managed_files/tasks/probe.yml",
        ["/etc/x.conf"],
        "Managed files | Look at the files",
        ("sparkplay.spark.sparkplay_managed_files", "paths"),
    ),
    "managed_files_registry": Effect(
        "managed_files",
        "roles/managed_files/tasks/probe.yml",
        "/etc/reg.json",
        "Managed files | Look at the files",
        ("sparkplay.spark.sparkplay_managed_files", "registry"),
    ),
    "mtp_overlay_enabled": Effect(
        "mtp_overlay", "roles/mtp_overlay/tasks/main.yml", True, "MTP overlay | Convert and verify", ("when",)
    ),
    "mtp_overlay_lib": Effect(
        "mtp_overlay",
        "roles/mtp_overlay/tasks/run.yml",
        "/opt/lib",
        "MTP overlay | Convert",
        ("environment",),
        {"mtp_overlay_source": "/s", "mtp_overlay_output": "/o"},
    ),
    "mtp_overlay_packages": Effect(
        "mtp_overlay",
        "roles/mtp_overlay/tasks/install.yml",
        ["numpy-x"],
        "MTP overlay | Install numpy",
        ("ansible.builtin.apt", "name"),
    ),
    "mtp_overlay_timeout": Effect(
        "mtp_overlay",
        "roles/mtp_overlay/tasks/run.yml",
        4321,
        "MTP overlay | Convert",
        ("async",),
        {"mtp_overlay_source": "/s", "mtp_overlay_output": "/o"},
    ),
    "mtp_overlay_source": Effect(
        "mtp_overlay",
        "roles/mtp_overlay/tasks/run.yml",
        "/m/src2",
        "MTP overlay | Convert",
        ("ansible.builtin.command", "argv"),
        {"mtp_overlay_source": "/s", "mtp_overlay_output": "/o"},
    ),
    "mtp_overlay_output": Effect(
        "mtp_overlay",
        "roles/mtp_overlay/tasks/run.yml",
        "/m/out2",
        "MTP overlay | Convert",
        ("ansible.builtin.command", "argv"),
        {"mtp_overlay_source": "/s", "mtp_overlay_output": "/o"},
    ),
    "mtp_overlay_match": Effect(
        "mtp_overlay",
        "roles/mtp_overlay/tasks/run.yml",
        "layers.7",
        "MTP overlay | Convert",
        ("ansible.builtin.command", "argv"),
        {"mtp_overlay_source": "/s", "mtp_overlay_output": "/o"},
    ),
    "mtp_overlay_expect": Effect(
        "mtp_overlay",
        "roles/mtp_overlay/tasks/run.yml",
        17,
        "MTP overlay | Convert",
        ("ansible.builtin.command", "argv"),
        {"mtp_overlay_source": "/s", "mtp_overlay_output": "/o"},
    ),
    "nvidia_stack_cuda_repo": Effect(
        "nvidia_stack",
        "roles/nvidia_stack/tasks/install.yml",
        "https://m.example/cuda",
        "NVIDIA stack | Add the CUDA repository keyring",
        ("ansible.builtin.apt", "deb"),
        {"nvidia_stack_repo_arch": "sbsa"},
    ),
    "nvidia_stack_cuda_distro": Effect(
        "nvidia_stack",
        "roles/nvidia_stack/tasks/install.yml",
        "ubuntu2604",
        "NVIDIA stack | Add the CUDA repository keyring",
        ("ansible.builtin.apt", "deb"),
        {"nvidia_stack_repo_arch": "sbsa"},
    ),
    "nvidia_stack_cuda_keyring": Effect(
        "nvidia_stack",
        "roles/nvidia_stack/tasks/install.yml",
        "keyring-x.deb",
        "NVIDIA stack | Add the CUDA repository keyring",
        ("ansible.builtin.apt", "deb"),
        {"nvidia_stack_repo_arch": "sbsa"},
    ),
    "nvidia_stack_toolkit_key": Effect(
        "nvidia_stack",
        "roles/nvidia_stack/tasks/install.yml",
        "https://m.example/k",
        "NVIDIA stack | Add the container toolkit repository",
        ("ansible.builtin.deb822_repository", "signed_by"),
    ),
    "nvidia_stack_toolkit_repo": Effect(
        "nvidia_stack",
        "roles/nvidia_stack/tasks/install.yml",
        "https://m.example/t",
        "NVIDIA stack | Add the container toolkit repository",
        ("ansible.builtin.deb822_repository", "uris"),
    ),
    "nvidia_stack_dgx_release_file": Effect(
        "nvidia_stack",
        "roles/nvidia_stack/tasks/preflight.yml",
        "/etc/dgx-x",
        "NVIDIA stack | Is this DGX OS",
        ("ansible.builtin.stat", "path"),
    ),
    "nvidia_stack_docker_daemon_file": Effect(
        "nvidia_stack",
        "roles/nvidia_stack/tasks/configure.yml",
        "/etc/docker/d.json",
        "NVIDIA stack | Read daemon.json",
        ("ansible.builtin.slurp", "src"),
    ),
    "nvidia_stack_docker_runtime": Effect(
        "nvidia_stack",
        "roles/nvidia_stack/tasks/configure.yml",
        "nv2",
        "NVIDIA stack | Merge the runtime in",
        ("ansible.builtin.set_fact",),
        {"nvidia_stack_daemon_raw": {"content": "e30="}},
    ),
    "nvidia_stack_docker_runtime_path": Effect(
        "nvidia_stack",
        "roles/nvidia_stack/tasks/configure.yml",
        "/opt/nv-rt",
        "NVIDIA stack | Merge the runtime in",
        ("ansible.builtin.set_fact",),
        {"nvidia_stack_daemon_raw": {"content": "e30="}},
    ),
    "nvidia_stack_gpu_expected": Effect(
        "nvidia_stack",
        "roles/nvidia_stack/tasks/preflight.yml",
        False,
        "NVIDIA stack | Say what is skipped without a GPU",
        ("when",),
    ),
    "peer_ssh_client_config": Effect(
        "peer_ssh",
        "roles/peer_ssh/tasks/configure.yml",
        "/etc/ssh/ssh_config.d/x.conf",
        "Peer ssh | Make the user's .ssh and use the peer key",
        ("sparkplay.spark.sparkplay_files", "files"),
        {**PEER, "ansible_search_path": [str(PROJECT / "roles/peer_ssh")]},
    ),
    "peer_ssh_connect_timeout": Effect("peer_ssh", "roles/peer_ssh/templates/ssh_config.j2", 23, given=PEER),
    "peer_ssh_host_key_type": Effect(
        "peer_ssh",
        "roles/peer_ssh/tasks/configure.yml",
        "rsa",
        "Peer ssh | Read this node's host key",
        ("ansible.builtin.slurp", "src"),
        PEER,
    ),
    "peer_ssh_key_name": Effect(
        "peer_ssh",
        "roles/peer_ssh/tasks/preflight.yml",
        "id_other",
        "Peer ssh | Remember where the key lives",
        ("ansible.builtin.set_fact", "peer_ssh_key"),
        PEER,
    ),
    "peer_ssh_leader": Effect(
        "peer_ssh",
        "roles/peer_ssh/tasks/configure.yml",
        "spark1",
        "Peer ssh | Authorise rank 0's key",
        ("ansible.posix.authorized_key", "state"),
        {**PEER, "item": "spark0"},
        shows="absent",
    ),
    "preflight_gpu_expected": Effect(
        "preflight", "roles/preflight/tasks/gpu.yml", False, "Preflight | GPU checks", ("when",)
    ),
    "preflight_model_root": Effect(
        "preflight",
        "roles/preflight/tasks/recipe.yml",
        "/srv/m",
        "Preflight | Measure free disk at the model root",
        ("sparkplay.spark.sparkplay_probe", "disk"),
        DEPLOYED,
    ),
    "preflight_recipe": Effect(
        "preflight",
        "roles/preflight/tasks/preflight.yml",
        {"name": "r", "topology": {"nodes": 3}},
        "Preflight | Check the inventory has the recipe's node count",
        ("vars", "preflight_node_count_problem"),
        {"groups": {"sparkplay_nodes": ["a", "b"]}, "preflight_recipe": {"name": "r", "topology": {"nodes": 2}}},
    ),
    "preflight_own_unit_prefix": Effect(
        "preflight",
        "roles/preflight/tasks/recipe.yml",
        "other-engine",
        "Preflight | Check the recipe's port is free",
        ("vars", "ours"),
        {"contents": ["0::/system.slice/sparkplay-serve.service", "0::/system.slice/other-engine.service"]},
    ),
    "managed_files_group": Effect(
        "managed_files",
        "roles/managed_files/tasks/confirm.yml",
        "others",
        "Managed files | Collect files",
        ("ansible.builtin.set_fact",),
        {
            "groups": {"sparkplay_nodes": ["a"], "others": ["b"]},
            "hostvars": {"a": {"managed_files_foreign": ["/etc/a"]}, "b": {"managed_files_foreign": ["/etc/b"]}},
        },
        shows="b: /etc/b",
    ),
    "serve_tool": Effect(
        "serve",
        "roles/serve/tasks/configure.yml",
        "/opt/serve-tool",
        "",
        ("var", "serve_gateway.tool_file"),
        GATEWAY,
    ),
    # the stack role (docs/lock.md): where the lock goes, what is read, held and refused
    "stack_lock_file": Effect(
        "stack",
        "roles/stack/tasks/drift.yml",
        "/srv/inventory/stack.yml",
        "Stack | Refuse a cluster that drifted",
        ("ansible.builtin.fail", "msg"),
        {**STACK_DRIFT, "inventory_dir": "/inv"},
    ),
    "stack_hold_packages": Effect(
        "stack", "roles/stack/tasks/lock.yml", False, "Stack | Hold the locked packages", ("when",)
    ),
    "stack_plan": Effect(
        "stack",
        "roles/stack/tasks/lock.yml",
        STACK_PLAN,
        "Stack | Read this node's stack",
        ("vars", "stack_read_args"),
        {"inventory_hostname": "n0"},
        shows="/usr/bin/llama-server",
    ),
    "stack_checkpoints": Effect(
        "stack",
        "roles/stack/tasks/lock.yml",
        [{"dest": "/models/org--m"}],
        "Stack | Read this node's stack",
        ("vars", "stack_read_args"),
        {"inventory_hostname": "n0", "stack_plan": STACK_PLAN},
        shows="/models/org--m",
    ),
    "stack_recipe": Effect(
        "stack",
        "roles/stack/tasks/drift.yml",
        {"name": "other"},
        "Stack | Compare the cluster with its lock",
        ("ansible.builtin.set_fact", "stack_drift"),
        STACK_DRIFT,
        shows="'recipe_changed': True",
    ),
    "stack_refuse_drift": Effect(
        "stack", "roles/stack/tasks/drift.yml", True, "Stack | Refuse a cluster that drifted", ("when",), STACK_DRIFT
    ),
    "stack_accept_drift": Effect(
        "stack",
        "roles/stack/tasks/drift.yml",
        True,
        "Stack | Refuse a cluster that drifted",
        ("when",),
        {**STACK_DRIFT, "stack_refuse_drift": True},
    ),
    "serve_update_beside": Effect(
        "serve",
        "roles/serve/tasks/preflight.yml",
        False,
        "Serve | Decide whether the update starts beside the running deployment",
        ("ansible.builtin.set_fact", "serve_beside"),
        _update_given(),
        shows="updated in place",
    ),
    "serve_drain_timeout": Effect(
        "serve",
        "roles/serve/tasks/gateway.yml",
        45,
        "Serve | Wait until no request is in flight on an API a route left",
        ("ansible.builtin.command", "argv"),
        {"item": {"model": "m", "to": "http://b", "from": "http://a"}},
    ),
    "serve_rollback": Effect(
        "serve",
        "roles/serve/tasks/run.yml",
        False,
        "Serve | Go back to the last good deployment",
        ("when",),
        {
            "serve_layout": {"plan_leader": "n0"},
            "hostvars": {"n0": {}},
            "ansible_check_mode": False,
            "sparkplay_deployment": {"stands_in_for": None},
        },
    ),
    "serve_rollback_file": Effect(
        "serve",
        "roles/serve/tasks/rollback.yml",
        "/srv/kept.json",
        "Serve | Read the deployment to go back to",
        ("sparkplay.spark.sparkplay_probe", "read_json"),
        {"serve_rollback_file": "/srv/serve.json"},
    ),
    "serve_rollback_current": Effect(
        "serve",
        "roles/serve/tasks/rollback.yml",
        "/srv/last-good.json",
        "Serve | Trade the last good and the previous",
        ("loop",),
        {"serve_rollback_file": "/srv/previous.json", "serve_rollback_current": "/srv/serve.json"},
    ),
    "serve_rollback_swap": Effect(
        "serve",
        "roles/serve/tasks/rollback.yml",
        True,
        "Serve | Trade the last good and the previous",
        ("when",),
        {"serve_rollback_answered": True},
    ),
    "serve_watchdog_state": Effect(
        "serve",
        "roles/serve/templates/sparkplay-serve-watchdog.service.j2",
        "/srv/state/dog.json",
        given={"ansible_managed": "x", **lab_tiny_leader()},
    ),
}


def test_every_option_a_role_documents_has_an_effect_test():
    covered = set(effect_tests()) | set(EFFECTS)
    missing = sorted(set(spec_options()) - covered)
    assert not missing, f"options documented in argument_specs with no effect test: {missing}"
    stale = sorted(set(EFFECTS) - set(spec_options()))
    assert not stale, f"effect tests here for options no role documents: {stale}"
    assert not set(EFFECTS) & set(documented()), "a sample knob's effect test belongs in tests/test_knobs.py"


def _at(value: Any, keys: tuple[str, ...]) -> Any:
    for key in keys:
        value = value[key]
    return value


def rendered(effect: Effect, variables: dict[str, Any]) -> Any:
    if effect.where[:1] == ("var",):  # a role variable a task passes on whole (a file the role writes)
        return render("{{ " + effect.where[1] + " }}", variables)
    if not effect.task:
        return template(effect.path, variables)
    step = task(effect.path, effect.task)
    if effect.where == ("when",):
        conditions = step["when"] if isinstance(step["when"], list) else [step["when"]]
        return [render("{{ " + str(c) + " }}", variables) for c in conditions]
    local = dict(variables)  # the task's own variables, rendered first, in order
    for name, expression in (step.get("vars") or {}).items():
        if name not in variables:
            local[name] = render(expression, local)
    if effect.where[0] == "vars":
        return local[effect.where[1]]
    return render(_at(step, effect.where), local)


@pytest.mark.parametrize("option", sorted(EFFECTS))
def test_an_option_set_to_another_value_changes_what_its_role_does(option: str):
    effect = EFFECTS[option]
    assert spec_options()[option] == effect.role
    base = role_vars(effect.role, **effect.given)
    before, after = rendered(effect, base), rendered(effect, {**base, option: effect.value})
    assert before != after, f"{option}={effect.value!r} changed nothing in {effect.path}"
    if effect.where != ("when",) and (effect.shows or isinstance(effect.value, str | int)):
        wanted = effect.shows or str(effect.value)
        assert wanted in str(after), f"{wanted!r} not in {after}"  # the value (or what it selects) shows


def test_the_on_demand_knobs_reach_the_gateways_routes():
    """serve_on_demand_ttl, serve_on_demand_wait and serve_on_demand_budget_gib, rendered from the gateway's
    task: the routes file the gateway and the swapper read carries them (the budget per node)."""
    base = role_vars("serve", **_gateway_routes_given())
    routes = rendered(EFFECTS["serve_gateway_default_model"], base)
    assert (routes["ttl_s"], routes["wait_s"]) == (600, 120)
    assert routes["budgets"] == {"spark0": 24 * 2**30 - 4 * 2**30}  # MemTotal less the reserve: nothing pinned claims
    knobs = {"serve_on_demand_ttl": 45, "serve_on_demand_wait": 30, "serve_on_demand_budget_gib": 2.5}
    routes = rendered(EFFECTS["serve_gateway_default_model"], {**base, **knobs})
    assert (routes["ttl_s"], routes["wait_s"], routes["budgets"]) == (45, 30, {"spark0": int(2.5 * 2**30)})


def test_the_gateways_secret_files_hold_one_key_a_line():
    """The keys file and an engine's key, rendered as the role writes them: real line ends (a literal
    backslash-n would be a key no client has, and an engine key the engine refuses)."""
    given = _gateway_routes_given()
    leader = given["serve_deployment"]["launch"]["ranks"][0]
    leader = {
        **leader,
        "record": {**leader["record"], "api_key_env": "LLAMA_API_KEY"},
        "env": {"LLAMA_API_KEY": "engine-key"},
    }
    base = role_vars("serve", **{**given, "serve_deployment": {"launch": {"ranks": [leader]}}})
    files = render("{{ serve_gateway.secret_files }}", {**base, "serve_gateway_keys_file": str(KEYS_FILE)})
    assert [(f["path"], f["content"], f["mode"]) for f in files] == [
        ("/etc/sparkplay/gateway/keys", "sk-test\n", "0640"),
        ("/etc/sparkplay/gateway/upstream/lab-small.key", "engine-key\n", "0640"),
    ]
