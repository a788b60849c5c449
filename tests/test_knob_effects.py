"""Knobs whose effect is an argument handed to a module, rendered from the real task files (no lab).

Each test changes one documented knob and renders the argument it feeds
(a command's argv, an environment, an apt list, a template) with the roles'
real defaults through Ansible's own templating (tests/role_render.py). These
are the knobs whose effect cannot happen here: no NVIDIA repository, no RDMA
device, no Hugging Face hub, no GPU for the converter. Knobs the lab can
show for real are in tests/test_knobs_lab.py; tests/test_knobs.py checks that
every documented knob is covered by one or the other.
"""

from __future__ import annotations

import ipaddress
from typing import Any

import pytest
import yaml

from tests.conftest import PROJECT
from tests.role_render import plays, render, role_vars, task, template

CKPT_SOURCE = {
    "checkpoint_tool": "/usr/local/lib/sparkplay/sparkplay-ckpt",
    "checkpoint_revision": "c0ffee",
    "checkpoint_source": {"name": "m", "repo": "org/m", "dest": "/models/org--m"},
    "checkpoint_cable_address": "192.168.100.11",
}


def sync_argv(**knobs: Any) -> list[str]:
    mirror = task("roles/checkpoint/tasks/source.yml", "Checkpoint | Bring every other rank")
    return render(mirror["vars"]["checkpoint_sync_argv"], role_vars("checkpoint", **CKPT_SOURCE, **knobs))


def flag(argv: list[str], name: str) -> str:
    return argv[argv.index(name) + 1]


@pytest.mark.parametrize(
    ("knob", "value", "option"),
    [
        ("checkpoint_receive_port", 8999, "--port"),
        ("checkpoint_ssh_cipher", "chacha20-poly1305@openssh.com", "--cipher"),
        ("checkpoint_stall_timeout", 45, "--stall-timeout"),
        ("checkpoint_streams", 3, "--streams"),
        ("checkpoint_transport", "tcp", "--transport"),
        ("checkpoint_bwlimit_kbps", 2048, "--bwlimit"),
    ],
)
def test_mirror_knobs_reach_the_mirrors_argv(knob: str, value: Any, option: str) -> None:
    assert flag(sync_argv(), option) != str(value)
    assert flag(sync_argv(**{knob: value}), option) == str(value)


def test_full_verify_adds_full_to_the_mirror() -> None:
    assert "--full" not in sync_argv()
    assert "--full" in sync_argv(checkpoint_verify="full")


@pytest.mark.parametrize("path", ["roles/checkpoint/tasks/download.yml", "roles/checkpoint/tasks/resolve.yml"])
def test_the_hub_endpoint_knob_sets_hf_endpoint_for_the_hub_calls(path: str) -> None:
    hub = task(path, "Checkpoint | Download" if "download" in path else "Checkpoint | Resolve")
    variables = role_vars("checkpoint", **CKPT_SOURCE, checkpoint_hf_endpoint="")  # not the caller's HF_ENDPOINT
    assert render(hub["environment"], variables) == {}
    endpoint = "https://hf-mirror.example.internal"
    assert render(hub["environment"], {**variables, "checkpoint_hf_endpoint": endpoint}) == {"HF_ENDPOINT": endpoint}


def test_offline_downloads_pass_offline() -> None:
    download = task("roles/checkpoint/tasks/download.yml", "Checkpoint | Download")
    variables = role_vars("checkpoint", **CKPT_SOURCE, checkpoint_hf_token_file="/run/t")  # noqa: S106 - a path
    assert "--offline" not in render(download["ansible.builtin.command"]["argv"], variables)
    assert "--offline" in render(download["ansible.builtin.command"]["argv"], {**variables, "checkpoint_offline": True})


