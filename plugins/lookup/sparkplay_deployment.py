"""Lookup `sparkplay_deployment`: the whole deployment of a run, from sparkplay.deployment.

    stage one: "{{ lookup('sparkplay_deployment', recipe, ranks=ranks, settings=settings, staged=[], lock={}) }}"
    stage two: "{{ lookup('sparkplay_deployment', recipe, deployment=stage_one, facts=facts, settings=serve) }}"

Stage one is computed once, on the controller, in playbooks/recipe.yml; stage
two (what each rank runs) by the serve role's plan tasks on the leader, once
every rank's facts are in. The roles read the result instead of deriving
paths, the leader, checkpoints, argv or unit names themselves.
"""

# ruff: noqa: E402  (validate-modules wants the documentation before the imports)
from __future__ import annotations

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
    description: Host name to sparkplay_rank, for every host of sparkplay_nodes (stage one).
    type: dict
    default: {}
  settings:
    description:
      - Stage one, the inventory's sparkplay_* settings (model root, fabric env file, serve record, docker client)
        and the API address (serve_bind, serve_port).
      - Stage two, the serve role's settings (sparkplay.settings.LAUNCH_DEFAULTS names them) and the API address.
    type: dict
    default: {}
  deployment:
    description: Stage one, to which stage two adds the launch (with facts).
    type: dict
  facts:
    description: Host name to {machine, fabric_env}, for every rank (stage two).
    type: dict
  staged:
    description: checkpoint_staged folders on rank 0.
    type: list
    elements: dict
    default: []
  lock:
    description: Revisions resolved earlier for unpinned repos.
    type: dict
    default: {}
"""

from typing import Any

from ansible.errors import AnsibleLookupError
from ansible.plugins.lookup import LookupBase
from ansible_collections.sparkplay.spark.plugins.plugin_utils.sparkplay_package import missing

try:
    from sparkplay.deployment import compute, with_launch
    from sparkplay.errors import SparkplayError
except ImportError as error:  # the plugin still loads (ansible-doc, Galaxy); a call says the fix
    SPARKPLAY_MISSING: ImportError | None = error
else:
    SPARKPLAY_MISSING = None


class LookupModule(LookupBase):
    def run(self, terms: list[Any], variables: dict[str, Any] | None = None, **kwargs: Any) -> list[Any]:
        if SPARKPLAY_MISSING is not None:
            raise missing(SPARKPLAY_MISSING)
        self.set_options(var_options=variables, direct=kwargs)
        ranks, settings = self.get_option("ranks"), self.get_option("settings")
        staged, lock = self.get_option("staged") or [], self.get_option("lock") or {}
        stage_one, facts = self.get_option("deployment"), self.get_option("facts")
        try:
            if stage_one is not None:
                return [with_launch(stage_one, recipe, facts or {}, settings) for recipe in terms]
            return [compute(recipe or None, ranks, settings, staged, lock) for recipe in terms]
        except (SparkplayError, ValueError) as exc:
            raise AnsibleLookupError(str(exc)) from None
