"""A Kubernetes workload manifest (Pod, Deployment, StatefulSet, DaemonSet, ReplicaSet, Job, CronJob) whose
container runs an engine, read as the kubelet starts it: the pod template's containers (not init containers),
each one's `image`, `command` (the image's entrypoint replaced) and `args` (its command), with `$(NAME)`
expanded from the container's own `env` as Kubernetes expands it (`$$(NAME)` is a literal `$(NAME)`; a name
the env does not define stays as written). An `env` entry's `valueFrom` (a Secret, a ConfigMap, a field of the
pod) is the cluster's: unknown, and refused where the engine would need it. The scheduling (replicas,
resources, affinity), the probes, the security context and the volumes are Kubernetes' own running of the
container: sparkplay's unit runs the engine on the inventory's nodes, and the import names what it leaves.
"""

from __future__ import annotations

import re
import shlex
from typing import Any

from sparkplay.errors import BadInput
from sparkplay.recipes.importers.pasted import launches
from sparkplay.recipes.importers.pasted.docker_run import Container
from sparkplay.recipes.importers.pasted.launches import Found
from sparkplay.recipes.importers.pasted.shell_words import unknown

# the kinds whose pod template runs containers -> the path to that pod's spec
PODS: dict[str, tuple[str, ...]] = {
    "Pod": ("spec",),
    "Deployment": ("spec", "template", "spec"),
    "StatefulSet": ("spec", "template", "spec"),
    "DaemonSet": ("spec", "template", "spec"),
    "ReplicaSet": ("spec", "template", "spec"),
    "Job": ("spec", "template", "spec"),
    "CronJob": ("spec", "jobTemplate", "spec", "template", "spec"),
}
REFERENCE = re.compile(r"\$(\$)?\(([A-Za-z_][A-Za-z0-9_.-]*)\)")
# a container's or pod's keys that are Kubernetes' running of it: named when set, not applied
NOT_CARRIED = ("resources", "securityContext", "readinessProbe", "livenessProbe", "startupProbe", "volumeMounts")


def is_object(doc: Any) -> bool:
    return isinstance(doc, dict) and isinstance(doc.get("apiVersion"), str) and isinstance(doc.get("kind"), str)


def is_workload(doc: Any) -> bool:
    return is_object(doc) and doc["kind"] in PODS


def find(docs: list[Any], where: str) -> Found:
    """Every engine the manifests' containers run, named by the workload and the container."""
    found = Found(together=True)  # a file's workloads all run
    for doc in docs:
        if not is_workload(doc):
            if is_object(doc):  # a Service, a ConfigMap...: named, as a compose file's other services are
                found.ignored.append(f"{doc['kind']} {_name(doc)}".strip())
            continue
        pod = _pod(doc, where)
        name = _name(doc) or doc["kind"].lower()
        containers = pod.get("containers") or []
        if not isinstance(containers, list):
            raise BadInput(f"{where}: {doc['kind']} {name}'s containers must be a list", "fix the manifest")
        for spec in containers:
            if not isinstance(spec, dict) or not isinstance(spec.get("image"), str):
                raise BadInput(f"{where}: a container of {doc['kind']} {name} names no image", "fix the manifest")
            at = f"{doc['kind']} {name}, container {spec.get('name') or '?'}"
            _container(spec, pod, at, len(containers) == 1 and name, found)
    return found


def _name(doc: dict[str, Any]) -> str:
    metadata = doc.get("metadata")
    return str(metadata.get("name") or "") if isinstance(metadata, dict) else ""


def _pod(doc: dict[str, Any], where: str) -> dict[str, Any]:
    node: Any = doc
    for key in PODS[doc["kind"]]:
        node = node.get(key) if isinstance(node, dict) else None
    if not isinstance(node, dict):
        raise BadInput(f"{where}: the {doc['kind']} has no pod spec at {'.'.join(PODS[doc['kind']])}", "fix it")
    return node


def _container(spec: dict[str, Any], pod: dict[str, Any], at: str, hint: str | bool, found: Found) -> None:
    env = _env(spec.get("env"), at)
    command, args = (_words(spec.get(key), env, f"{at}: {key}") for key in ("command", "args"))
    container = Container(spec["image"], args, {"--env": [f"{k}={v}" for k, v in env.items()]})
    if command:
        container.options["--entrypoint"] = [shlex.join(command)]
    count = len(found.launches)
    words = launches._container_command(container, at)
    if words is not None:
        launches._inside(words, at, container, found, 0)
    if len(found.launches) == count:
        found.ignored.append(f"{at} ({spec['image']})")
        return
    named = [key for key in NOT_CARRIED if spec.get(key)] + [k for k in ("affinity", "volumes") if pod.get(k)]
    for launch in found.launches[count:]:
        launch.name_hint = str(hint or spec.get("name") or launch.name_hint or "")
        if named:
            launch.notes.append(
                (
                    "serve.args",
                    "ignored",
                    f"{at}'s {', '.join(named)}: Kubernetes' running of the container, not applied (sparkplay's "
                    "unit runs the engine on the inventory's nodes, with its own limits and readiness proof)",
                )
            )


def _env(entries: Any, at: str) -> dict[str, str]:
    if entries is None:
        return {}
    if not isinstance(entries, list) or not all(
        isinstance(e, dict) and isinstance(e.get("name"), str) for e in entries
    ):
        raise BadInput(f"{at}: env must be a list of name/value entries", "fix the manifest")
    out: dict[str, str] = {}
    for entry in entries:
        if "valueFrom" in entry:  # a Secret's, a ConfigMap's, the pod's: the cluster's value, not the file's
            out[entry["name"]] = unknown(entry["name"])
        else:
            out[entry["name"]] = _expanded(str(entry.get("value", "")), out)  # an earlier entry may be used
    return out


def _words(value: Any, env: dict[str, str], at: str) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise BadInput(f"{at} must be a list of words", "write it as a YAML list")
    return [_expanded(str(word), env) for word in value]


def _expanded(text: str, env: dict[str, str]) -> str:
    """Kubernetes' $(NAME): the env's value; $$(NAME) the text $(NAME); an undefined name as written."""
    return REFERENCE.sub(lambda m: f"$({m.group(2)})" if m.group(1) else env.get(m.group(2), m.group(0)), text)