@pytest.mark.parametrize(
    ("knob", "value", "option"),
    [
        ("mtp_overlay_scheme", "modelopt", "--scheme"),
        ("mtp_overlay_device", "cpu", "--device"),
        ("mtp_overlay_keep_moved", 3, "--keep-moved"),
    ],
)
def test_overlay_knobs_reach_the_converter(knob: str, value: Any, option: str) -> None:
    convert = task("roles/mtp_overlay/tasks/run.yml", "MTP overlay | Convert")
    given = {
        "mtp_overlay_source": "/m/src",
        "mtp_overlay_output": "/m/out",
        "mtp_overlay_match": "layers.45",
        "mtp_overlay_expect": 864,
    }
    default = [str(a) for a in render(convert["ansible.builtin.command"]["argv"], role_vars("mtp_overlay", **given))]
    changed = render(convert["ansible.builtin.command"]["argv"], role_vars("mtp_overlay", **given, **{knob: value}))
    assert flag(default, option) != str(value)
    assert flag([str(a) for a in changed], option) == str(value)


ENGINE = {"engine_plan": {"image": "example/engine:1", "image_dir": "engine-1"}, "engine_docker": "/usr/bin/docker"}


def test_the_build_root_is_where_the_image_is_built_from() -> None:
    build = task("roles/engine/tasks/docker.yml", "Engine | Build the image")
    variables = role_vars("engine", **ENGINE, engine_image_build_root="/srv/images")
    assert render(build["ansible.builtin.command"]["argv"], variables)[-1] == "/srv/images/engine-1"
    look = task("roles/engine/tasks/docker.yml", "Engine | Look for the build folder")
    assert render(look["ansible.builtin.stat"]["path"], variables) == "/srv/images/engine-1/Dockerfile"


def test_pull_false_skips_the_pull() -> None:
    pull = task("roles/engine/tasks/docker.yml", "Engine | Pull the image")
    variables = role_vars("engine", **ENGINE, engine_image_id={"rc": 1})
    assert all(render("{{ " + cond + " }}", variables) for cond in pull["when"])
    variables["engine_image_pull"] = False
    assert not all(render("{{ " + cond + " }}", variables) for cond in pull["when"])


@pytest.mark.parametrize("name", ["Engine | Pull the image", "Engine | Build the image", "Engine | Copy rank 0's"])
def test_the_image_timeout_bounds_pull_build_and_copy(name: str) -> None:
    step = task("roles/engine/tasks/docker.yml", name)
    assert int(render(step["async"], role_vars("engine", engine_image_timeout=321))) == 321


def served(**settings: object) -> dict:
    """The serve role's variables on lab-tiny's leader, its plan computed by the Deployment (stage two)."""
    from tests.test_deployment import two_stage

    full = two_stage("lab-tiny")
    leader = full["launch"]["ranks"][0]
    return role_vars(
        "serve",
        serve_plan=full["launch"],
        serve_rank=leader,
        sparkplay_deployment=full,
        inventory_hostname=leader["host"],
        hostvars={},
        **settings,
    )


def test_the_smoke_length_and_wait_interval_reach_the_wait() -> None:
    wait = task("roles/serve/tasks/run.yml", "Serve | Wait until the model answers")
    follow = task("roles/serve/tasks/run.yml", "Serve | Follow the wait")
    variables = served(serve_smoke_max_tokens=3, serve_wait_interval=7, serve_started_now=True)
    argv = render(wait["ansible.builtin.command"]["argv"], variables)
    assert flag(argv, "--max-tokens") == "3" and flag(argv, "--interval") == "7"
    # the wait after a start keeps its receipt; one that follows no start does not (issue 59)
    assert flag(argv, "--receipt") == "/var/lib/sparkplay/receipts/sparkplay-serve.service.json"
    assert "--receipt" not in render(wait["ansible.builtin.command"]["argv"], {**variables, "serve_started_now": False})
    assert int(render(follow["delay"], variables)) == 7
    timeout = variables["serve_plan"]["health"]["timeout_s"]
    assert int(render(follow["retries"], variables)) == (timeout + 300) // 7  # the same overall bound


