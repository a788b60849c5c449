"""Bench results on the controller: the profile a run uses, where a result is kept, its table, chart and ratios.

The measuring happens on the leader (playbooks/bench.yml runs llama-benchy
and the invariance check there); this module turns the JSON that comes back
into a file named by what was measured (recipe, its sha256, the engine's
build, the date), a table, a PNG chart and, against an earlier result, the
ratio of every rate.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from sparkplay.errors import BadInput
from sparkplay.fsutil import atomic_write

# profile key -> (the playbook's variable, whether it is a list)
PROFILE = {
    "pp": ("bench_pp", True),
    "tg": ("bench_tg", True),
    "depth": ("bench_depth", True),
    "concurrency": ("bench_concurrency", True),
    "runs": ("bench_runs", False),
    "invariance_tokens": ("bench_invariance_tokens", False),
}
RATES = ("pp_tps", "tg_tps")


def load_profile(path: Path) -> dict[str, Any]:
    """A profile file (YAML: pp, tg, depth, concurrency as lists; runs, invariance_tokens) as playbook variables."""
    try:
        doc = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise BadInput(f"bench profile {path} cannot be read: {exc}", "give a YAML file of pp, tg, ...") from exc
    return profile_variables(doc, f"bench profile {path}")


def profile_variables(doc: Any, what: str) -> dict[str, Any]:
    """A profile (a file's, or a recipe's own `bench`) as the playbook's variables, checked."""
    if not isinstance(doc, dict):
        raise BadInput(f"{what} is not a mapping", f"write keys among {', '.join(PROFILE)}")
    unknown = sorted(set(doc) - set(PROFILE))
    if unknown:
        raise BadInput(
            f"{what} has unknown keys {', '.join(map(str, unknown))}", f"use keys among {', '.join(PROFILE)}"
        )
    variables: dict[str, Any] = {}
    for key, value in doc.items():
        name, many = PROFILE[key]
        values = value if many and isinstance(value, list) else [value]
        if not values or not all(
            isinstance(v, int) and not isinstance(v, bool) and v >= (0 if key == "depth" else 1) for v in values
        ):
            kind = "a list of whole numbers" if many else "a whole number"
            raise BadInput(f"{what}: {key} is {value!r}", f"give {key} as {kind} (at least 1)")
        variables[name] = values if many else values[0]
    return variables


def digest(text: str | bytes) -> str:
    return hashlib.sha256(text.encode() if isinstance(text, str) else text).hexdigest()


def result_name(recipe: str, stamp: str, recipe_sha256: str, engine_build: str) -> str:
    """`<date>-<recipe>-r<recipe sha256>-e<engine build digest>.json`: the same recipe on another build
    or an edited recipe never shares a name."""
    build = engine_build.split(":", 1)[1] if engine_build.startswith("sha256:") else digest(engine_build)
    return f"{stamp}-{recipe}-r{recipe_sha256[:12]}-e{build[:12]}.json"


def rows(result: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One row per llama-benchy test: its shape and its rates (tokens/s) and time to first token (ms)."""

    def mean(run: Mapping[str, Any], key: str) -> float | None:
        metric = run.get(key)
        return round(float(metric["mean"]), 2) if isinstance(metric, dict) and "mean" in metric else None

    found = []
    for run in (result.get("benchy") or {}).get("benchmarks") or []:
        if run.get("is_context_prefill_phase"):
            continue
        found.append(
            {
                "concurrency": run["concurrency"],
                "pp": run["prompt_size"],
                "tg": run["response_size"],
                "depth": run["context_size"],
                "pp_tps": mean(run, "pp_throughput"),
                "tg_tps": mean(run, "tg_throughput"),
                "ttft_ms": mean(run, "e2e_ttft"),
            }
        )
    return found


def save(
    result: dict[str, Any], folder: Path, *, recipe: str, stamp: str, recipe_sha256: str, engine_build: str
) -> Path:
    """Keep the result under `folder`/<recipe>/ with what names it recorded inside."""
    result.update(recipe=recipe, recipe_sha256=recipe_sha256, engine_build=engine_build, date=stamp)
    path = folder / recipe / result_name(recipe, stamp, recipe_sha256, engine_build)
    atomic_write(path, json.dumps(result, indent=1, sort_keys=True) + "\n")
    return path


def load(path: Path) -> dict[str, Any]:
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise BadInput(f"bench result {path} cannot be read: {exc}", "give a file `sparkplay bench` saved") from exc
    if not isinstance(doc, dict) or not rows(doc):
        raise BadInput(f"{path} holds no bench rows", "give a JSON file `sparkplay bench` saved")
    return doc


def compare(now: list[dict[str, Any]], before: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """For every test shape in both: each rate now, before, and now / before."""

    def key(row: Mapping[str, Any]) -> tuple[int, int, int, int]:
        return row["concurrency"], row["pp"], row["tg"], row["depth"]

    earlier = {key(row): row for row in before}
    found = []
    for row in now:
        old = earlier.get(key(row))
        if old is None:
            continue
        for rate in RATES:
            if row[rate] and old[rate]:
                found.append(
                    {
                        "shape": key(row),
                        "rate": rate,
                        "now": row[rate],
                        "before": old[rate],
                        "ratio": round(row[rate] / old[rate], 3),
                    }
                )
    return found


def chart(found: list[dict[str, Any]], path: Path, title: str) -> Path:
    """Tokens/s against concurrency, one line per rate and test shape (PNG)."""
    import matplotlib  # late: only the chart needs it

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    figure, axis = plt.subplots(figsize=(7, 4.2), dpi=120)
    shapes = sorted({(r["pp"], r["tg"], r["depth"]) for r in found})
    for pp, tg, depth in shapes:
        series = sorted(
            (r for r in found if (r["pp"], r["tg"], r["depth"]) == (pp, tg, depth)), key=lambda r: r["concurrency"]
        )
        levels = [r["concurrency"] for r in series]
        label = f"pp{pp} tg{tg}" + (f" @d{depth}" if depth else "")
        axis.plot(levels, [r["tg_tps"] or 0 for r in series], marker="o", label=f"generation, {label}")
        axis.plot(
            levels, [r["pp_tps"] or 0 for r in series], marker="s", linestyle="--", label=f"prompt processing, {label}"
        )
    axis.set_xscale("log", base=2)
    levels = sorted({r["concurrency"] for r in found})
    axis.set_xticks(levels, labels=[str(c) for c in levels])
    axis.set_xlabel("concurrent requests")
    axis.set_ylabel("tokens/s (all requests)")
    axis.set_title(title, fontsize=10)
    axis.grid(True, alpha=0.3)
    axis.legend(fontsize=7)
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path)
    plt.close(figure)
    return path


def leaders_serving(records: list[Mapping[str, Any]], model: str, recipe: str) -> list[dict[str, Any]]:
    """The deployments' leader records a bench may measure: the one serving `model` (a served name) where
    one is asked for, else the recipe's."""
    key, want = ("served_name", model) if model else ("recipe", recipe)
    return [dict(r) for r in records if r.get("role") == "leader" and r.get(key) == want]
