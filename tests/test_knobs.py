"""Every knob the sample inventory documents is declared, read, and has a test of its effect (no lab).

A knob nobody reads is a promise that does nothing; a knob read but never
set to another value in a test may do nothing all the same. EFFECT_TESTS
names, for each documented knob, the test that sets it and asserts what it
changes (on the lab: tests/test_knobs_lab.py and the other lab modules;
rendered from the task files where the effect cannot happen here:
tests/test_knob_effects.py; in the Python plan: tests/test_engines.py,
tests/test_deployment.py).
"""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from sparkplay.settings import SETTINGS
from tests.conftest import PROJECT

SAMPLE = PROJECT / "inventory" / "sample" / "group_vars" / "sparkplay_nodes" / "main.yml"
KNOB = re.compile(r"^# ([a-z][a-z0-9]*_[a-z0-9_]+):(\s|$)", re.MULTILINE)  # knobs carry a role prefix


def documented() -> list[str]:
    return [m.group(1) for m in KNOB.finditer(SAMPLE.read_text())]


def defaults() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for path in sorted(PROJECT.glob("roles/*/defaults/main.yml")):
        for name in yaml.safe_load(path.read_text()) or {}:
            found[name] = path
    return found


def readers(name: str, definition: Path) -> list[Path]:
    """Files other than the knob's definition that use it (tasks, templates, playbooks, other defaults)."""
    pattern = re.compile(rf"(?<![A-Za-z0-9_]){re.escape(name)}(?![A-Za-z0-9_])")
    places = [
        *PROJECT.glob("roles/*/tasks/*.yml"),
        *PROJECT.glob("roles/*/templates/*"),
        *PROJECT.glob("roles/*/handlers/*.yml"),
        *PROJECT.glob("roles/*/defaults/main.yml"),
        *PROJECT.glob("roles/*/vars/*.yml"),
        *PROJECT.glob("playbooks/*.yml"),
        *PROJECT.glob("playbooks/tasks/*.yml"),
    ]
    # a setting a stage of the Deployment reads (lookup sparkplay_settings hands it to Python by name)
    declared = {key for keys in SETTINGS.values() for key in keys}
    found = [PROJECT / "src" / "sparkplay" / "deployment.py"] if name in declared else []
    for path in places:
        text = path.read_text()
        if path == definition:
            text = re.sub(rf"^{re.escape(name)}:.*$", "", text, flags=re.MULTILINE)  # its own line is not a reader
        if pattern.search(text):
            found.append(path)
    return found


def test_the_sample_documents_knobs():
    assert len(documented()) > 40 and "checkpoint_transport" in documented()


def test_every_documented_knob_has_a_default_and_a_reader():
    known = defaults()
    missing = [k for k in documented() if k not in known]
    assert not missing, f"documented in the sample but declared nowhere: {missing}"
    unread = [k for k in documented() if not readers(k, known[k])]
    assert not unread, f"documented knobs that nothing reads: {unread}"


def test_the_reader_search_sees_an_unread_knob():
    assert readers("sparkplay_no_such_knob_anywhere", PROJECT / "roles/sparkplay/defaults/main.yml") == []
    assert readers("checkpoint_stall_timeout", PROJECT / "roles/checkpoint/defaults/main.yml")