def test_the_package_lists_are_what_apt_installs() -> None:
    install = task("roles/nvidia_stack/tasks/install.yml", "NVIDIA stack | Install the driver")
    wanted = {
        "nvidia_stack_driver_packages": ["nvidia-driver-590-open"],
        "nvidia_stack_cuda_packages": ["cuda-toolkit-13-1"],
        "nvidia_stack_toolkit_packages": ["nvidia-container-toolkit-base"],
    }
    assert render(install["ansible.builtin.apt"]["name"], role_vars("nvidia_stack", **wanted)) == [
        "nvidia-driver-590-open",
        "cuda-toolkit-13-1",
        "nvidia-container-toolkit-base",
    ]


RDMA_HOST = {
    "inventory_hostname": "spark0",
    "fabric_address_map": {"spark0": ["192.168.100.10/24", "192.168.101.10/24"]},
    "sparkplay_fabric": {
        "hcas": ["rocep1s0f1", "roceP2p1s0f1"],
        "gid_index": 3,
        "twins": ["enp1s0f1np1", "enP2p1s0f1np1"],
    },
}


@pytest.mark.parametrize(
    ("value", "line"), [("auto", "NCCL_IB_GID_INDEX=3"), (5, "NCCL_IB_GID_INDEX=5"), (-1, "NCCL_IB_GID_INDEX=-1")]
)
def test_the_gid_index_knob_on_an_rdma_host(value: Any, line: str) -> None:
    env = template("roles/fabric/templates/fabric.env.j2", role_vars("fabric", **RDMA_HOST, fabric_gid_index=value))
    assert line in env.splitlines()


@pytest.mark.parametrize(
    "path",
    [
        "playbooks/preflight.yml",
        "playbooks/provision.yml",
        "playbooks/models.yml",
        "playbooks/overlay.yml",
        "playbooks/serve.yml",
        "playbooks/reset.yml",
    ],
)
def test_every_node_play_stops_every_node_when_one_fails(path: str) -> None:
    """Literally true: Ansible does not template a play's any_errors_fatal (a template there is a non-empty
    string, always true), which is why it is not a knob."""
    node_plays = plays(path, "sparkplay_nodes")
    assert node_plays
    assert all(node_play["any_errors_fatal"] is True for node_play in node_plays)


def test_configuring_docker_merges_the_nvidia_runtime_into_daemon_json() -> None:
    block = task("roles/nvidia_stack/tasks/configure.yml", "NVIDIA stack | Register the NVIDIA runtime with Docker")
    merge = task("roles/nvidia_stack/tasks/configure.yml", "NVIDIA stack | Merge the runtime in")
    variables = role_vars("nvidia_stack", nvidia_stack_daemon_raw={"content": "eyJsb2ctZHJpdmVyIjogImpvdXJuYWxkIn0="})
    assert render("{{ " + block["when"] + " }}", {**variables, "nvidia_stack_configure_docker": False}) is False
    assert render("{{ " + block["when"] + " }}", {**variables, "nvidia_stack_configure_docker": True}) is True
    facts = render(merge["ansible.builtin.set_fact"], {**variables, **render(merge["vars"], variables)})
    wanted = facts["nvidia_stack_daemon_wanted"]
    assert wanted["log-driver"] == "journald"  # the user's own key ({"log-driver": "journald"}) is kept
    assert wanted["runtimes"]["nvidia"]["path"] == "nvidia-container-runtime"


@pytest.mark.parametrize(
    ("minimum", "passes"), [({"Ubuntu": "24.04"}, False), ({"Ubuntu": "22.04"}, True), ({"Debian": "99"}, True)]
)
def test_the_minimum_release_is_compared_with_the_nodes_own(minimum: dict, passes: bool) -> None:
    """The lab runs Debian testing (a release with no number, which passes by design): an Ubuntu 22.04 node's
    facts are written here instead."""
    check = task("roles/preflight/tasks/preflight.yml", "Preflight | Check the OS family and release")
    facts = {"os_family": "Debian", "distribution": "Ubuntu", "distribution_version": "22.04"}
    variables = role_vars("preflight", ansible_facts=facts, preflight_min_versions=minimum)
    variables.update(render(check["vars"], variables))
    held = [render("{{ " + condition + " }}", variables) for condition in check["ansible.builtin.assert"]["that"]]
    assert all(held) is passes


