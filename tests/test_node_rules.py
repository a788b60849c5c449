"""Rules the node roles reach through filters: managed files, cable addressing, host facts."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from sparkplay.fabric import address_map, peer_addresses, ping_plan, twin_addresses
from sparkplay.hostfacts import docker_daemon_merge, free_bytes_for, listener_pids, nccl_build_problem, nvidia_arch
from sparkplay.managed import foreign_report
from tests.conftest import PROJECT

sys.path.insert(0, str(PROJECT / "plugins" / "module_utils"))
import sparkplay_managed  # the node-side rule, as the module imports it


def test_foreign_files_are_existing_files_not_last_written_by_sparkplay(tmp_path):
    ours, edited, users, folder = (tmp_path / n for n in ("ours", "edited", "users", "folder"))
    ours.write_text("a")
    edited.write_text("changed since")
    users.write_text("theirs")
    folder.mkdir()
    registry = {
        str(ours): {"sha256": sparkplay_managed.sha256_file(str(ours)), "original": None},
        str(edited): {"sha256": "aa", "original": None},
        str(folder): {"sha256": "aa", "original": None},
    }
    paths = [str(p) for p in (ours, edited, users, folder, tmp_path / "missing")]
    states = {p: sparkplay_managed.state(p) for p in paths}
    # sparkplay's own file is fine; one changed since, one never written, a folder in the way are not; a
    # missing one has nothing to overwrite
    assert sparkplay_managed.foreign(states, registry) == [str(edited), str(users), str(folder)]


def test_record_updates_only_written_files_and_the_registry_write_is_atomic(tmp_path):
    written = tmp_path / "b"
    written.write_text("2")
    states = {str(written): sparkplay_managed.state(str(written)), "/c": sparkplay_managed.state(str(tmp_path / "c"))}
    updated = sparkplay_managed.recorded(states, {"/a": {"sha256": "1", "original": None}})
    sha = sparkplay_managed.sha256_file(str(written))
    assert updated == {"/a": {"sha256": "1", "original": None}, str(written): {"sha256": sha, "original": None}}
    target = tmp_path / "etc" / "managed-files.json"
    sparkplay_managed.write_registry(str(target), updated)
    assert sparkplay_managed.load_registry(str(target)) == updated and oct(target.stat().st_mode & 0o777) == "0o644"
    assert [p.name for p in target.parent.iterdir()] == ["managed-files.json"]  # no temporary left
    target.write_text('{"/old": "abc"}')  # an older registry: the sha256 alone
    assert sparkplay_managed.load_registry(str(target)) == {"/old": {"sha256": "abc", "original": None}}
    target.write_text("{broken")
    assert sparkplay_managed.load_registry(str(target)) == {}


def test_reset_restores_a_replaced_file_byte_for_byte_and_removes_what_sparkplay_created(tmp_path):
    users, created = tmp_path / "40-cx7.yaml", tmp_path / "fabric.env"
    users.write_bytes(b"# the user's own\x00 bytes\n")
    users.chmod(0o600)
    before = users.read_bytes()
    backup = tmp_path / "40-cx7.yaml.123.2026-12-01@04:00:00~"  # what Ansible's backup: true leaves
    backup.write_bytes(before)
    backup.chmod(0o600)
    users.write_text("# Written by sparkplay\n")
    created.write_text("NCCL_X=1\n")
    paths = [str(users), str(created)]
    registry = sparkplay_managed.recorded({p: sparkplay_managed.state(p) for p in paths}, {})
    assert registry[str(users)]["original"] == str(backup) and registry[str(created)]["original"] is None
    regfile = tmp_path / "managed-files.json"
    sparkplay_managed.write_registry(str(regfile), registry)
    assert [a for _, a, _ in sparkplay_managed.reset_plan(registry)] == ["restore", "remove"]
    done = sparkplay_managed.reset(str(regfile), sparkplay_managed.load_registry(str(regfile)))
    assert done == [f"restore {users} from {backup}", f"remove {created}"]
    assert users.read_bytes() == before and oct(users.stat().st_mode & 0o777) == "0o600"
    assert not created.exists() and not backup.exists() and not regfile.exists()
    assert sparkplay_managed.reset(str(regfile), sparkplay_managed.load_registry(str(regfile))) == []  # again: nothing


def test_the_module_probes_and_records_through_ansible(tmp_path):
    """One module call for every path, run by ansible itself on localhost (real module, real files)."""
    mine, registry = tmp_path / "mine.conf", tmp_path / "registry.json"
    mine.write_text("written by someone else first")

    def module(state: str, *extra: str) -> dict:
        args = f"paths={mine},{tmp_path / 'absent'} registry={registry} state={state}"
        argv = ["ansible", "localhost", "-m", "sparkplay.spark.sparkplay_managed_files", "-a", args, *extra]
        proc = subprocess.run(argv, capture_output=True, text=True, cwd=PROJECT, check=False, timeout=120)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        return json.loads(proc.stdout.split("=>", 1)[1])

    assert module("probe")["foreign"] == [str(mine)]
    assert module("record", "--check")["changed"] and not registry.exists()  # check mode writes nothing
    assert module("record")["changed"] and module("probe")["foreign"] == []
    assert not module("record")["changed"]  # the same content: nothing to write


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


def test_the_bundle_holds_every_section_and_no_secret():
    from sparkplay.doctor import bundle_records, command_result

    token = "hf_" + "A1b2C3d4" * 4
    bundle = {
        "deployment": {"leader": "spark0", "checkpoint_hf_token": token},
        "findings": {"spark0": {"env": {"NCCL_IB_HCA": "rocep1s0f1", "HF_TOKEN": token}}},
        "nodes": {
            "spark0": {
                "host": {"kernel": "6.11"},
                "fabric": {"twins": ["enp1s0f1np1"]},
                "commands": {
                    "journal": command_result(
                        {"rc": 0, "stdout": f"started with HF_TOKEN={token}\nmirror secret 1f2e\n"}
                    ),
                    "meminfo": command_result({"rc": 0, "stdout": "CmaTotal: 0 kB\n"}),
                    "gpu": command_result({"skipped": True}),
                },
            }
        },
    }
    records = bundle_records(bundle, {"version": "x"}, secrets=["1f2e-mirror-secret-value"])
    text = json.dumps(records)
    assert token not in text and "hf_A1b2" not in text
    sections = {r.get("section") for r in records if r["kind"] == "node"}
    assert {"host", "fabric", "checks", "journal", "meminfo", "gpu"} <= sections
    assert [r["kind"] for r in records[:2]] == ["meta", "deployment"]
    journal = next(r for r in records if r.get("section") == "journal")["data"]["stdout"]
    assert "HF_TOKEN=<redacted>" in journal and "mirror secret 1f2e" in journal


# -- known Spark pitfalls, on crafted facts ---------------------------------------------------------------


def test_a_kernel_without_cma_is_named_with_its_fix():
    from sparkplay.hostfacts import cma_problem

    assert "cma=1G" in cma_problem("MemTotal: 1 kB\nCmaTotal:              0 kB\n", rdma_expected=True)
    assert cma_problem("CmaTotal:  65536 kB\n", rdma_expected=True) is None
    assert cma_problem("CmaTotal:  0 kB\n", rdma_expected=False) is None  # sockets: no RDMA registration


def test_a_twin_below_its_pcie_width_is_warned_about():
    from sparkplay.hostfacts import pcie_warnings

    pcie = {"enp1s0f1np1": {"width": 8, "max_width": 8}, "enP2p1s0f1np1": {"width": 4, "max_width": 8}}
    (warning,) = pcie_warnings(pcie)
    assert warning.startswith("enP2p1s0f1np1 is linked at PCIe x4 of x8") and "BIOS" in warning


def test_another_netplan_file_fighting_the_fabric_is_named_with_the_setting_and_the_fix():
    from sparkplay.hostfacts import netplan_conflicts

    twins = ["enp1s0f1np1", "enP2p1s0f1np1"]
    ours = {"enp1s0f1np1": "192.168.100.10/24", "enP2p1s0f1np1": "192.168.101.10/24"}
    listing = "\n".join(
        [
            "/etc/netplan/40-cx7.yaml:network: {ethernets: {enp1s0f1np1: {mtu: 9000}}}",  # sparkplay's own: fine
            "/etc/netplan/50-cloud-init.yaml:network:",
            "/etc/netplan/50-cloud-init.yaml:  ethernets:",
            "/etc/netplan/50-cloud-init.yaml:    enp1s0f1np1:",
            "/etc/netplan/50-cloud-init.yaml:      dhcp4: true",
            "/etc/netplan/50-cloud-init.yaml:      mtu: 1500",
            "/etc/netplan/60-mine.yaml:network: {ethernets: {enP2p1s0f1np1: {addresses: [10.0.0.5/24]},"
            " eno1: {dhcp4: true}}}",
        ]
    )
    problems = netplan_conflicts(listing, "/etc/netplan/40-cx7.yaml", twins, 9000, ours)
    assert problems == [
        "/etc/netplan/50-cloud-init.yaml sets enp1s0f1np1 mtu 1500 (the cable needs 9000): remove enp1s0f1np1 from "
        "/etc/netplan/50-cloud-init.yaml (sparkplay's /etc/netplan/40-cx7.yaml configures it)",
        "/etc/netplan/50-cloud-init.yaml turns on DHCP for enp1s0f1np1 (the cable has no DHCP server): remove "
        "enp1s0f1np1 from /etc/netplan/50-cloud-init.yaml (sparkplay's /etc/netplan/40-cx7.yaml configures it)",
        "/etc/netplan/60-mine.yaml gives enP2p1s0f1np1 the addresses 10.0.0.5/24 (sparkplay gives 192.168.101.10/24): "
        "remove enP2p1s0f1np1 from /etc/netplan/60-mine.yaml (sparkplay's /etc/netplan/40-cx7.yaml configures it)",
    ]
    assert netplan_conflicts("/etc/netplan/x.yaml:{broken", "/o.yaml", twins, 9000, ours)[0].endswith(
        "not valid YAML: netplan will refuse every file; fix or remove it"
    )
    assert netplan_conflicts("", "/o.yaml", twins, 9000, ours) == []


@pytest.mark.parametrize(
    ("version", "flagged"),
    [
        ("2.28.9-1", False),
        ("2.28.9-1+cuda13.0", False),
        ("v2.27.7-1", False),
        ("", False),
        (None, False),
        ("2.29.0a0", True),  # a source build's version
        ("2.28.9-1+cuda13.0-dev", True),
        ("2.28.3+git5f0e1c2", True),
        ("master", True),
    ],
)
def test_an_nccl_development_build_is_named_with_the_fix(version, flagged):
    problem = nccl_build_problem(version, "image nvcr.io/x:1")
    assert (problem is not None) == flagged
    if flagged:
        assert f"image nvcr.io/x:1 has NCCL {version}, not a release tag" in problem
        assert "use an image or package built on an NCCL release" in problem


@pytest.mark.parametrize(
    ("line", "secret"),
    [
        ("Dec 02 10:00:01 spark vllm[9]: started with HF_TOKEN=abc123secret ok", "abc123secret"),
        ("args: serve /m --api-key s3cr3t-key --port 8000", "s3cr3t-key"),
        ('curl -H "Authorization: Bearer eyJabc.def" http://127.0.0.1:8000', "eyJabc.def"),
        ('{"hf_token": "tok-123", "max_tokens": 16}', "tok-123"),
        ("retrying: password=hunter2; user=me", "hunter2"),
        ("env: SPARKPLAY_MIRROR_SECRET=1f2e3d4c NCCL_DEBUG=INFO", "1f2e3d4c"),
        ("llama-server --hf-token=hf_short -m x.gguf", "hf_short"),
    ],
)
def test_the_bundle_redacts_a_secret_in_the_middle_of_a_line(line, secret):
    from sparkplay.doctor import redact

    cleaned = redact({"journal": line})["journal"]
    assert secret not in cleaned and "<redacted>" in cleaned
    assert cleaned.split("<redacted>")[0] == line.split(secret)[0]  # the line around it is kept


def test_the_bundle_keeps_counts_and_words_that_only_look_like_secrets():
    from sparkplay.doctor import redact

    for line in ("usage: max_tokens=16 prompt_tokens=3 tokenizer=/m/tokenizer.json", "the token was refused"):
        assert redact({"journal": line})["journal"] == line


def test_reset_keeps_what_the_user_changed_since_sparkplay_wrote_it(tmp_path):
    """A file edited after sparkplay wrote it is named by `edited`; reset, once asked, keeps its current
    bytes beside it (a name reset never removes) before putting it back."""
    conf = tmp_path / "90-sparkplay-memlock.conf"
    conf.write_text("* - memlock unlimited\n")
    registry = sparkplay_managed.recorded({str(conf): sparkplay_managed.state(str(conf))}, {})
    regfile = tmp_path / "managed-files.json"
    sparkplay_managed.write_registry(str(regfile), registry)
    assert sparkplay_managed.edited(registry) == []
    conf.write_text("* - memlock unlimited\n# my tweak\n")
    assert sparkplay_managed.edited(registry) == [str(conf)]
    done = sparkplay_managed.reset(str(regfile), registry)
    [copy] = [p for p in tmp_path.iterdir() if ".sparkplay-edited-" in p.name]
    assert copy.read_text().endswith("# my tweak\n") and copy.name.endswith("~")
    assert done == [f"kept the edited {conf} as {copy}", f"remove {conf}"]
    assert not conf.exists()
    assert not sparkplay_managed.BACKUP.fullmatch(copy.name[len(conf.name) :])  # not taken for Ansible's backup


def test_listener_cgroups_say_something_only_where_the_kernel_names_them():
    from sparkplay.hostfacts import listener_cgroups

    v2 = "LISTEN 0 512 127.0.0.1:9931 0.0.0.0:* cgroup:/system.slice/sparkplay-serve.service\n"
    assert listener_cgroups(v2) == ["/system.slice/sparkplay-serve.service"]
    assert listener_cgroups("LISTEN 0 512 127.0.0.1:9931 0.0.0.0:* cgroup:/\n") is None  # cgroup v1: root only
    assert listener_cgroups("LISTEN 0 512 127.0.0.1:9931 0.0.0.0:*\n") is None  # an ss without --cgroup
    assert listener_cgroups("") is None
