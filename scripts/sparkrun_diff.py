"""Check sparkplay's import of sparkrun recipes against sparkrun itself: for each recipe file, sparkrun renders its
command (its own code, the source of truth for what the recipe means), sparkplay imports it and plans it, and
every difference in a flag, an environment key, the image, the model, the node count or the served names must be
named by one of the import's notes. What is left is a silent change, printed. Two steps, two Pythons (sparkrun
needs 3.12):

    python3.12 -m venv /tmp/sr && /tmp/sr/bin/pip install sparkrun==0.4.2
    /tmp/sr/bin/python scripts/sparkrun_diff.py render REGISTRY_DIR... > /tmp/rendered.json
    .venv/bin/python scripts/sparkrun_diff.py compare /tmp/rendered.json [--stand-in-hub]

(--stand-in-hub: llama.cpp's -hf repositories are listed by a stand-in, not the Hugging Face hub.)

Flags sparkplay owns by design (bind, port, the model's path in the mirror, rank and rendezvous flags, served
names) are compared through the notes and the served names, not flag by flag. docs/recipes.md has the figures.
"""

from __future__ import annotations

import collections
import json
import re
import shlex
import sys
from pathlib import Path
from typing import Any

# short and alternative spellings -> one name, so `-tp 2` and `--tensor-parallel-size 2` compare equal
ALIASES = {
    "-tp": "--tensor-parallel-size",
    "-pp": "--pipeline-parallel-size",
    "-dp": "--data-parallel-size",
    "--tp": "--tensor-parallel-size",
    "--tp-size": "--tensor-parallel-size",
    "--pp-size": "--pipeline-parallel-size",
    "--dp-size": "--data-parallel-size",
    "--ep-size": "--expert-parallel-size",
    "--model-path": "--model",
    "-c": "--ctx-size",
    "-m": "--model",
    "-ngl": "--n-gpu-layers",
    "--gpu-layers": "--n-gpu-layers",
    "-fa": "--flash-attn",
    "-np": "--parallel",
    "-a": "--alias",
    "-t": "--threads",
    "-b": "--batch-size",
    "-ub": "--ubatch-size",
    "-ctk": "--cache-type-k",
    "-ctv": "--cache-type-v",
    "-hf": "--hf-repo",
    "-hff": "--hf-file",
    "-md": "--model-draft",
    "-hfd": "--hf-repo-draft",
    "-mm": "--mmproj",
}
# what sparkplay sets itself, by design; each is checked another way (notes, served names, the plan's tests)
OWNED = {
    "--host",
    "--port",
    "--model",
    "--served-model-name",
    "--model-name",
    "--alias",
    "--nnodes",
    "--node-rank",
    "--master-addr",
    "--master-port",
    "--headless",
    "--dist-init-addr",
    "--data-parallel-address",
    "--data-parallel-rpc-port",
    "--data-parallel-rank",
    "--data-parallel-start-rank",
    "--data-parallel-size-local",
    "--rank",
    "--world-size",
    "--hf-repo",
    "--hf-file",
    "--mmproj",
    "--hf-repo-draft",
    "--model-draft",
    "--rpc",
    "--gpus-per-node",  # TensorRT-LLM's: one GB10 per Spark
}
PROGRAM = {
    "vllm",
    "serve",
    "python3",
    "python",
    "-m",
    "sglang.launch_server",
    "llama-server",
    "spark",
    "exec",
    "trtllm-serve",
}