TWINS = ["enp1s0f1np1", "enP2p1s0f1np1"]


def fabric_vars(nodes: int, me: str, **knobs: Any) -> dict[str, Any]:
    """The fabric role's variables on `me`, with the preflight's address map and routes rendered from the
    real task file for `nodes` ranks."""
    hostvars = {f"spark{r}": {"sparkplay_rank": r} for r in range(nodes)}
    variables = role_vars(
        "fabric",
        inventory_hostname=me,
        groups={"sparkplay_nodes": list(hostvars)},
        hostvars=hostvars,
        sparkplay_rank=int(me[-1]),
        sparkplay_fabric={"twins": TWINS, "hcas": [], "gid_index": None},
        **knobs,
    )
    addresses = task("roles/fabric/tasks/preflight.yml", "Fabric | Work out this node's cable addresses and its peers'")
    variables["fabric_address_map"] = render(addresses["ansible.builtin.set_fact"]["fabric_address_map"], variables)
    routes = task("roles/fabric/tasks/preflight.yml", "Fabric | Work out the routes to peers off this node's links")
    for name, value in routes["ansible.builtin.set_fact"].items():
        variables[name] = render(value, variables)
    return variables


RING3 = {"fabric_topology": "ring", "fabric_subnets": ["192.168.100.0/24", "192.168.101.0/24", "192.168.102.0/24"]}


def test_a_ring_addresses_every_link_and_routes_the_peers_off_a_nodes_links() -> None:
    variables = fabric_vars(3, "spark0", **RING3)
    assert variables["fabric_address_map"] == {
        "spark0": ["192.168.100.10/24", "192.168.102.10/24"],
        "spark1": ["192.168.101.11/24", "192.168.100.11/24"],
        "spark2": ["192.168.102.12/24", "192.168.101.12/24"],
    }
    twins = yaml.safe_load(template("roles/fabric/templates/netplan.yaml.j2", variables))["network"]["ethernets"]
    # rank 1's own-link address is its second twin's; its first twin's is one hop on, through rank 1
    assert twins[TWINS[0]]["routes"] == [{"to": "192.168.101.11/32", "via": "192.168.100.11"}]
    assert twins[TWINS[1]]["routes"] == [{"to": "192.168.101.12/32", "via": "192.168.102.12"}]
    env = template("roles/fabric/templates/fabric.env.j2", variables).splitlines()
    assert f"NCCL_SOCKET_IFNAME={TWINS[0]},{TWINS[1]}" in env and f"GLOO_SOCKET_IFNAME={TWINS[0]}" in env
    assert variables["fabric_relays"] is False  # three nodes are all neighbours


def test_behind_a_switch_there_are_no_routes_and_nccl_uses_the_first_twin() -> None:
    variables = fabric_vars(3, "spark0")
    ethernets = yaml.safe_load(template("roles/fabric/templates/netplan.yaml.j2", variables))["network"]["ethernets"]
    twins = {name: e for name, e in ethernets.items() if name != "lo"}
    assert all("routes" not in twin for twin in twins.values()) and variables["fabric_routes"] == []
    assert f"NCCL_SOCKET_IFNAME={TWINS[0]}" in template("roles/fabric/templates/fabric.env.j2", variables)


