"""The lock's rules (sparkplay.stack) and the node-side reader (plugins/module_utils/sparkplay_stack.py).

No doubles: the reader runs on files written here (dpkg's status, os-release, a driver's version file,
CUDA's version.json, a fabric env, a virtualenv, a checkpoint marker), hostile ones included.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from sparkplay import stack
from tests.conftest import PROJECT

sys.path.insert(0, str(PROJECT / "collections"))
from ansible_collections.sparkplay.spark.plugins.module_utils import sparkplay_stack as reader

ROWS = {
    "os": "Ubuntu 24.04.3 LTS",
    "kernel": "6.14.0-1015-nvidia",
    "driver": "580.95.05",
    "cuda": "13.0.88",
    "docker": "28.2.2",
    "packages": {"libnccl2": "2.28.3-1+cuda13.0"},
    "fabric": {"enp1s0f1np1": "mlx5_core 25.07"},
    "images": {},
    "engine_packages": {},
    "files": {"/opt/vllm": "212 distributions sha256:" + "a" * 64},
    "checkpoints": {"/m/glm": {"revision": "abc", "manifest": "1" * 64}},
}
RECIPE = {"name": "glm53", "engine": {"name": "vllm"}}


def locked(**nodes: dict) -> dict:
    return stack.lock(nodes or {"spark-0": ROWS, "spark-1": ROWS}, RECIPE, "2026-12-04T00:00:00Z")


def test_the_lock_names_each_node_the_recipe_and_sparkplay_and_its_hash_ignores_the_time():
    doc = locked()
    assert doc["schema"] == stack.SCHEMA and doc["recipe"] == {"name": "glm53", "sha256": stack.recipe_sha256(RECIPE)}
    later = stack.lock({"spark-0": ROWS, "spark-1": ROWS}, RECIPE, "2027-01-01T00:00:00Z")
    assert later["hash"] == doc["hash"] and later["locked_at"] != doc["locked_at"]
    # the same stack locked again keeps the lock as it is, its time too: a second lock writes nothing
    assert stack.lock({"spark-0": ROWS, "spark-1": ROWS}, RECIPE, "2027", before=doc) == doc
    other = stack.lock({"spark-0": {**ROWS, "kernel": "6.17.0-1008"}, "spark-1": ROWS}, RECIPE, "2027", before=doc)
    assert other["hash"] != doc["hash"] and other["locked_at"] == "2027"


def test_drift_is_said_in_words_per_rank():
    now = {
        "spark-0": ROWS,
        "spark-1": {
            **ROWS,
            "kernel": "6.17.0-1008",
            "packages": {},
            "driver": None,
            "fabric": {**ROWS["fabric"], "enP2p1s0f1np1": "mlx5_core 25.07"},
        },
    }
    found = stack.cluster_drift(locked(), now, {"spark-0": 0, "spark-1": 1})
    assert found["nodes"]["spark-0"] == []
    assert found["lines"] == [
        "rank 1 (spark-1): kernel 6.17.0-1008 (locked 6.14.0-1015-nvidia)",
        "rank 1 (spark-1): NVIDIA driver is gone (locked 580.95.05)",
        "rank 1 (spark-1): package libnccl2 is gone (locked 2.28.3-1+cuda13.0)",
        "rank 1 (spark-1): fabric enP2p1s0f1np1 mlx5_core 25.07 (not in the lock)",
    ]


def test_a_changed_checkpoint_or_virtualenv_is_named_with_short_digests():
    now = {
        **ROWS,
        "files": {"/opt/vllm": "213 distributions sha256:" + "b" * 64},
        "checkpoints": {"/m/glm": {"revision": "def", "manifest": "2" * 64}},
    }
    said = stack.drift(ROWS, now)
    assert said == [
        f"file /opt/vllm 213 distributions sha256:{'b' * 12} (locked 212 distributions sha256:{'a' * 12})",
        f"checkpoint /m/glm revision def, manifest {'2' * 64} (locked revision abc, manifest {'1' * 64})",
    ]


def test_another_recipe_than_the_locked_one_compares_the_stacks_own_rows_only():
    now = {h: {**ROWS, "files": {}, "checkpoints": {}} for h in ("spark-0", "spark-1")}
    ranks = {"spark-0": 0, "spark-1": 1}
    same = stack.cluster_drift(locked(), now, ranks, RECIPE)
    assert not same["recipe_changed"] and len(same["lines"]) == 4  # the engine's rows went: drift
    edited = stack.cluster_drift(locked(), now, ranks, {**RECIPE, "context_length": 8192})
    assert edited["recipe_changed"] and edited["lines"] == []


def test_a_node_not_read_or_not_locked_is_said_so_and_no_lock_is_no_drift():
    found = stack.cluster_drift(
        locked(), {"spark-0": ROWS, "spark-2": ROWS}, {"spark-0": 0, "spark-1": 1, "spark-2": 2}
    )
    assert found["nodes"]["spark-1"] == ["not read (unreachable, or not in this run)"]
    assert "`sparkplay lock` records it" in found["nodes"]["spark-2"][0]
    assert stack.cluster_drift(None, {"spark-0": ROWS}, {"spark-0": 0}) == {
        "locked": False,
        "hash": None,
        "recipe_changed": False,
        "nodes": {},
        "lines": [],
    }


def test_what_to_read_is_the_plans_engine_and_whatever_the_lock_names():
    plan = {
        "runtime": "native",
        "image": None,
        "packages": ["llama.cpp-tools"],
        "install": None,
        "ranks": [{"host": "n0", "exec": ["/usr/bin/llama-server", "-m", "x"]}, {"host": "n1", "exec": ["/rpc"]}],
    }
    args = stack.what_to_read(plan, "n1", None, [{"dest": "/m/tiny"}])
    assert args == {
        "twins": [],
        "images": [],
        "packages": ["llama.cpp-tools"],
        "files": ["/rpc"],
        "checkpoints": ["/m/tiny"],
    }
    docker = {
        "runtime": "docker",
        "image": "vllm/vllm-openai@sha256:" + "c" * 64,
        "packages": [],
        "install": None,
        "ranks": [{"host": "n0", "exec": ["/usr/bin/docker", "run"]}],
    }
    assert stack.what_to_read(docker, "n0")["images"] == [docker["image"]]
    assert stack.what_to_read(docker, "n0")["files"] == []  # docker's client is not the engine
    doc = locked(n0=ROWS)
    merged = stack.what_to_read(None, "n0", doc)  # no plan (status, doctor): what the lock names
    assert (
        merged["files"] == ["/opt/vllm"] and merged["checkpoints"] == ["/m/glm"] and merged["twins"] == ["enp1s0f1np1"]
    )
    assert stack.what_to_read(None, "elsewhere", doc)["files"] == []


def test_holds_are_the_kernels_the_drivers_and_the_engines_and_a_persons_own_stays_theirs():
    read = {
        "packages": {
            "linux-image-6.14.0-1015-nvidia": {"version": "1", "held": False},
            "nvidia-driver-580-open": {"version": "580", "held": True},
            "llama.cpp-tools": {"version": "0.7", "held": False},
            "vllm-extra": None,
        }
    }
    found = stack.holds(
        read,
        ["linux-image-6.14.0-1015-nvidia", "nvidia-driver-580-open"],
        ["llama.cpp-tools", "vllm-extra"],
        ours_before=["old-engine"],
    )
    assert found["hold"] == ["linux-image-6.14.0-1015-nvidia", "llama.cpp-tools", "nvidia-driver-580-open"]
    assert found["ours"] == ["linux-image-6.14.0-1015-nvidia", "llama.cpp-tools"]  # the driver was held by a person
    assert found["release"] == ["old-engine"]
    # held by sparkplay last time, so held now: still sparkplay's to release
    again = stack.holds(
        {"packages": {"llama.cpp-tools": {"version": "0.7", "held": True}}},
        [],
        ["llama.cpp-tools"],
        ours_before=["llama.cpp-tools"],
    )
    assert again["ours"] == ["llama.cpp-tools"] and again["release"] == []


# -- the node-side reader -----------------------------------------------------------------------------------


def test_dpkg_status_is_read_with_holds_and_half_installed_packages_left_out(tmp_path):
    status = tmp_path / "status"
    status.write_text(
        "Package: libnccl2\nStatus: hold ok installed\nVersion: 2.28.3-1+cuda13.0\nDescription: x\n multi: line\n\n"
        "Package: docker.io\nStatus: install ok installed\nVersion: 28.2.2-0ubuntu1\n\n"
        "Package: gone\nStatus: deinstall ok config-files\nVersion: 1\n\n"
        "Package: broken\nStatus: install reinstreq half-installed\nVersion: 1\n\ngarbage without fields\n"
    )
    assert reader.dpkg_packages(str(status)) == {
        "libnccl2": {"version": "2.28.3-1+cuda13.0", "held": True},
        "docker.io": {"version": "28.2.2-0ubuntu1", "held": False},
    }
    assert reader.dpkg_packages(str(tmp_path / "none")) == {}
    assert reader.STACK_PACKAGES.match("nvidia-driver-580-open") and not reader.STACK_PACKAGES.match("libnccl2-dev")


def test_os_driver_and_cuda_are_read_and_absent_ones_are_none(tmp_path):
    (tmp_path / "os-release").write_text('NAME="Ubuntu"\nPRETTY_NAME="Ubuntu 24.04.3 LTS"\n')
    assert reader.os_release(str(tmp_path / "os-release")) == "Ubuntu 24.04.3 LTS"
    (tmp_path / "version").write_text(
        "NVRM version: NVIDIA UNIX Open Kernel Module for aarch64  580.95.05  Release Build  (dvs-builder@U22)\n"
        "GCC version:  gcc version 13.3.0\n"
    )
    assert reader.nvidia_driver(str(tmp_path / "version")) == "580.95.05"
    assert reader.nvidia_driver(str(tmp_path / "absent")) is None
    (tmp_path / "cuda").mkdir()
    (tmp_path / "cuda" / "version.json").write_text(json.dumps({"cuda": {"name": "CUDA SDK", "version": "13.0.88"}}))
    assert reader.cuda(str(tmp_path / "cuda")) == "13.0.88"
    (tmp_path / "cuda" / "version.json").write_text("{not json")
    assert reader.cuda(str(tmp_path / "cuda")) is None
    assert reader.cuda(str(tmp_path / "nowhere")) is None


def test_the_twins_come_from_the_fabric_env_and_a_hostile_name_is_dropped(tmp_path):
    env = tmp_path / "fabric.env"
    env.write_text(
        'SPARKPLAY_FABRIC_TRANSPORT=roce\nSPARKPLAY_FABRIC_TWINS="enp1s0f1np1,enP2p1s0f1np1,../../etc,x y"\n'
    )
    assert reader.fabric_twins(str(env)) == ["enp1s0f1np1", "enP2p1s0f1np1"]
    assert reader.fabric_twins(str(tmp_path / "none")) == []


def test_ethtool_reads_driver_version_and_firmware(monkeypatch):
    monkeypatch.setattr(reader.os.path, "exists", lambda path: True)
    said = "driver: mlx5_core\nversion: 25.07-0.9.7\nfirmware-version: 28.45.1020 (NVD0000000088)\nbus-info: x\n"
    assert reader.fabric("enp1s0f1np1", "/sbin/ethtool", lambda argv: (0, said, "")) == (
        "mlx5_core 25.07-0.9.7 firmware 28.45.1020 (NVD0000000088)"
    )
    veth = "driver: veth\nversion: 1.0\nfirmware-version: \n"
    assert reader.fabric("eth0", "/sbin/ethtool", lambda argv: (0, veth, "")) == "veth 1.0"


def test_files_virtualenvs_and_checkpoint_markers(tmp_path):
    program = tmp_path / "llama-server"
    program.write_bytes(b"\x7fELF")
    venv = tmp_path / "venv" / "lib" / "site-packages"
    for dist in ("vllm-0.11.0.dist-info", "torch-2.9.1.dist-info"):
        (venv / dist).mkdir(parents=True)
        (venv / dist / "RECORD").write_text("")
    (venv / "half-1.0.dist-info").mkdir()  # no RECORD: not installed
    found = reader.files([str(program), str(tmp_path / "venv"), str(tmp_path / "absent")])
    assert found[str(program)].startswith("sha256:") and found[str(tmp_path / "absent")] is None
    assert found[str(tmp_path / "venv")].startswith("2 distributions sha256:")
    ckpt = tmp_path / "ckpt"
    (ckpt / ".sparkplay").mkdir(parents=True)
    (ckpt / ".sparkplay" / "complete.json").write_text(json.dumps({"revision": "abc", "manifest_digest": "d" * 64}))
    (tmp_path / "bad" / ".sparkplay").mkdir(parents=True)
    (tmp_path / "bad" / ".sparkplay" / "complete.json").write_text("[1, 2]")
    assert reader.checkpoints([str(ckpt), str(tmp_path / "bad"), str(tmp_path / "none")]) == {
        str(ckpt): {"revision": "abc", "manifest": "d" * 64},
        str(tmp_path / "bad"): None,
        str(tmp_path / "none"): None,
    }


@pytest.mark.parametrize(
    ("text", "found"),
    [
        ('{"held": ["llama.cpp-tools", "libggml0"]}', ["libggml0", "llama.cpp-tools"]),
        ('{"held": ["ok", "-o Dpkg::Options=evil", "../x", 7]}', ["ok"]),  # never an option or a path to apt
        ('{"held": "llama.cpp-tools"}', []),
        ("[]", []),
        ("not json", []),
    ],
)
def test_the_holds_file_is_read_as_names_only(tmp_path: Path, text: str, found: list[str]):
    path = tmp_path / "holds.json"
    path.write_text(text)
    assert reader.held_by_sparkplay(str(path)) == found


def test_docker_images_read_by_repo_digest_else_id_and_no_docker_is_none(tmp_path):
    calls = []

    def run(argv: list) -> tuple:
        calls.append(argv)
        if argv[1] == "version":
            return 0, "28.2.2\n", ""
        if argv[-1] == "gone:1":
            return 1, "", "No such image"
        if argv[-1] == "local:dev":
            return 0, "[] sha256:" + "e" * 64 + "\n", ""
        return 0, '["vllm/vllm-openai@sha256:' + "f" * 64 + '"] sha256:' + "0" * 64 + "\n", ""

    cli = tmp_path / "docker"
    cli.write_text("#!/bin/sh\n")
    cli.chmod(0o755)
    server, images = reader.docker(str(cli), ["vllm/vllm-openai:v0.11.0", "local:dev", "gone:1"], run)
    assert server == "28.2.2"
    assert images == {
        "vllm/vllm-openai:v0.11.0": "sha256:" + "f" * 64,
        "local:dev": "sha256:" + "e" * 64,
        "gone:1": None,
    }
    assert reader.docker(str(tmp_path / "none"), ["x"], run) == (None, {"x": None})


def test_two_bench_results_say_what_differed_in_their_stacks():
    before = locked()
    now = stack.lock({"spark-0": {**ROWS, "driver": "590.10"}, "spark-1": ROWS}, {**RECIPE, "x": 1}, "2027")
    said = stack.compare_locks(now, before)
    assert said[0] == f"stack: {now['hash']} (before {before['hash']})"
    assert said[1].startswith("recipe glm53 sha256:") and "(before glm53 sha256:" in said[1]
    assert said[2:] == ["spark-0: NVIDIA driver 590.10 (before 580.95.05)"]
    assert stack.compare_locks(before, before) == [f"stack: the same ({before['hash']})"]
    assert stack.compare_locks(now, None) == ["stack: the earlier result names no lock (`sparkplay lock`)"]


def test_nccl_and_rdma_libraries_are_read_by_their_bytes_once_each_through_links(tmp_path):
    """Two builds of one NCCL version (pip's, DGX OS's) differ only in their bytes: the reader hashes each
    library file by its real path, in the library folders and in a virtualenv's nvidia wheels."""
    system = tmp_path / "usr" / "lib" / "aarch64-linux-gnu"
    system.mkdir(parents=True)
    real = system / "libnccl.so.2.28.3"
    real.write_bytes(b"\x7fELF nccl from DGX OS")
    (system / "libnccl.so.2").symlink_to(real.name)
    (system / "libnccl.so").symlink_to("libnccl.so.2")
    (system / "libibverbs.so.1.14.50.0").write_bytes(b"\x7fELF verbs")
    (system / "libnccl.so.2.bak-evil").write_bytes(b"not a library name")  # not one of the names
    (system / "libnccl.so.9").symlink_to("/nonexistent")  # a dangling link is no row
    (system / "libnccl-net.so").mkdir()  # a folder under a library's name is no row
    wheel = tmp_path / "venv" / "lib" / "python3.12" / "site-packages" / "nvidia" / "nccl" / "lib"
    wheel.mkdir(parents=True)
    (wheel / "libnccl.so.2").write_bytes(b"\x7fELF nccl from pip")
    found = reader.libraries(
        [str(tmp_path / "venv"), str(tmp_path / "absent")], dirs=(str(tmp_path / "usr/lib/*-gnu"),)
    )
    assert set(found) == {str(real), str(system / "libibverbs.so.1.14.50.0"), str(wheel / "libnccl.so.2")}
    assert found[str(real)] != found[str(wheel / "libnccl.so.2")]
    assert all(v.startswith("sha256:") and len(v) == 7 + 64 for v in found.values())
    real.write_bytes(b"\x7fELF nccl from pip, the same version")  # swapped in place: the same name, new bytes
    again = reader.libraries([], dirs=(str(tmp_path / "usr/lib/*-gnu"),))
    assert again[str(real)] != found[str(real)]


