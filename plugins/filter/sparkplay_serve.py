"""Filters for the engine and serve roles; the rules live in sparkplay.engines and sparkplay.deployment."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ansible_collections.sparkplay.spark.plugins.plugin_utils.sparkplay_package import resolve

FILTERS = {
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
    "sparkplay_records": "sparkplay.deployments:records",
    "sparkplay_replaced_units": "sparkplay.integrity:replaced_units",
    "sparkplay_explain_argv": "sparkplay.integrity:explain_argv",
    "sparkplay_probe_argv": "sparkplay.integrity:probe_argv",
    "sparkplay_reload_plan": "sparkplay.integrity:reload_plan",
    "sparkplay_gateway_routes": "sparkplay.deployments:routes",
    "sparkplay_records_of": "sparkplay.deployments:of_slot",
    "sparkplay_added_rows": "sparkplay.deployments:added_rows",
    "sparkplay_gateway_row": "sparkplay.deployments:gateway_row",
    "sparkplay_gateway_upstream_key": "sparkplay.engines.names:upstream_key",
    "sparkplay_gateway_key_file": "sparkplay.deployments:gateway_key_file",
    "sparkplay_gateway_secret": "sparkplay.deployments:gateway_secret",
    "sparkplay_gateway_layout": "sparkplay.deployments:gateway_layout",
    "sparkplay_key_lines": "sparkplay.deployments:key_lines",
    "sparkplay_added_leftovers": "sparkplay.engines.names:leftovers",
    "sparkplay_added_users": "sparkplay.engines.names:added_users",
    # what `stop` (and reset) take down, in order, from the records
    "sparkplay_stop_plan": "sparkplay.stopping:stop_plan",
    "sparkplay_routed_units": "sparkplay.stopping:routed_units",
    "sparkplay_any_added": "sparkplay.deployments:any_added",
    "sparkplay_bench_leaders": "sparkplay.bench:leaders_serving",
    "sparkplay_key_holders": "sparkplay.deployments:key_holders",
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
    "sparkplay_update_beside": "sparkplay.deployments:update_beside",
    "sparkplay_routes_moved": "sparkplay.deployments:moved",
    # `none | sparkplay_node_constants`: the engine user, serve tool, units, unit and state folders
    "sparkplay_node_constants": "sparkplay.settings:node_constants",
}


class FilterModule:
    def filters(self) -> dict[str, Callable[..., Any]]:
        return resolve(FILTERS)