def render(folders: list[str]) -> None:
    """sparkrun's own rendering of every recipe YAML under the folders (run with sparkrun installed)."""
    import logging

    from sparkrun.core.bootstrap import get_runtime
    from sparkrun.core.recipe import Recipe

    logging.disable(logging.CRITICAL)
    out: dict[str, Any] = {}
    for path in sorted(p for folder in folders for p in Path(folder).rglob("*.y*ml")):
        try:
            r = Recipe.load(path)
            nodes = int(r.min_nodes or 1)
            head = "10.0.0.1" if nodes > 1 else None
            runtime = get_runtime(r.runtime)
            command = runtime.generate_command(r, {}, nodes > 1, nodes, head)
            worker = ""  # rank 1's own command, where each rank runs the engine itself (not Ray's workers)
            if nodes > 1 and runtime.cluster_strategy() == "native":
                worker = runtime.generate_node_command(r, {}, head, nodes, 1)
            out[str(path)] = {
                "nodes": nodes,
                "command": command or "",
                "worker": worker,
                "model": r.model or "",
                "env": {k: str(v) for k, v in (r.env or {}).items()},
                "image": r.container or "",
                "served": str(getattr(r, "effective_served_model_name", "") or ""),
            }
        except Exception as exc:  # a file sparkrun cannot load is counted, not fatal
            out[str(path)] = {"error": f"{type(exc).__name__}: {exc}"[:300]}
    json.dump(out, sys.stdout, indent=1)


def _flag(token: str) -> bool:
    return token.startswith("-") and len(token) > 1 and not re.match(r"^-\d", token)


def _name(flag: str) -> str:
    flag = "--" + flag[2:].replace("_", "-") if flag.startswith("--") else flag
    return ALIASES.get(flag, flag)


def parse(tokens: list[str]) -> dict[str, list[str]]:
    """Flag -> its values (each occurrence's words joined), after the program words."""
    i = 0
    while i < len(tokens) and not _flag(tokens[i]) and (tokens[i] in PROGRAM or "=" in tokens[i]):
        i += 1
    found: dict[str, list[list[str]]] = collections.defaultdict(list)
    current = None
    for token in tokens[i:]:
        if _flag(token):
            name, eq, value = token.partition("=")
            current = _name(name if token.startswith("--") else token)
            found[current].append([value] if eq and token.startswith("--") else [])
            current = None if eq and token.startswith("--") else current
        elif current is not None:
            found[current][-1].append(token)
    return {k: sorted(" ".join(v) for v in vs) for k, vs in found.items()}


def _same(theirs: list[str], mine: list[str]) -> bool:
    """Equal, or equal once a repo is its mirror path, a number its value, a JSON text its data."""
    if len(theirs) != len(mine):
        return False
    for a, b in zip(theirs, mine, strict=True):
        if a == b or b.endswith("/" + a.replace("/", "--")):
            continue
        try:
            if float(a) == float(b):
                continue
        except ValueError:
            pass
        try:
            ja, jb = json.loads(a), json.loads(b)
        except ValueError:
            return False
        if (
            isinstance(ja, dict)
            and isinstance(jb, dict)
            and str(jb.get("model", "")).endswith("/" + str(ja.get("model", "")).replace("/", "--"))
        ):
            jb = {**jb, "model": ja["model"]}
        if ja != jb:
            return False
    return True


def _named(word: str, notes: list[dict[str, str]]) -> bool:
    bare = word.lstrip("-")
    return any(k in f"{n['key']} {n['detail']}" for n in notes for k in (bare, bare.replace("-", "_")))


def _flag_differences(command: str, argv: list[str], notes: list[dict[str, str]], rank: str) -> list[str]:
    lexer = shlex.shlex(command.replace("\\\n", " ").rstrip().rstrip("\\"), posix=True, punctuation_chars=";&")
    lexer.whitespace_split = True
    words = list(lexer)
    # the engine's own statement: what the command runs before it is compared as the import's preamble is
    cut = max((i for i, w in enumerate(words) if w in (";", "&&")), default=-1)
    theirs, mine = parse(words[cut + 1 :]), parse(argv)
    return [
        f"{rank}{flag}: sparkrun {theirs.get(flag, [])} sparkplay {mine.get(flag, [])}"
        for flag in sorted((set(theirs) | set(mine)) - OWNED)
        if not _same(theirs.get(flag, []), mine.get(flag, [])) and not _named(flag, notes)
    ]