# Where each documented knob's effect is tested: a value other than the default is set there and what it
# changes is asserted. The lab module's tables (DIFF_KNOBS, PREFLIGHT_KNOBS) cover the rest.
EFFECT_TESTS: dict[str, dict[str, str]] = {
    "test_knobs_lab.py": {
        "sparkplay_gpu_expected": "test_the_driver_minimums_compare_with_the_driver_the_node_reports",
        "preflight_bad_kernels": "test_the_bad_kernel_list_warns_about_the_running_kernel",
        "preflight_driver_min": "test_the_driver_minimums_compare_with_the_driver_the_node_reports",
        "nvidia_stack_driver_min": "test_the_driver_minimums_compare_with_the_driver_the_node_reports",
        "fabric_netplan_file": "test_the_file_path_knobs_move_the_files_they_name",
        "sparkplay_fabric_env_file": "test_the_file_path_knobs_move_the_files_they_name",
        "nvidia_stack_configure_docker": "test_registering_the_nvidia_runtime_needs_docker_and_says_so_first",
        "fabric_socket_fallback": "test_without_the_socket_fallback_a_node_with_no_rdma_is_refused",
        "fabric_netplan_apply_commands": "test_the_apply_commands_are_what_applies_a_changed_netplan_file",
        "serve_watchdog_enabled": "test_the_watchdog_can_be_turned_off_and_on_again",
    },
    "test_untrusted.py": {
        "serve_trusted_images": "test_the_trusted_list_is_the_inventorys_and_reaches_the_plan",
    },
    "test_deployment.py": {
        "sparkplay_model_root": "test_plan_json_prints_the_deployment_from_the_inventory",
        "sparkplay_docker": "test_settings_and_staged_folders_reach_the_deployment",
        "serve_memory_claim_gib": "test_the_serve_settings_reach_stage_two",
        "serve_on_demand": "test_a_recipe_served_on_demand_is_recorded_so_and_never_the_primary",
        "serve_first_byte_timeout": "test_the_first_byte_bound_reaches_the_record_and_the_gateways_routes",
    },
    "test_role_options.py": {
        "serve_on_demand_ttl": "test_the_on_demand_knobs_reach_the_gateways_routes",
        "serve_on_demand_wait": "test_the_on_demand_knobs_reach_the_gateways_routes",
        "serve_on_demand_budget_gib": "test_the_on_demand_knobs_reach_the_gateways_routes",
    },
    "test_provision_lab.py": {
        "sparkplay_confirm_overwrite": "test_confirming_backs_up_and_replaces_it",
        "sparkplay_offline": "test_offline_lists_what_would_be_downloaded_and_stops_before_any_change",
    },
    "test_knob_effects.py": {
        "fabric_topology": "test_a_ring_addresses_every_link_and_routes_the_peers_off_a_nodes_links",
        "fabric_forwarding_file": "test_a_ring_of_four_relays_through_the_nodes_between_and_they_forward",
        "nvidia_stack_driver_packages": "test_the_package_lists_are_what_apt_installs",
        "preflight_min_versions": "test_the_minimum_release_is_compared_with_the_nodes_own",
        "nvidia_stack_cuda_packages": "test_the_package_lists_are_what_apt_installs",
        "nvidia_stack_toolkit_packages": "test_the_package_lists_are_what_apt_installs",
        "fabric_gid_index": "test_the_gid_index_knob_on_an_rdma_host",
        "checkpoint_streams": "test_mirror_knobs_reach_the_mirrors_argv",
        "checkpoint_receive_port": "test_mirror_knobs_reach_the_mirrors_argv",
        "checkpoint_ssh_cipher": "test_mirror_knobs_reach_the_mirrors_argv",
        "checkpoint_bwlimit_kbps": "test_mirror_knobs_reach_the_mirrors_argv",
        "checkpoint_stall_timeout": "test_mirror_knobs_reach_the_mirrors_argv",
        "checkpoint_hf_endpoint": "test_the_hub_endpoint_knob_sets_hf_endpoint_for_the_hub_calls",
        "checkpoint_offline": "test_offline_downloads_pass_offline",
        "mtp_overlay_scheme": "test_overlay_knobs_reach_the_converter",
        "mtp_overlay_device": "test_overlay_knobs_reach_the_converter",
        "mtp_overlay_keep_moved": "test_overlay_knobs_reach_the_converter",
        "engine_image_build_root": "test_the_build_root_is_where_the_image_is_built_from",
        "engine_image_pull": "test_pull_false_skips_the_pull",
        "engine_image_timeout": "test_the_image_timeout_bounds_pull_build_and_copy",
        "serve_smoke_max_tokens": "test_the_smoke_length_and_wait_interval_reach_the_wait",
        "serve_wait_interval": "test_the_smoke_length_and_wait_interval_reach_the_wait",
        "serve_memory_guard": "test_the_memory_guard_holds_each_engine_to_its_claim_plus_headroom",
    },
    "test_fabric_facts.py": {
        "fabric_twin_pairing": "test_gx10_layout_needs_pairing_off",
    },
    "test_node_rules.py": {
        "fabric_addresses": "test_address_map_honours_per_host_override",
    },
    "test_models_lab.py": {
        "checkpoint_transport": "test_other_transports_mirror_and_verify",
        "checkpoint_verify": "test_flipped_byte_is_found_by_full_verify_and_only_that_file_recopied",
        "checkpoint_staged": "test_a_same_size_new_revision_reaches_every_rank",
    },
    "test_engines.py": {
        "serve_knobs": "test_a_knob_the_engine_would_not_read_is_refused",
    },
    "test_boundary.py": {
        "serve_allow": "test_the_allow_list_the_inventory_gives_reaches_the_plan_and_the_unit_through_ansible",
    },
}
TABLES = {
    "DIFF_KNOBS": "test_knobs_lab.py::test_every_file_knob_changes_its_file_in_a_check_mode_diff_and_nothing_changes",
    "PREFLIGHT_KNOBS": "test_knobs_lab.py::test_a_preflight_knob_that_excludes_the_lab_refuses_it_naming_why",
}


def effect_tests() -> dict[str, str]:
    from tests import test_knobs_lab

    found = {knob: f"{module}::{test}" for module, tests in EFFECT_TESTS.items() for knob, test in tests.items()}
    for table, test in TABLES.items():
        found.update({knob: test for knob in getattr(test_knobs_lab, table)})
    return found


def test_every_documented_knob_has_a_test_of_its_effect():
    covered = effect_tests()
    missing = [k for k in documented() if k not in covered]
    assert not missing, f"documented knobs with no effect test: {missing}"
    stale = sorted({knob for tests in EFFECT_TESTS.values() for knob in tests} - set(documented()))
    assert not stale, f"effect tests listed for knobs the sample no longer documents: {stale}"


def sets_its_knob(knob: str, where: str) -> bool:
    """Whether test `where` (module::name) exists and names `knob` (in its body, its parameters or its table)."""
    module, name = where.split("::")
    source = (PROJECT / "tests" / module).read_text()
    start = source.find(f"\ndef {name}(")
    if start < 0:
        return False
    # the test with its decorators and body: top-level items are two blank lines apart
    end = source.find("\n\n\n", start)
    test = source[source.rfind("\n\n\n", 0, start) : len(source) if end < 0 else end]
    if where in TABLES.values():
        return knob in source
    return re.search(rf"(?<![A-Za-z0-9_]){re.escape(knob)}(?![A-Za-z0-9_])", test) is not None


def test_each_listed_effect_test_exists_and_sets_its_knob():
    wrong = [f"{knob}: {where}" for knob, where in effect_tests().items() if not sets_its_knob(knob, where)]
    assert not wrong, f"effect tests that do not exist or do not set their knob: {wrong}"


def test_the_effect_test_check_sees_a_test_that_does_not_set_the_knob():
    assert not sets_its_knob("sparkplay_docker", "test_knob_effects.py::test_offline_downloads_pass_offline")
    assert not sets_its_knob("checkpoint_offline", "test_knob_effects.py::test_no_such_test")
    assert sets_its_knob("checkpoint_offline", "test_knob_effects.py::test_offline_downloads_pass_offline")
