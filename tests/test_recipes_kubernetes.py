"""A Kubernetes workload manifest read as the kubelet starts its containers; the manifests were written for these
tests from the Kubernetes API's shapes."""

from __future__ import annotations

import pytest
import yaml

from sparkplay import argv, importing
from sparkplay.errors import BadInput
from tests.conftest import PROJECT

MANIFEST = PROJECT / "tests" / "fixtures" / "pasted" / "k8s-vllm.yaml"


def test_a_deployment_beside_its_service_imports_with_kubernetes_own_expansion():
    doc = importing.import_source(str(MANIFEST))
    assert doc["source"]["kind"] == "kubernetes"
    assert doc["engine"]["image"] == "vllm/vllm-openai:v0.11.2" and doc["model"]["repo"] == "Qwen/Qwen3-8B"
    assert doc["context_length"] == 16384  # $(CTX) from the container's env
    assert doc["model"]["served_name"] == "qwen-$(MODEL)"  # $$(MODEL): the text itself, as Kubernetes passes it
    assert "HF_TOKEN" not in doc["serve"]["env"]  # the Secret's value is the cluster's, and a secret
    said = "\n".join(n["detail"] for n in doc["provenance"])
    assert "resources, readinessProbe: Kubernetes' running of the container, not applied" in said


def manifest(tmp_path, kind: str, pod: dict) -> str:
    path = tmp_path / "m.yaml"
    body = {"apiVersion": "batch/v1", "kind": kind, "metadata": {"name": "m"}}
    if kind == "CronJob":
        body["spec"] = {"schedule": "@daily", "jobTemplate": {"spec": {"template": {"spec": pod}}}}
    elif kind == "Pod":
        body["spec"] = pod
    else:
        body["spec"] = {"template": {"spec": pod}}
    path.write_text(yaml.safe_dump(body))
    return str(path)


@pytest.mark.parametrize("kind", ["Pod", "Job", "CronJob", "StatefulSet"])
def test_each_workload_kinds_pod_template_is_found(tmp_path, kind):
    pod = {
        "containers": [
            {"name": "s", "image": "lmsysorg/sglang:v0.5.9", "command": ["python3", "-m", "sglang.launch_server"]}
            | {"args": ["--model-path", "Qwen/Qwen3-8B", "--context-length", "8192"]}
        ]
    }
    doc = importing.import_source(manifest(tmp_path, kind, pod))
    assert doc["engine"]["name"] == "sglang" and doc["context_length"] == 8192


def test_a_shell_in_the_container_sees_the_containers_env(tmp_path):
    pod = {
        "containers": [
            {
                "name": "v",
                "image": "vllm/vllm-openai:v0.11.2",
                "env": [{"name": "M", "value": "Qwen/Qwen3-8B"}],
                "command": ["/bin/sh", "-c"],
                "args": ["exec vllm serve ${M} --max-model-len 4096"],
            }
        ]
    }
    doc = importing.import_source(manifest(tmp_path, "Pod", pod))
    assert doc["model"]["repo"] == "Qwen/Qwen3-8B" and not argv.has_flag(doc["serve"]["args"], "--model")


@pytest.mark.parametrize(
    ("pod", "says"),
    [
        (
            {
                "containers": [
                    {
                        "image": "vllm/vllm-openai:v0.11.2",
                        "env": [{"name": "M", "valueFrom": {"configMapKeyRef": {"name": "c", "key": "m"}}}],
                        "args": ["--model", "$(M)"],
                    }
                ]
            },
            "which the text never sets",
        ),
        ({"containers": [{"name": "x"}]}, "names no image"),
        ({"containers": {"image": "x"}}, "containers must be a list"),
        ({"containers": [{"image": "vllm/vllm-openai:v0.11.2", "args": "--model x"}]}, "must be a list of words"),
        ({"containers": [{"image": "vllm/vllm-openai:v0.11.2", "env": {"A": "1"}}]}, "env must be a list"),
        ({"containers": [{"image": "redis:7"}]}, "holds no engine command"),
    ],
)
def test_a_manifest_that_cannot_be_read_or_leaves_a_value_to_the_cluster_is_refused(tmp_path, pod, says):
    path = manifest(tmp_path, "Pod", pod)
    with pytest.raises(BadInput) as caught:
        importing.import_source(path)
    assert says in str(caught.value) and path in str(caught.value) and "\n" not in str(caught.value)


def test_a_stream_of_manifests_without_a_workload_is_no_recipe(tmp_path):
    path = tmp_path / "svc.yaml"
    path.write_text("apiVersion: v1\nkind: Service\nmetadata: {name: a}\n---\napiVersion: v1\nkind: ConfigMap\n")
    with pytest.raises(
        BadInput, match=r"is a Kubernetes manifest, not a recipe, and holds no engine command .*Service a"
    ):
        importing.import_source(str(path))
