"""Filters for what a play's tasks read of each other (each host's variable, a node tool's JSON answer);
the rules live in sparkplay.plays."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ansible_collections.sparkplay.spark.plugins.plugin_utils.sparkplay_package import resolve

FILTERS = {
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
}


class FilterModule:
    def filters(self) -> dict[str, Callable[..., Any]]:
        return resolve(FILTERS)