@pytest.mark.parametrize("nodes, extra", [(2, {}), (3, RING3)], ids=["two-behind-a-switch", "ring-of-three"])
def test_every_cable_subnet_has_an_unreachable_route_behind_the_twins_own(nodes: int, extra: dict) -> None:
    """With a twin down (networkd drops its address and routes), a cable address must fail at once, never
    leave by the default route: an unreachable route per cable subnet on lo, metric behind the connected one."""
    variables = fabric_vars(nodes, "spark0", **extra)
    ethernets = yaml.safe_load(template("roles/fabric/templates/netplan.yaml.j2", variables))["network"]["ethernets"]
    subnets = sorted(
        {str(ipaddress.ip_interface(c).network) for cs in variables["fabric_address_map"].values() for c in cs}
    )
    assert ethernets["lo"]["routes"] == [{"to": s, "type": "unreachable", "metric": 4242} for s in subnets]
    assert ethernets["lo"]["link-local"] == [] and "addresses" not in ethernets["lo"]  # lo's own are the kernel's
    assert len(subnets) == (2 if nodes == 2 else 3)  # one a twin behind a switch; one a link in a ring


def test_a_ring_of_four_relays_through_the_nodes_between_and_they_forward() -> None:
    ring4 = {
        "fabric_topology": "ring",
        "fabric_subnets": [f"10.9.{link}.0/24" for link in range(4)],
        "fabric_forwarding_file": "/etc/sysctl.d/99-test.conf",
    }
    variables = fabric_vars(4, "spark0", **ring4)
    # rank 2 is two hops from rank 0: every one of its addresses goes through rank 1, over link 0
    assert {r["to"]: r["via"] for r in variables["fabric_routes"] if r["peer"] == "spark2"} == {
        "10.9.2.12/32": "10.9.0.11",
        "10.9.1.12/32": "10.9.0.11",
    }
    assert variables["fabric_relays"] is True
    fabric = yaml.safe_load((PROJECT / "roles" / "fabric" / "vars" / "main.yml").read_text())
    [forward] = render(fabric["fabric_forwarding_entry"], variables)  # written with the netplan file
    assert forward["path"] == "/etc/sysctl.d/99-test.conf"
    assert "net.ipv4.ip_forward = 1" in forward["content"]
    assert "fabric_forwarding_entry" in fabric["fabric_files_wanted"]
    managed = fabric["fabric_managed_files"]
    assert render(managed, variables)[-1] == "/etc/sysctl.d/99-test.conf"  # probed before, recorded after
    assert fabric_vars(4, "spark2", **ring4)["fabric_relays"] is False  # nobody's way passes through rank 2


@pytest.mark.parametrize(("nodes", "subnets", "holds"), [(2, 2, False), (3, 2, False), (3, 3, True), (4, 4, True)])
def test_the_preflight_refuses_a_ring_of_two_or_with_a_subnet_count_other_than_the_links(nodes, subnets, holds):
    name = "Fabric | Check a ring has three or more nodes and a subnet per link"
    check = task("roles/fabric/tasks/preflight.yml", name)
    ranks = [f"spark{r}" for r in range(nodes)]
    variables = role_vars(
        "fabric",
        groups={"sparkplay_nodes": ranks},
        fabric_topology="ring",
        fabric_subnets=[f"10.9.{i}.0/24" for i in range(subnets)],
    )
    held = [render("{{ " + condition + " }}", variables) for condition in check["ansible.builtin.assert"]["that"]]
    assert all(held) is holds


@pytest.mark.parametrize(
    ("subnets", "says"),
    [
        (["192.168.100.0/24", "192.168.101.0/24"], ""),
        (["192.168.100.0/24", "192.168.100.0/24"], "192.168.100.0/24 and 192.168.100.0/24 overlap"),
        (["10.0.0.0/16", "10.0.5.0/24"], "10.0.0.0/16 and 10.0.5.0/24 overlap"),
        (["192.168.100.0/24", "192.168.101.7/24"], "'192.168.101.7/24' is not a subnet"),
        (["192.168.100.0/24", "eth0"], "'eth0' is not a subnet"),
    ],
)
def test_the_preflight_names_a_subnet_that_is_none_or_overlaps_another(subnets, says):
    check = task("roles/fabric/tasks/preflight.yml", "Fabric | Check each subnet is one, apart from the others")
    variables = role_vars("fabric", fabric_subnets=subnets)
    problem = render(check["vars"]["fabric_subnet_problem"], variables)
    assert (problem == "") if not says else (says in problem)


