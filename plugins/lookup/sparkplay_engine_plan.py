"""Lookup `sparkplay_engine_plan`: the launch plan for every rank, from sparkplay's engine adapters.

    plan: "{{ lookup('sparkplay_engine_plan', sparkplay_recipe_plan, nodes=facts, model_root=root) }}"

`nodes` maps each host to {rank, fabric_env, machine}. The per-rank argv,
environment, mounts and health URL come from the same Python code the CLI
and the tests use; nothing of it is rewritten in Jinja.
"""

from __future__ import annotations

from typing import Any

from ansible.errors import AnsibleLookupError
from ansible.plugins.lookup import LookupBase

from sparkplay.boundary import check_allow
from sparkplay.engines.plan import Node, Options, build
from sparkplay.errors import SparkplayError

DOCUMENTATION = """
name: sparkplay_engine_plan
short_description: Per-rank launch plans for a sparkplay recipe
description:
  - Runs sparkplay's engine adapter (atlas, vllm, llamacpp) for the recipe and the ranks' facts.
  - Fails with a one-line message naming the problem and the fix.
options:
  _terms:
    description: The validated recipe (a dict).
    required: true
  nodes:
    description: Host name to {rank, fabric_env, machine}.
    type: dict
    required: true
  model_root:
    description: Where checkpoints live on every rank.
    type: str
    required: true
  bind:
    description: API address override (empty keeps the recipe's).
    type: str
    default: ''
  port:
    description: API port override (0 keeps the recipe's).
    type: int
    default: 0
  knobs:
    description: Knob overrides.
    type: dict
    default: {}
  health_timeout:
    description: Seconds to wait for health (0 keeps the recipe's).
    type: int
    default: 0
  state_dir:
    description: Host folder for engine caches.
    type: str
    default: /var/lib/sparkplay
  docker:
    description: The docker client the units run (docker runtime).
    type: str
    default: /usr/bin/docker
  allow:
    description: The privileged requests the inventory allows by name (serve_allow; sparkplay.boundary).
    type: list
    elements: str
    default: []
"""


class LookupModule(LookupBase):
    def run(self, terms: list[Any], variables: dict[str, Any] | None = None, **kwargs: Any) -> list[Any]:
        self.set_options(var_options=variables, direct=kwargs)
        results = []
        for recipe in terms:
            try:
                nodes = [Node.from_facts(host, facts) for host, facts in self.get_option("nodes").items()]
                options = Options(
                    model_root=self.get_option("model_root"),
                    bind=self.get_option("bind") or None,
                    port=self.get_option("port") or None,
                    knobs=self.get_option("knobs") or {},
                    health_timeout_s=self.get_option("health_timeout") or None,
                    state_dir=self.get_option("state_dir"),
                    docker=self.get_option("docker"),
                    allow=check_allow(self.get_option("allow") or []),
                )
                results.append(build(recipe, nodes, options))
            except SparkplayError as exc:
                raise AnsibleLookupError(str(exc)) from None
        return results
