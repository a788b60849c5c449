"""Lookup `sparkplay_deployment`: the whole deployment of a run, from sparkplay.deployment.

    deployment: "{{ lookup('sparkplay_deployment', recipe, ranks=ranks, settings=settings, staged=[], lock={}) }}"

Computed once, on the controller, in playbooks/recipe.yml; the roles read
the result (`sparkplay_deployment`) instead of deriving paths, the leader or
the checkpoints themselves.
"""

from __future__ import annotations

from typing import Any

from ansible.errors import AnsibleLookupError
from ansible.plugins.lookup import LookupBase

from sparkplay.deployment import compute
from sparkplay.errors import SparkplayError

DOCUMENTATION = """
name: sparkplay_deployment
short_description: The deployment of a sparkplay run (leader, paths, checkpoints, overlay)
description:
  - Runs sparkplay.deployment.compute for the recipe ({} for none) and the inventory's ranks and settings.
  - Fails with a one-line message naming the problem and the fix.
options:
  _terms:
    description: The validated recipe (a dict, empty when none was chosen).
    required: true
  ranks:
    description: Host name to sparkplay_rank, for every host of sparkplay_nodes.
    type: dict
    required: true
  settings:
    description: The inventory's sparkplay_* settings (model root, fabric env file, serve record, docker client).
    type: dict
    default: {}
  staged:
    description: checkpoint_staged folders on rank 0.
    type: list
    default: []
  lock:
    description: Revisions resolved earlier for unpinned repos.
    type: dict
    default: {}
"""


class LookupModule(LookupBase):
    def run(self, terms: list[Any], variables: dict[str, Any] | None = None, **kwargs: Any) -> list[Any]:
        self.set_options(var_options=variables, direct=kwargs)
        ranks, settings = self.get_option("ranks"), self.get_option("settings")
        staged, lock = self.get_option("staged") or [], self.get_option("lock") or {}
        try:
            return [compute(recipe or None, ranks, settings, staged, lock) for recipe in terms]
        except (SparkplayError, ValueError) as exc:
            raise AnsibleLookupError(str(exc)) from None