def test_the_fabric_env_file_has_one_setting_for_every_role():
    """fabric_env_file was a fabric-only knob: moved, it left the checkpoint and serve roles reading the old
    path. It is now the role's own name for sparkplay_fabric_env_file (role vars, which no inventory beats)."""
    import yaml

    fabric = PROJECT / "roles" / "fabric"
    specs = yaml.safe_load((fabric / "meta" / "argument_specs.yml").read_text())["argument_specs"]["main"]["options"]
    assert "fabric_env_file" not in specs
    assert "fabric_env_file" not in (yaml.safe_load((fabric / "defaults" / "main.yml").read_text()) or {})
    role_vars_file = yaml.safe_load((fabric / "vars" / "main.yml").read_text())
    assert render(role_vars_file["fabric_env_file"], {"sparkplay_fabric_env_file": "/srv/f.env"}) == "/srv/f.env"


def test_a_checkpoint_with_named_files_downloads_those_alone() -> None:
    """A GGUF variant (llama.cpp's -hf, resolved at import) lists its files; a whole repository lists none."""
    download = task("roles/checkpoint/tasks/download.yml", "Checkpoint | Download")
    variables = role_vars("checkpoint", **CKPT_SOURCE, checkpoint_hf_token_file="/run/t")  # noqa: S106 - a path
    argv = download["ansible.builtin.command"]["argv"]
    assert not any(a.startswith("--file") for a in render(argv, variables))
    source = {**CKPT_SOURCE["checkpoint_source"], "files": ["m-Q4_K_M.gguf", "mmproj-F16.gguf"]}
    got = render(argv, {**variables, "checkpoint_source": source})
    assert [a for a in got if a.startswith("--file")] == ["--file=m-Q4_K_M.gguf", "--file=mmproj-F16.gguf"]


def test_the_memory_guard_holds_each_engine_to_its_claim_plus_headroom() -> None:
    """The serve unit's limit comes from the rank's admitted claim (serve_memory_guard: off, no limit at all)."""
    claim = {"bytes": 4 * 2**30, "how": "its share of the weights"}
    given = served(serve_claim=claim)
    limit = render("{{ serve_layout.memory_limit }}", given)
    assert limit == {"max": 4 * 2**30 + 4 * 2**30 // 10, "high": 4 * 2**30}  # 10% above the claim
    small = render("{{ serve_layout.memory_limit }}", {**given, "serve_claim": {"bytes": 2**29, "how": "x"}})
    assert small["max"] == 2**29 + 256 * 2**20  # never less than 256 MiB of headroom
    assert render("{{ serve_layout.memory_limit }}", {**given, "serve_memory_guard": False}) in (None, "", "None")
    assert render("{{ serve_layout.memory_limit }}", {**given, "serve_claim": None}) in (None, "", "None")


def test_the_engine_finds_rank_0_its_own_rank_and_the_images_nccl_version() -> None:
    """The docker runtime's tasks read the plan and the image's environment through Python filters (no lab
    runs a docker engine: rendered here from the real task file)."""
    plan = {**ENGINE["engine_plan"], "ranks": [{"host": "b", "role": "worker"}, {"host": "a", "role": "leader"}]}
    find = task("roles/engine/tasks/docker.yml", "Engine | Find rank 0")["ansible.builtin.set_fact"]
    variables = role_vars("engine", engine_plan=plan, inventory_hostname="b")
    assert (
        render(find["engine_leader"], variables) == "a" and render(find["engine_self"], variables)["role"] == "worker"
    )
    warn = task("roles/engine/tasks/docker.yml", "Engine | Warn about an NCCL development build")["vars"]
    env = {"stdout_lines": ["PATH=/usr/bin", "NCCL_VERSION=2.27.7-1+cuda13.0", "X"]}
    assert render(warn["engine_nccl_version"], {**variables, "engine_image_env": env}) == "2.27.7-1+cuda13.0"
    assert render(warn["engine_nccl_version"], {**variables, "engine_image_env": {"stdout_lines": []}}) == ""
