"""The lab's pure parts: image recipe hashing, inventory files, cable checks, input validation."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import stat

import pytest
import yaml

from sparkplay.errors import BadInput, ExitCode
from sparkplay.fsutil import atomic_write
from sparkplay.lab import cable, inventory
from sparkplay.lab.image import ImageRecipe
from sparkplay.lab.manager import validate_nodes, validate_topology
from tests.conftest import PROJECT


def test_image_tag_is_stable_and_follows_the_recipe():
    base = ImageRecipe()
    assert base.tag == ImageRecipe().tag
    assert base.tag.startswith("sparkplay-lab-node:")
    more = dataclasses.replace(base, packages=(*base.packages, "jq"))
    other_suite = dataclasses.replace(base, suite="trixie")
    assert len({base.tag, more.tag, other_suite.tag}) == 3


def test_image_tag_follows_shipped_file_content(monkeypatch):
    before = ImageRecipe().tag
    original = ImageRecipe.file_content
    monkeypatch.setattr(ImageRecipe, "file_content", lambda self, name: original(self, name) + b"\n# changed")
    assert ImageRecipe().tag != before


@pytest.mark.parametrize("nodes", [0, -1, 9, 99])
def test_node_count_out_of_range(nodes):
    with pytest.raises(BadInput) as exc:
        validate_nodes(nodes)
    assert exc.value.exit_code == ExitCode.BAD_INPUT
    assert "\n" not in str(exc.value)


def test_node_counts_accepted_are_exactly_one_to_eight():
    accepted = []
    for nodes in range(-2, 12):
        try:
            validate_nodes(nodes)
        except BadInput:
            continue
        accepted.append(nodes)
    assert accepted == list(range(1, 9))


def test_inventory_lists_ranks_and_lab_overrides(tmp_path):
    changed = inventory.write(tmp_path, ["n0", "n1"])
    assert changed == ["inventory/lab/hosts.yml", "inventory/lab/group_vars/sparkplay_nodes/lab.yml"]
    hosts_path, vars_path = inventory.paths(tmp_path)
    hosts = yaml.safe_load(hosts_path.read_text())
    group = hosts["all"]["children"]["sparkplay_nodes"]
    assert group["hosts"] == {"n0": {"sparkplay_rank": 0}, "n1": {"sparkplay_rank": 1}}
    assert group["vars"]["ansible_connection"] == "community.docker.docker"
    overrides = yaml.safe_load(vars_path.read_text())
    assert overrides["sparkplay_gpu_expected"] is False
    assert overrides["fabric_socket_fallback"] is True
    assert overrides["fabric_socket_fallback"] is True
    assert ["netplan", "apply"] not in overrides["fabric_netplan_apply_commands"]
    # unchanged content is not rewritten
    assert inventory.write(tmp_path, ["n0", "n1"]) == []
    assert inventory.write(tmp_path, ["n0", "n1", "n2"]) == ["inventory/lab/hosts.yml"]


def test_inventory_remove_leaves_foreign_files(tmp_path):
    inventory.write(tmp_path, ["n0", "n1"])
    hosts_path, vars_path = inventory.paths(tmp_path)
    mine = vars_path.parent / "mine.yml"
    mine.write_text("my_setting: 1\n")
    vars_path.write_text("# edited by hand, no longer ours\n")
    assert inventory.remove(tmp_path) == ["inventory/lab/hosts.yml"]
    assert mine.exists() and vars_path.exists()
    assert not hosts_path.exists()


def test_inventory_remove_prunes_empty_folders(tmp_path):
    inventory.write(tmp_path, ["n0", "n1"])
    inventory.remove(tmp_path)
    assert not (tmp_path / "inventory" / "lab").exists()
    assert (tmp_path / "inventory").exists()


def test_atomic_write_sets_mode_and_reports_change(tmp_path):
    target = tmp_path / "sub" / "secret.env"
    assert atomic_write(target, "A=1\n", mode=0o600) is True
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    assert atomic_write(target, "A=1\n", mode=0o600) is False
    assert atomic_write(target, "A=1\n", mode=0o644) is True  # a mode change is a change
    assert [p.name for p in target.parent.iterdir()] == ["secret.env"]  # no temp files left


def _link(name, ifindex, peer, *, up=True, carrier=True, kind="veth", master=None):
    return cable.LinkState(name, ifindex, peer, kind, up, carrier, master)


def test_direct_pair_check():
    a, b = _link("t", 5, 7), _link("t", 7, 5)
    assert cable._direct_pair_ok(a, b)
    assert not cable._direct_pair_ok(a, _link("t", 7, 9))  # b's peer is elsewhere
    assert not cable._direct_pair_ok(a, _link("t", 7, 5, carrier=False))
    assert not cable._direct_pair_ok(a, _link("t", 7, 5, kind="dummy"))
    assert not cable._direct_pair_ok(a, None)


def test_switch_port_check():
    node, port = _link("t", 3, 30), _link("p", 30, 3, master="splab-sw0")
    assert cable._switch_port_ok(node, port, 0)
    assert not cable._switch_port_ok(node, port, 1)  # plugged into the other twin's switch
    assert not cable._switch_port_ok(node, _link("p", 30, 3, master=None), 0)


def test_switch_only_beyond_two_nodes():
    assert [cable.uses_switch(n) for n in (1, 2, 3, 8)] == [False, False, True, True]
    assert max(len(cable.port_name(7, 1)), len(cable.switch_name(1))) <= 15  # IFNAMSIZ


def test_a_ring_cables_each_rank_to_the_next_and_needs_three_nodes():
    assert cable.ring_links(3) == [(0, 1), (1, 2), (2, 0)]
    assert [cable.uses_switch(n, "ring") for n in (3, 8)] == [False, False]  # straight cables, no switch
    for nodes, topology, says in (
        (2, "ring", "use --topology ring with 3 or more nodes"),
        (4, "mesh", "choose one of switch, ring"),
    ):
        with pytest.raises(BadInput) as err:
            validate_topology(nodes, topology)
        assert err.value.exit_code == ExitCode.BAD_INPUT and says in str(err.value)
    validate_topology(3, "ring")
    validate_topology(2, "switch")


def test_a_ring_inventory_names_the_topology_and_one_subnet_per_link(tmp_path):
    inventory.write(tmp_path, ["n0", "n1", "n2", "n3"], "ring")
    overrides = yaml.safe_load(inventory.paths(tmp_path)[1].read_text())
    assert overrides["fabric_topology"] == "ring"
    assert overrides["fabric_subnets"] == [f"192.168.{100 + link}.0/24" for link in range(4)]
    assert inventory.write(tmp_path, ["n0", "n1", "n2", "n3"], "switch") == [
        "inventory/lab/group_vars/sparkplay_nodes/lab.yml"
    ]
    assert "fabric_topology" not in yaml.safe_load(inventory.paths(tmp_path)[1].read_text())


def test_the_vllm_lab_model_is_a_seeded_llama_checkpoint_its_tokenizer_and_config_agree(tmp_path):
    """What vLLM reads of it: the config's shapes match the tensors, the vocabulary the tokenizer's, and the
    same bytes come out every time (the recipe pins its safetensors' sha256)."""

    from safetensors.numpy import load_file

    from sparkplay.lab import tiny_hf
    from sparkplay.recipes.store import catalog

    first, second = tiny_hf.write(tmp_path / "a"), tiny_hf.write(tmp_path / "b")
    for name in tiny_hf.FILES:
        assert (first / name).read_bytes() == (second / name).read_bytes(), name
        assert (first / name).stat().st_mode & 0o777 == 0o644, name  # the engine's own user reads them
    config = json.loads((first / "config.json").read_text())
    tensors = load_file(str(first / "model.safetensors"))
    vocab = len(json.loads((first / "tokenizer.json").read_text())["model"]["vocab"])
    assert config["vocab_size"] == vocab == tensors["model.embed_tokens.weight"].shape[0]
    head = config["hidden_size"] // config["num_attention_heads"]
    assert tensors["model.layers.0.self_attn.k_proj.weight"].shape == (config["num_key_value_heads"] * head, 128)
    assert len({k.split(".")[2] for k in tensors if k.startswith("model.layers.")}) == config["num_hidden_layers"]
    assert "chat_template" in json.loads((first / "tokenizer_config.json").read_text())
    pinned = catalog.load(catalog.catalog_dir(PROJECT), "lab-vllm")["source"]["sha256"]
    assert hashlib.sha256((first / "model.safetensors").read_bytes()).hexdigest() == pinned


def _tree(root, files: dict[str, str]):
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def test_a_snapshots_key_follows_everything_that_decides_provisioning_and_nothing_else(tmp_path):
    from sparkplay.lab.snapshot import provisioning_key

    root = _tree(
        tmp_path,
        {
            "roles/fabric/tasks/main.yml": "- name: x\n",
            "src/sparkplay/fabric.py": "X = 1\n",
            "provision.yml": "---\n",
            "ansible.cfg": "[defaults]\n",
            "tests/test_x.py": "",
            "docs/lab.md": "",
        },
    )
    key = provisioning_key(root, "sparkplay-lab-node:a")
    assert key == provisioning_key(root, "sparkplay-lab-node:a") and len(key) == 16
    assert provisioning_key(root, "sparkplay-lab-node:b") != key  # another base image
    # what does not decide a node's state: tests, docs, Python's byte-code caches
    _tree(root, {"tests/test_x.py": "changed", "docs/lab.md": "changed", "src/sparkplay/__pycache__/f.pyc": "x"})
    assert provisioning_key(root, "sparkplay-lab-node:a") == key
    for name in ("roles/fabric/tasks/main.yml", "src/sparkplay/fabric.py", "provision.yml", "ansible.cfg"):
        before = (root / name).read_text()
        (root / name).write_text(before + "# changed\n")
        assert provisioning_key(root, "sparkplay-lab-node:a") != key, name
        (root / name).write_text(before)
    (root / "roles/fabric/tasks/extra.yml").write_text("")  # a new file in a role
    assert provisioning_key(root, "sparkplay-lab-node:a") != key


def test_the_projects_key_is_stable_across_two_reads():
    from sparkplay.lab.snapshot import provisioning_key

    assert provisioning_key(PROJECT, ImageRecipe().tag) == provisioning_key(PROJECT, ImageRecipe().tag)


@pytest.mark.parametrize("name", ["", "A", "a b", "-x", ".x", "x/y", "x:y", "x" * 101])
def test_a_snapshot_name_that_cannot_be_an_image_tag_is_one_line_bad_input(name):
    from sparkplay.lab.snapshot import validate_name

    with pytest.raises(BadInput) as exc:
        validate_name(name)
    assert "\n" not in str(exc.value) and exc.value.exit_code == ExitCode.BAD_INPUT


def test_lab_up_with_a_bad_snapshot_name_is_one_line_before_anything_is_made():
    from tests.conftest import run_cli

    proc = run_cli("lab", "up", "--snapshot", "Not/A:Tag")
    assert proc.returncode == ExitCode.BAD_INPUT, proc.stdout + proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "snapshot name 'Not/A:Tag'" in proc.stderr


def test_a_node_started_from_a_snapshot_of_this_base_is_kept_by_lab_up_and_any_other_image_is_not(monkeypatch):
    """`lab up` after a host's reboot (the serve lab tests' reboot) re-wires nodes started from a snapshot: it
    recreated them from the bare image, wiping what they served. Image layers as `docker image inspect` gives
    them (a stand-in for the engine: the lab's own test runs it for real)."""
    from sparkplay.lab import dockercli, snapshot

    base, ours, other = "sparkplay-lab-node:abc", "sparkplay-lab-snapshot:p-1-rank0", "sparkplay-lab-snapshot:q-rank0"
    layers = {base: ["a", "b"], ours: ["a", "b", "c"], other: ["x", "b", "c"]}
    monkeypatch.setattr(
        dockercli,
        "inspect",
        lambda kind, names: [{"RepoTags": [n], "RootFS": {"Layers": layers[n]}} for n in names if n in layers],
    )
    assert snapshot.of_base(ours, base, 0)
    assert not snapshot.of_base(ours, base, 1)  # another rank's disk
    assert not snapshot.of_base(other, base, 0)  # made from other nodes
    assert not snapshot.of_base("sparkplay-lab-snapshot:gone-rank0", base, 0)  # no such image
    assert not snapshot.of_base("someone/else:rank0", base, 0)  # not a lab snapshot at all
