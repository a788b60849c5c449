"""Lookup `sparkplay_settings`: the settings a stage of the Deployment reads, by the key lists Python declares.

    stage one: "{{ lookup('sparkplay.spark.sparkplay_settings', 'stage_one', host=LEADER) }}"
    stage two: "{{ lookup('sparkplay.spark.sparkplay_settings', 'launch') }}"
    a rank's layout: "{{ lookup('sparkplay.spark.sparkplay_settings', 'layout') }}"

A setting is declared once, in sparkplay.settings (SETTINGS: the key and its default); a role states the
same default for Ansible. Stage one reads the leader's inventory variables (`host`, from a play on the
controller); stage two the variables of the task that asks (the serve role's defaults, the inventory's over
them). The CLI reads the same lists from the inventory's files.
"""

# ruff: noqa: E402  (validate-modules wants the documentation before the imports)
from __future__ import annotations

DOCUMENTATION = """
name: sparkplay_settings
short_description: The settings a stage of the sparkplay Deployment reads
description:
  - Returns {key, value} for every setting sparkplay.settings.SETTINGS declares for the stage, where set.
  - A setting not set is left out (the Deployment then takes its default).
options:
  _terms:
    description: The stage, C(stage_one), C(launch) or C(layout).
    required: true
  host:
    description: Read this host's variables (stage one, from a play on the controller); empty, the task's own.
    type: str
    default: ""
"""

from typing import Any

from ansible.errors import AnsibleLookupError
from ansible.plugins.lookup import LookupBase
from ansible_collections.sparkplay.spark.plugins.plugin_utils.sparkplay_package import load


class LookupModule(LookupBase):
    def run(self, terms: list[Any], variables: dict[str, Any] | None = None, **kwargs: Any) -> list[Any]:
        settings = load("sparkplay.settings:SETTINGS")  # at call time: the plugin loads without the package
        self.set_options(var_options=variables, direct=kwargs)
        host, variables = self.get_option("host"), variables or {}
        found = []
        for stage in terms:
            if stage not in settings:
                raise AnsibleLookupError(f"sparkplay_settings: no stage {stage!r} (one of {', '.join(settings)})")
            where: Any = variables["hostvars"][host] if host else variables
            found.append({key: self._templar.template(where[key]) for key in settings[stage] if key in where})
        return found
