"""The soak's arithmetic without a lab: which requests fall in a fault window, the rules' verdicts, leaks that
grow against processes restarted by a fault, the kinds a user may ask for, and a report written whole (JSON,
markdown, a PNG). The soak itself on the lab is tests/test_soak_lab.py."""

from __future__ import annotations

import json

import pytest

from sparkplay.errors import BadInput
from sparkplay.lab import soak, soak_report, soak_watch
from sparkplay.lab.soak_faults import KINDS, Fault
from sparkplay.lab.soak_load import whole
from tests.conftest import PROJECT

T0 = 1_800_000_000.0


def request(at: float, ok: bool = True, latency: float = 0.2, model: str = "lab-tiny") -> dict:
    return {
        "start": T0 + at,
        "model": model,
        "api": "chat",
        "stream": False,
        "status": 200 if ok else 0,
        "latency_s": latency,
        "first_byte_s": latency,
        "bytes": 100,
        "ok": ok,
        "error": "" if ok else "no answer",
    }


def fault(at: float, recovered: float | None, kind: str = "engine-kill", held: float = 0) -> Fault:
    return Fault(kind, "rank1", T0 + at, KINDS[kind][1], cleared=T0 + at + held, recovered_s=recovered)


def summary(requests, faults, leaks=(), tracebacks=(), swaps=10, minutes=10.0):
    return soak_report.summarise(
        requests, faults, list(leaks), list(tracebacks), swaps, minutes, {"started": T0, "seed": 1}
    )


def test_requests_inside_a_fault_window_do_not_count_against_availability():
    # a failure inside [100, 100 + 12] s, and one that began before the window and ended in it
    requests = [request(t) for t in range(0, 300, 2)] + [request(105, ok=False), request(95, ok=False, latency=6)]
    got = summary(requests, [fault(100, 12.0)])
    assert got["availability_outside_faults"] == 1.0 and got["passed"]
    assert got["faults"][0]["requests_inside"] == 9 and got["faults"][0]["within_bound"]
    # the same failure outside every window counts
    got = summary([*requests, request(200, ok=False)], [fault(100, 12.0)])
    assert got["availability_outside_faults"] < 1.0 and not got["rules"]["availability outside faults >= 99.5%"]
    assert got["failed_outside_faults"][0]["start"] == T0 + 200


def test_a_fault_past_its_bound_or_with_a_problem_fails_its_rule_and_its_window_runs_to_the_bound():
    late = fault(100, None, kind="gateway-kill")
    assert late.window == (T0 + 100, T0 + 100 + KINDS["gateway-kill"][1])
    got = summary([request(0)], [late])
    assert not got["rules"]["every fault recovered within its bound"] and not got["passed"]
    odd = fault(100, 3.0, kind="two-runs")
    odd.problem = "two runs at once exited [0, 7]"
    assert not summary([request(0)], [odd])["faults"][0]["within_bound"]


def test_a_failed_request_during_a_fault_that_interrupts_nothing_fails_the_soak():
    rule = "no request failed during an update, two runs or a memory kill beside it"
    quiet = [request(t) for t in range(0, 300, 2)]
    assert summary([*quiet, request(105, ok=False)], [fault(100, 12.0, kind="update")])["rules"][rule] is False
    assert summary(quiet, [fault(100, 12.0, kind="two-runs")])["rules"][rule] is True
    got = summary([*quiet, request(105, ok=False)], [fault(100, 12.0, kind="engine-kill")])  # expected to fail
    assert got["rules"][rule] and got["faults"][0]["requests_failed_inside"] == 1


def test_held_faults_count_their_recovery_from_when_they_are_cleared():
    pulled = fault(100, 20.0, kind="cable-long", held=60)
    assert pulled.window == (T0 + 100, T0 + 180)


def test_swaps_tracebacks_and_growing_leaks_each_fail_the_soak():
    assert not summary([request(0)], [], swaps=9, minutes=10)["rules"]["at least 1 swap a minute"]
    assert not summary([request(0)], [], tracebacks=["rank0: Traceback"])["passed"]
    assert not summary([request(0)], [], leaks=[{"what": "gateway fds", "verdict": "growing"}])["passed"]


