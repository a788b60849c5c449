"""Filters for node-side roles; the rules live in the sparkplay package."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ansible_collections.sparkplay.spark.plugins.plugin_utils.sparkplay_package import resolve

FILTERS = {
    # an engine image from rank 0 to the others: whether it goes anywhere, and how it went (image-send)
    "sparkplay_image_sends": "sparkplay.imageref:image_sends",
    "sparkplay_image_sent_line": "sparkplay.imageref:image_sent_line",
    "sparkplay_foreign_report": "sparkplay.managed:foreign_report",
    "sparkplay_reset_removable": "sparkplay.managed:reset_removable",
    "sparkplay_reset_state_dirs": "sparkplay.managed:reset_state_dirs",
    "sparkplay_doctor_commands": "sparkplay.doctor:commands",
    "sparkplay_offline_model": "sparkplay.checkpoints:offline_model",
    "sparkplay_offline_marker": "sparkplay.checkpoints:offline_marker",
    "sparkplay_checkpoint_refusal": "sparkplay.integrity:refusal",
    "sparkplay_vars_yaml": "sparkplay.varsfile:dump",
    "sparkplay_checkpoint_finding": "sparkplay.integrity:finding",
    "sparkplay_netplan_conflicts": "sparkplay.hostfacts:netplan_conflicts",
    "sparkplay_cma_problem": "sparkplay.hostfacts:cma_problem",
    "sparkplay_pcie_warnings": "sparkplay.hostfacts:pcie_warnings",
    "sparkplay_nccl_build_problem": "sparkplay.hostfacts:nccl_build_problem",
    "sparkplay_fabric_address_map": "sparkplay.fabric:address_map",
    "sparkplay_fabric_ping_plan": "sparkplay.fabric:ping_plan",
    "sparkplay_fabric_peer_addresses": "sparkplay.fabric:peer_addresses",
    "sparkplay_fabric_routes": "sparkplay.fabric:routes",
    "sparkplay_fabric_cable_subnets": "sparkplay.fabric:cable_subnets",
    "sparkplay_fabric_relays": "sparkplay.fabric:relays",
    "sparkplay_fabric_subnet_problem": "sparkplay.fabric:subnet_problem",
    "sparkplay_cidr_address": "sparkplay.fabric:address_of",
    "sparkplay_free_bytes_for": "sparkplay.hostfacts:free_bytes_for",
    "sparkplay_docker_daemon_merge": "sparkplay.hostfacts:docker_daemon_merge",
    "sparkplay_listener_pids": "sparkplay.hostfacts:listener_pids",
    "sparkplay_listener_cgroups": "sparkplay.hostfacts:listener_cgroups",
    "sparkplay_nvidia_arch": "sparkplay.hostfacts:nvidia_arch",
    "sparkplay_doctor_table": "sparkplay.doctor:doctor_table",
    "sparkplay_fabric_env": "sparkplay.checkpoints:fabric_env",
    "sparkplay_fabric_addresses": "sparkplay.checkpoints:fabric_addresses",
    "sparkplay_nodetool_app_base64": "sparkplay.nodetools:app_base64",
    "sparkplay_nodetool_app_sha256": "sparkplay.nodetools:app_sha256",
    "sparkplay_package_files": "sparkplay.nodetools:package_files",
    "sparkplay_doctor_collect": "sparkplay.doctor:collect",
    "sparkplay_ib_write_bw_gbps": "sparkplay.doctor:ib_write_bw_gbps",
    "sparkplay_stack_to_read": "sparkplay.stack:what_to_read",
    "sparkplay_stack_node": "sparkplay.stack:node",
    "sparkplay_stack_lock": "sparkplay.stack:lock",
    "sparkplay_stack_drift": "sparkplay.stack:cluster_drift",
    "sparkplay_stack_holds": "sparkplay.stack:holds",
}


class FilterModule:
    def filters(self) -> dict[str, Callable[..., Any]]:
        return resolve(FILTERS)