def differences(ref: dict[str, Any], doc: dict[str, Any], plan: dict[str, Any]) -> list[str]:
    """What sparkplay plans differently from sparkrun's rendering and no note names."""
    notes = doc["provenance"]
    leader = next(r for r in plan["ranks"] if r["role"] == "leader")
    argv = leader["argv"]
    if "-c" in argv[:2] and "serve" in argv:  # a shell wrapper (Ray's head, mods): the engine's own words
        argv = argv[argv.index("serve") :]
    found = _flag_differences(ref["command"], argv, notes, "")
    worker = next((r for r in plan["ranks"] if r["rank"] == 1 and r["role"] == "worker"), None)
    if ref.get("worker") and worker is not None:
        found += _flag_differences(ref["worker"], worker["argv"], notes, "rank 1 ")
    found += [
        f"env {k}: sparkrun {v!r} sparkplay {leader['env'].get(k)!r}"
        for k, v in sorted(ref["env"].items())
        if leader["env"].get(k) != v and not _named(k, notes)
    ]
    if ref["image"] and plan["image"] and plan["image"] != ref["image"] and not _named("image", notes):
        found.append(f"image: sparkrun {ref['image']} sparkplay {plan['image']}")
    names = [doc["model"]["served_name"], *(doc["model"].get("served_aliases") or [])]
    if ref["served"] and names != ref["served"].split() and not _named("served", notes):
        found.append(f"served names: sparkrun {ref['served']} sparkplay {names}")
    repo = doc["model"].get("repo")
    if ref["model"] and repo != ref["model"].split(":")[0] and not _named("model.repo", notes):
        found.append(f"model: sparkrun {ref['model']} sparkplay {repo}")
    if int(doc["topology"]["nodes"] or 1) < ref["nodes"]:
        found.append(f"nodes: sparkrun {ref['nodes']} sparkplay {doc['topology']['nodes']}")
    return found


def compare(rendered: str, stand_in_hub: bool) -> int:
    """Import and plan every file sparkrun rendered; print the counts, the refusals and any silent change."""
    from sparkplay import importing
    from sparkplay.engines.plan import Options, build, stand_in_nodes
    from sparkplay.errors import BadInput
    from sparkplay.recipes.importers.pasted import gguf_hub

    if stand_in_hub:  # no network: every GGUF repository lists a Q4_K_M and a Q8_0 file of its own name
        gguf_hub.LISTER = lambda repo, _rev: ("0" * 40, [f"{repo.split('/')[-1]}-{q}.gguf" for q in ("Q4_K_M", "Q8_0")])

    counts: collections.Counter[str] = collections.Counter()
    report: dict[str, list[str]] = collections.defaultdict(list)
    for path, ref in json.loads(Path(rendered).read_text()).items():
        if "error" in ref or not ref["command"].strip():
            counts["sparkrun cannot load or render"] += 1
            continue
        try:
            doc = importing.import_source(path)
            plan = build(doc, stand_in_nodes(int(doc["topology"]["nodes"] or 1)), Options(model_root="/m", allow=None))
        except BadInput as exc:
            kind = "not a recipe" if "is not a recipe sparkplay knows" in str(exc) else "refused"
            counts[kind] += 1
            report[kind].append(f"{path}: {str(exc)[len(path) + 2 :][:200]}")
            continue
        silent = differences(ref, doc, plan)
        counts["silent change" if silent else "imported, every difference noted"] += 1
        counts[f"imported: {doc['engine']['name']}"] += 1
        if silent:
            report["silent change"].append(f"{path}: {'; '.join(silent)}")
    for kind in ("refused", "silent change"):
        for line in report[kind]:
            print(f"{kind}: {line}")
    print(json.dumps(dict(counts), indent=1))
    return 1 if report["silent change"] else 0


if __name__ == "__main__":
    if len(sys.argv) < 3 or sys.argv[1] not in ("render", "compare"):
        sys.exit(__doc__)
    if sys.argv[1] == "render":
        render(sys.argv[2:])
    else:
        sys.exit(compare(sys.argv[2], "--stand-in-hub" in sys.argv[3:]))