def test_a_figure_grows_only_when_it_ends_highest_and_past_its_slack():
    def rows(values):
        return soak_watch.verdicts([(i * 60.0, {"gateway fds": v}) for i, v in enumerate(values)])[0]

    assert rows([20, 30, 45, 60])["verdict"] == "growing"
    assert rows([20, 24, 22, 30])["verdict"] == "steady"  # within its slack (16 + 25%)
    assert rows([20, 80, 21])["verdict"] == "steady"  # a restart started it small again
    assert rows([None, 20, None, 21])["verdict"] == "steady"  # unread while its node was down
    assert rows([None, None])["verdict"] == "unread"


def test_backups_are_held_to_the_bound_the_nodes_module_keeps_not_to_their_first_reading(tmp_path, monkeypatch):
    """The backups kept of a rewritten file grow until the module's bound (the newest ten and the original) by
    design: that is not a leak, passing the bound is. The count reads one node's folders as the soak does."""
    import subprocess

    monkeypatch.syspath_prepend(str(PROJECT / "collections"))
    from ansible_collections.sparkplay.spark.plugins.module_utils.sparkplay_managed import KEEP_BACKUPS

    assert soak_watch.KEEP_BACKUPS == KEEP_BACKUPS
    what = "backups of one file, the most, rank1"

    def verdict(values):
        return soak_watch.verdicts([(i * 60.0, {what: v}) for i, v in enumerate(values)])[0]["verdict"]

    assert verdict([0, 4, 9, 11]) == "within 11"  # grew, within the bound
    assert verdict([11, 12, 11]) == "over its bound of 11"
    assert not summary([request(0)], [], leaks=[{"what": what, "verdict": "over its bound of 11"}])["passed"]
    command = soak_watch.BOUNDED[what][0]
    for folder in ("state", "config"):
        (tmp_path / folder).mkdir()
    for i in range(3):
        (tmp_path / "config" / f"routes.json.{100 + i}.2026-12-07@01:3{i}:13~").write_text("x")
    (tmp_path / "state" / "record.json.7.2026-12-07@01:30:13~").write_text("x")
    (tmp_path / "config" / "routes.json").write_text("x")
    here = command.replace(soak_watch.STATE_DIR, str(tmp_path / "state"))
    here = here.replace(soak_watch.CONFIG_DIR, str(tmp_path / "config"))
    counted = subprocess.run(["sh", "-c", here], capture_output=True, text=True, check=True).stdout.strip()
    assert counted == "3"  # routes.json's three, not four files
    for old in (tmp_path / "config").glob("*~"):
        old.unlink()
    (tmp_path / "state" / "record.json.7.2026-12-07@01:30:13~").unlink()
    assert subprocess.run(["sh", "-c", here], capture_output=True, text=True).stdout.strip() == "0"


def test_the_fault_kinds_a_user_names_are_checked():
    assert soak.allowed(None) == list(KINDS) and len(KINDS) >= 8
    assert soak.allowed("engine-kill, reboot") == ["engine-kill", "reboot"]
    for bad in ("engine-kil", "", "reboot,meteor"):
        with pytest.raises(BadInput, match="--faults"):
            soak.allowed(bad)


def test_an_answer_is_whole_only_with_choices_or_a_stream_that_ended():
    assert whole('{"choices": [{"text": "391"}]}', stream=False)
    assert not whole('{"error": {"message": "busy"}}', stream=False) and not whole("<html>", stream=False)
    assert whole('data: {"choices": []}\n\ndata: [DONE]\n', stream=True)
    assert not whole('data: {"choices": []}\n\n', stream=True)  # cut off mid-stream


def test_the_report_is_written_whole(tmp_path):
    requests = [request(t, ok=t != 150) for t in range(0, 600, 3)]
    got = summary(requests, [fault(145, 8.0), fault(300, 40.0, kind="cable-short", held=15)])
    got.update(started_utc="2026-12-06 22:00", machine="lab", minutes=10)
    soak_report.write(got, tmp_path)
    data = json.loads((tmp_path / "report.json").read_text())
    assert {"availability_outside_faults", "faults", "leaks", "requests"} <= set(data)
    assert all({"kind", "recovered_s", "bound_s"} <= set(f) for f in data["faults"])
    assert (tmp_path / "requests.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    text = (tmp_path / "report.md").read_text()
    assert (
        "| cable-short | rank1 | 15 | 40.0 (180) | 19 (0) |" in text and "availability outside faults 100.00%" in text
    )
