"""scripts/sparkrun_diff.py's comparison (its `render` step needs sparkrun itself, Python 3.12: not run here).
The reference below is what sparkrun's rendering looks like for a recipe written for this test."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import yaml

from sparkplay import importing
from sparkplay.engines.plan import Options, build, stand_in_nodes
from tests.conftest import PROJECT

spec = importlib.util.spec_from_file_location("sparkrun_diff", PROJECT / "scripts" / "sparkrun_diff.py")
assert spec and spec.loader
diff = importlib.util.module_from_spec(spec)
spec.loader.exec_module(diff)

RECIPE = {
    "recipe_version": "2",
    "model": "org/m",
    "runtime": "vllm-distributed",
    "container": "vllm/vllm-openai:v0.20.0",
    "min_nodes": 2,
    "env": {"NCCL_SOCKET_IFNAME": "enp1s0f0np0", "NCCL_DEBUG": "INFO"},
    "defaults": {"port": 8000, "host": "0.0.0.0"},  # noqa: S104 - the recipe's, narrowed by the import
    "command": "vllm serve {model} -tp 2 --host {host} --port {port} --max-model-len 4096 --speculative-config "
    '\'{"method": "eagle3", "model": "org/draft", "num_speculative_tokens": 3}\'',
}
# sparkrun's rendering of RECIPE (generate_command on a two-node cluster): the command, its env, the image
REFERENCE = {
    "nodes": 2,
    "model": "org/m",
    "image": "vllm/vllm-openai:v0.20.0",
    "served": "",
    "env": {"NCCL_SOCKET_IFNAME": "enp1s0f0np0", "NCCL_DEBUG": "INFO"},
    "command": "vllm serve org/m -tp 2 --host 0.0.0.0 --port 8000 --max-model-len 4096 \\\n  --speculative-config "
    '\'{"method": "eagle3", "model": "org/draft", "num_speculative_tokens": 3}\'',
}


def imported(tmp_path: Path) -> tuple[dict, dict]:
    path = tmp_path / "r.yaml"
    path.write_text(yaml.safe_dump(RECIPE))
    doc = importing.import_source(str(path))
    return doc, build(doc, stand_in_nodes(2), Options(model_root="/m", allow=None))


def test_a_faithful_import_has_no_silent_change(tmp_path):
    doc, plan = imported(tmp_path)
    assert diff.differences(REFERENCE, doc, plan) == []  # the mirrored draft, the bind and the NCCL env are noted


def test_a_flag_changed_without_a_note_is_found(tmp_path):
    doc, plan = imported(tmp_path)
    leader = plan["ranks"][0]
    at = leader["argv"].index("--max-model-len")
    leader["argv"][at + 1] = "8192"
    assert diff.differences(REFERENCE, doc, plan) == ["--max-model-len: sparkrun ['4096'] sparkplay ['8192']"]
    doc["provenance"] = [n for n in doc["provenance"] if "NCCL_SOCKET_IFNAME" not in n["key"]]
    assert "env NCCL_SOCKET_IFNAME: sparkrun 'enp1s0f0np0' sparkplay 'enp1s0f1np1'" in diff.differences(
        REFERENCE, doc, plan
    )
