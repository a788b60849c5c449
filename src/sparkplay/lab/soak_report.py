"""The soak's report: availability outside the fault windows, each fault's recovery against its bound, the
leaks' verdicts, what the journals said, and a plot of every request over time with the windows shaded.

Written as DIR/report.json (the data: keys `availability_outside_faults`, `faults`, `leaks`, `requests`, ...),
DIR/report.md (for a person and docs/benchmarks.md) and DIR/requests.png (matplotlib, headless).
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from sparkplay.fsutil import atomic_write
from sparkplay.lab.soak_faults import Fault

# the rules a soak passes by (issue 55): what outside the fault windows must succeed, swaps a minute
AVAILABILITY_MIN = 0.995
SWAPS_PER_MINUTE_MIN = 1.0
# faults that must not interrupt any model: inside their windows, every request succeeds too
UNINTERRUPTED = ("update", "two-runs", "memory-kill")


def _inside(request: dict[str, Any], windows: Sequence[tuple[float, float]]) -> bool:
    begun, ended = request["start"], request["start"] + request["latency_s"]
    return any(begun <= end and ended >= start for start, end in windows)


def summarise(
    requests: list[dict[str, Any]],
    faults: list[Fault],
    leaks: list[dict[str, Any]],
    tracebacks: Sequence[str],
    swaps: int,
    minutes: float,
    meta: dict[str, Any],
) -> dict[str, Any]:
    """Everything the report says, as data, with the verdict of each rule."""
    windows = [f.window for f in faults]
    outside = [r for r in requests if not _inside(r, windows)]
    good = sum(1 for r in outside if r["ok"])
    availability = good / len(outside) if outside else 0.0
    failed_outside = [r for r in outside if not r["ok"]]
    fault_rows = [
        {
            **{k: v for k, v in asdict(f).items() if k != "notes"},
            "notes": f.notes,
            "within_bound": f.recovered_s is not None and f.recovered_s <= f.bound_s and not f.problem,
            "requests_inside": sum(1 for r in requests if _inside(r, [f.window])),
            "requests_failed_inside": sum(1 for r in requests if not r["ok"] and _inside(r, [f.window])),
        }
        for f in faults
    ]
    rules = {
        f"availability outside faults >= {AVAILABILITY_MIN:.1%}": availability >= AVAILABILITY_MIN,
        "every fault recovered within its bound": all(row["within_bound"] for row in fault_rows),
        "no request failed during an update, two runs or a memory kill beside it": not any(
            row["requests_failed_inside"] for row in fault_rows if row["kind"] in UNINTERRUPTED
        ),
        "no leak growing": not any(row["verdict"] == "growing" or "over its bound" in row["verdict"] for row in leaks),
        "no traceback in any journal": not tracebacks,
        f"at least {SWAPS_PER_MINUTE_MIN:g} swap a minute": swaps >= SWAPS_PER_MINUTE_MIN * minutes,
    }
    return {
        **meta,
        "minutes": round(minutes, 1),
        "availability_outside_faults": round(availability, 5),
        "requests_total": len(requests),
        "requests_outside_faults": len(outside),
        "failed_outside_faults": [
            {k: r[k] for k in ("start", "model", "api", "status", "error")} for r in failed_outside
        ],
        "fault_kinds": sorted({f.kind for f in faults}),
        "faults": fault_rows,
        "swaps": swaps,
        "leaks": leaks,
        "tracebacks": list(tracebacks),
        "rules": rules,
        "passed": all(rules.values()),
        "requests": requests,
    }


def _clock(at: float) -> str:
    return time.strftime("%H:%M:%S", time.gmtime(at))


def markdown(report: dict[str, Any]) -> str:
    lines = [
        f"# Soak of {report['minutes']} minutes on {report.get('where', 'the lab')} "
        f"({report['started_utc']} UTC, seed {report['seed']})",
        "",
        f"Machine: {report['machine']}. Requests: {report['requests_total']}, "
        f"{report['requests_outside_faults']} outside fault windows; "
        f"**availability outside faults {report['availability_outside_faults']:.2%}**. "
        f"Faults: {len(report['faults'])}, of {len(report['fault_kinds'])} kinds. Swaps: {report['swaps']}.",
        "",
        "| rule | held |",
        "| --- | --- |",
        *(f"| {rule} | {'yes' if held else '**no**'} |" for rule, held in report["rules"].items()),
        "",
        "| at (UTC) | fault | target | held s | answering again after s (bound) | requests in window (failed) "
        "| status said |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for f in report["faults"]:
        took = "never" if f["recovered_s"] is None else f"{f['recovered_s']:.1f}"
        held = f"{f['cleared'] - f['started']:.0f}"
        said = (f["status_said"] or "-").replace("|", "/")[:160]
        problem = f" **{f['problem']}**" if f["problem"] else ""
        lines.append(
            f"| {_clock(f['started'])} | {f['kind']} | {f['target']} | {held} | {took} ({f['bound_s']:.0f})"
            f"{problem} | {f['requests_inside']} ({f['requests_failed_inside']}) | {said} |"
        )
    lines += ["", "| leak figure | start | end | verdict |", "| --- | --- | --- | --- |"]
    lines += [f"| {row['what']} | {row['start']} | {row['end']} | {row['verdict']} |" for row in report["leaks"]]
    if report.get("not_measured"):
        lines += ["", f"Not measured here (the lab's soak does): {'; '.join(report['not_measured'])}."]
    lines += ["", f"Tracebacks in the journals: {len(report['tracebacks'])}."]
    lines += [f"- {line}" for line in report["tracebacks"][:20]]
    if report["failed_outside_faults"]:
        lines += ["", "Requests that failed outside fault windows:"]
        lines += [
            f"- {_clock(r['start'])} {r['model']} {r['api']}: {r['status']} {r['error']}"
            for r in report["failed_outside_faults"][:30]
        ]
    return "\n".join(lines) + "\n"


def plot(report: dict[str, Any], path: Path) -> None:
    """Every request's latency over time, coloured by outcome, each fault's window shaded and named."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    begun = report["started"]
    fig, ax = plt.subplots(figsize=(12, 4.5), dpi=100)
    for ok, colour, label in ((True, "tab:green", "answered"), (False, "tab:red", "failed")):
        picked = [r for r in report["requests"] if r["ok"] is ok]
        ax.scatter(
            [(r["start"] - begun) / 60 for r in picked],
            [max(r["latency_s"], 0.01) for r in picked],
            s=6,
            c=colour,
            label=f"{label} ({len(picked)})",
        )
    for f in report["faults"]:
        start = (f["started"] - begun) / 60
        end = (f["cleared"] + (f["recovered_s"] if f["recovered_s"] is not None else f["bound_s"]) - begun) / 60
        ax.axvspan(start, end, color="tab:orange" if f["within_bound"] else "tab:red", alpha=0.18)
        ax.text(start, 0.012, f["kind"], rotation=90, fontsize=7, va="bottom")
    ax.set_yscale("log")
    ax.set_xlabel("minutes into the soak")
    ax.set_ylabel("latency (s)")
    ax.set_title(
        f"Soak {report['started_utc']} UTC: {report['availability_outside_faults']:.2%} answered outside the "
        f"{len(report['faults'])} fault windows (shaded)"
    )
    ax.legend(loc="upper right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def write(report: dict[str, Any], folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    atomic_write(folder / "report.json", json.dumps(report, indent=1) + "\n")
    atomic_write(folder / "report.md", markdown(report))
    plot(report, folder / "requests.png")
