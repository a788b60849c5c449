"""Filters for node-side roles; the rules live in the sparkplay package."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sparkplay.checkpoints import checkpoint_dir, fabric_env, offline_model, overlay_dir, progress_line, sources
from sparkplay.doctor import collect, command_result, doctor_table, ib_write_bw_gbps
from sparkplay.fabric import address_map, address_of, peer_addresses, ping_plan, relays, routes, subnet_problem
from sparkplay.hostfacts import (
    cma_problem,
    docker_daemon_merge,
    free_bytes_for,
    listener_cgroups,
    listener_pids,
    nccl_build_problem,
    netplan_conflicts,
    nvidia_arch,
    path_and_parents,
    pcie_warnings,
)
from sparkplay.managed import foreign_report, reset_removable, reset_state_dirs
from sparkplay.nodetools import app, package_files


class FilterModule:
    def filters(self) -> dict[str, Callable[..., Any]]:
        return {
            "sparkplay_foreign_report": foreign_report,
            "sparkplay_reset_removable": reset_removable,
            "sparkplay_reset_state_dirs": reset_state_dirs,
            "sparkplay_doctor_command": command_result,
            "sparkplay_offline_model": offline_model,
            "sparkplay_netplan_conflicts": netplan_conflicts,
            "sparkplay_cma_problem": cma_problem,
            "sparkplay_pcie_warnings": pcie_warnings,
            "sparkplay_nccl_build_problem": nccl_build_problem,
            "sparkplay_fabric_address_map": address_map,
            "sparkplay_fabric_ping_plan": ping_plan,
            "sparkplay_fabric_peer_addresses": peer_addresses,
            "sparkplay_fabric_routes": routes,
            "sparkplay_fabric_relays": relays,
            "sparkplay_fabric_subnet_problem": subnet_problem,
            "sparkplay_cidr_address": address_of,
            "sparkplay_free_bytes_for": free_bytes_for,
            "sparkplay_path_and_parents": path_and_parents,
            "sparkplay_docker_daemon_merge": docker_daemon_merge,
            "sparkplay_listener_pids": listener_pids,
            "sparkplay_listener_cgroups": listener_cgroups,
            "sparkplay_nvidia_arch": nvidia_arch,
            "sparkplay_doctor_table": doctor_table,
            "sparkplay_checkpoint_sources": sources,
            "sparkplay_checkpoint_dir": checkpoint_dir,
            "sparkplay_overlay_dir": overlay_dir,
            "sparkplay_fabric_env": fabric_env,
            "sparkplay_progress_line": progress_line,
            "sparkplay_nodetool_app": app,
            "sparkplay_package_files": package_files,
            "sparkplay_doctor_collect": collect,
            "sparkplay_ib_write_bw_gbps": ib_write_bw_gbps,
        }