def test_a_library_of_the_same_version_with_other_bytes_is_drift_and_an_older_lock_without_the_row_is_not():
    path = "/usr/lib/aarch64-linux-gnu/libnccl.so.2.28.3"
    rows = {**ROWS, "libraries": {path: "sha256:" + "1" * 64}}
    doc = locked(**{"spark-0": rows, "spark-1": rows})
    swapped = {**rows, "libraries": {path: "sha256:" + "2" * 64}}
    found = stack.cluster_drift(doc, {"spark-0": rows, "spark-1": swapped}, {"spark-0": 0, "spark-1": 1})
    assert found["lines"] == [f"rank 1 (spark-1): library {path} sha256:222222222222 (locked sha256:111111111111)"]
    # a lock made before libraries were read has no such row: reading them now is not drift
    older = locked()
    assert (
        stack.cluster_drift(older, {"spark-0": swapped, "spark-1": swapped}, {"spark-0": 0, "spark-1": 1})["lines"]
        == []
    )
    assert stack.node({"libraries": {path: "sha256:" + "1" * 64}}, [])["libraries"] == {path: "sha256:" + "1" * 64}


def test_a_bench_results_pins_are_the_locks_driver_cuda_nccl_by_bytes_images_and_revisions():
    nccl = "/usr/lib/aarch64-linux-gnu/libnccl.so.2.28.3"
    rows = {
        **ROWS,
        "libraries": {nccl: "sha256:" + "1" * 64, "/usr/lib/aarch64-linux-gnu/libibverbs.so.1": "sha256:" + "2" * 64},
        "images": {"vllm/vllm-openai:v0.11": "sha256:" + "3" * 64},
    }
    doc = locked(**{"spark-0": rows})
    pinned = stack.pins(doc)
    assert pinned["lock"] == doc["hash"] and pinned["recipe_sha256"] == stack.recipe_sha256(RECIPE)
    assert pinned["nodes"]["spark-0"] == {
        "driver": "580.95.05",
        "cuda": "13.0.88",
        "nccl": "2.28.3-1+cuda13.0",
        "nccl_bytes": {nccl: "sha256:" + "1" * 64},
        "images": {"vllm/vllm-openai:v0.11": "sha256:" + "3" * 64},
        "revisions": {"/m/glm": "abc"},
    }
    assert stack.pins(None) == {}
