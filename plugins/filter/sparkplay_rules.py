"""The collection's filters: each one a function of the sparkplay package, named here once (the rules live in
the package, not in Jinja; plugin_utils/sparkplay_package.py resolves them and names the fix where the package
is missing)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ansible_collections.sparkplay.spark.plugins.plugin_utils.sparkplay_package import resolve

FILTERS = {
    # rank rules (sparkplay.topology, sparkplay.deployment)
    "sparkplay_rank_layout_problems": "sparkplay.deployment:hosts_layout_problems",
    "sparkplay_leader_host": "sparkplay.deployment:leader_host",
    "sparkplay_node_count_problem": "sparkplay.topology:node_count_problem",
    # what a play's tasks read of each other: each host's variable, a node tool's JSON answer (sparkplay.plays)
    "sparkplay_per_host": "sparkplay.plays:per_host",
    "sparkplay_of_hosts": "sparkplay.plays:of_hosts",
    "sparkplay_any_host": "sparkplay.plays:any_host",
    "sparkplay_readiness": "sparkplay.plays:readiness",
    "sparkplay_answer": "sparkplay.plays:answer",
    "sparkplay_properties": "sparkplay.plays:properties",
    # one run at a time per node (playbooks/claim.yml): this controller's owner id, the run's note, the holder
    "sparkplay_run_owner": "sparkplay.runlock:owner",
    "sparkplay_run_note": "sparkplay.runlock:node_note",
    "sparkplay_run_holder": "sparkplay.runlock:node_holder",
    # node-side roles: fabric, managed files, host facts, doctor, the stack lock
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
    # the engine and serve roles (sparkplay.engines, sparkplay.deployment(s), sparkplay.layout)
    "sparkplay_systemd_exec": "sparkplay.engines.systemd:exec_line",
    "sparkplay_env_file": "sparkplay.engines.systemd:env_file",
    "sparkplay_serve_status_rows": "sparkplay.engines.systemd:status_rows",
    "sparkplay_serve_status_table": "sparkplay.engines.systemd:status_table",
    "sparkplay_serve_plan_problems": "sparkplay.engines.systemd:plan_problems",
    "sparkplay_prefix_cache_problems": "sparkplay.hostfacts:prefix_cache_problems",
    "sparkplay_deployment_public": "sparkplay.deployment:public",
    # what one rank lays on its node: folders, files (content or template), units, restart paths, readiness
    "sparkplay_rank_layout": "sparkplay.layout:rank_layout",
    "sparkplay_layout_files": "sparkplay.layout:files_with_units",
    "sparkplay_last_good_text": "sparkplay.layout:last_good_text",
    "sparkplay_go_back": "sparkplay.layout:go_back",
    "sparkplay_rollback_refusal": "sparkplay.layout:rollback_refusal",
    "sparkplay_rollback_memory": "sparkplay.rollback:memory_refusal",
    "sparkplay_plan_rank": "sparkplay.layout:plan_rank",
    # several deployments: the admission rule, the records read back, the gateway's routes
    "sparkplay_admit": "sparkplay.admission:verdict",
    "sparkplay_memory_limit": "sparkplay.admission:memory_limit",
    "sparkplay_records": "sparkplay.served:records",
    "sparkplay_replaced_units": "sparkplay.integrity:replaced_units",
    "sparkplay_explain_argv": "sparkplay.integrity:explain_argv",
    "sparkplay_probe_argv": "sparkplay.integrity:probe_argv",
    "sparkplay_reload_plan": "sparkplay.integrity:reload_plan",
    "sparkplay_gateway_routes": "sparkplay.served:routes",
    "sparkplay_records_of": "sparkplay.served:of_slot",
    "sparkplay_added_rows": "sparkplay.served:added_rows",
    "sparkplay_gateway_row": "sparkplay.served:gateway_row",
    "sparkplay_gateway_upstream_key": "sparkplay.engines.names:upstream_key",
    "sparkplay_gateway_key_file": "sparkplay.served:gateway_key_file",
    "sparkplay_gateway_secret": "sparkplay.served:gateway_secret",
    "sparkplay_gateway_layout": "sparkplay.served:gateway_layout",
    "sparkplay_key_lines": "sparkplay.served:key_lines",
    "sparkplay_added_leftovers": "sparkplay.engines.names:leftovers",
    "sparkplay_added_users": "sparkplay.engines.names:added_users",
    # what `stop` (and reset) take down, in order, from the records
    "sparkplay_stop_plan": "sparkplay.stopping:stop_plan",
    "sparkplay_routed_units": "sparkplay.stopping:routed_units",
    "sparkplay_any_added": "sparkplay.served:any_added",
    "sparkplay_bench_leaders": "sparkplay.bench:leaders_serving",
    "sparkplay_key_holders": "sparkplay.served:key_holders",
    # what a node's probe read, as the rules read it
    "sparkplay_record_texts": "sparkplay.probed:record_texts",
    "sparkplay_node_memory": "sparkplay.probed:node_memory",
    "sparkplay_required_paths": "sparkplay.probed:required_paths",
    "sparkplay_paths_lacking": "sparkplay.probed:paths_lacking",
    "sparkplay_lacking_words": "sparkplay.probed:lacking_words",
    "sparkplay_units_up": "sparkplay.probed:units_up",
    "sparkplay_slot_names": "sparkplay.engines.names:for_slot",
    # an added deployment's update beside itself: its stand-in's slot, whether it is wanted, the routes it moves
    "sparkplay_standin": "sparkplay.engines.names:standin",
    "sparkplay_update_beside": "sparkplay.served:update_beside",
    "sparkplay_routes_moved": "sparkplay.served:moved",
    # `none | sparkplay_node_constants`: the engine user, serve tool, units, unit and state folders
    "sparkplay_node_constants": "sparkplay.settings:node_constants",
}


class FilterModule:
    def filters(self) -> dict[str, Callable[..., Any]]:
        return resolve(FILTERS)
