"""One run at a time per inventory (issue 53): the commands that change nodes hold the inventory's run lock; a
second waits naming the first or, with --no-wait, refuses (exit 7); a lock whose run died is taken over and
said; read-only commands never wait. Real processes and the real CLI; no lab (the lab's two `up` at once is in
tests/test_several_lab.py)."""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from sparkplay import runlock
from sparkplay.errors import ExitCode
from tests.conftest import run_cli

HOLDER = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from sparkplay import runlock
    with runlock.holding(Path(sys.argv[1]), Path(sys.argv[2]), say=lambda line: None):
        print("held", flush=True)
        time.sleep(float(sys.argv[3]))
    print("released", flush=True)
    """
)


def hold(inventory: Path, state: Path, seconds: float) -> subprocess.Popen[str]:
    """Another process holding the inventory's lock for `seconds`, once it has printed 'held'."""
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(inventory), str(state), str(seconds)],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
    return proc


@pytest.fixture
def where(tmp_path: Path) -> tuple[Path, Path]:
    inventory = tmp_path / "inventory"
    inventory.mkdir()
    (inventory / "hosts.yml").write_text("all: {}\n")
    return inventory, tmp_path / "state"


def test_a_second_command_that_changes_nodes_refuses_with_no_wait_naming_the_first(where):
    inventory, state = where
    holder = hold(inventory, state, 30)
    try:
        started = time.monotonic()
        proc = run_cli("up", "lab-tiny", "-i", str(inventory), "--no-wait", env={"SPARKPLAY_STATE_DIR": str(state)})
        assert time.monotonic() - started < 20
    finally:
        holder.kill()
        holder.wait()
    assert proc.returncode == ExitCode.BUSY == 7, proc.stdout + proc.stderr
    said = proc.stderr.strip().splitlines()
    assert len(said) == 1 and said[0].startswith("sparkplay: error: another run is changing the nodes of")
    assert f"(pid {holder.pid} on " in said[0] and "since " in said[0] and "without --no-wait" in said[0]
    assert "plan lab-tiny" not in proc.stdout  # refused before anything ran


@pytest.mark.parametrize("command", [["stop", "--yes"], ["reset", "--yes"], ["verify"], ["lock", "--yes"]])
def test_every_command_that_changes_nodes_takes_the_lock(where, command):
    inventory, state = where
    holder = hold(inventory, state, 30)
    try:
        proc = run_cli(*command, "-i", str(inventory), "--no-wait", env={"SPARKPLAY_STATE_DIR": str(state)})
    finally:
        holder.kill()
        holder.wait()
    assert proc.returncode == ExitCode.BUSY, proc.stdout + proc.stderr


def test_a_second_run_waits_for_the_first_saying_which_then_goes_on(where):
    inventory, state = where
    holder = hold(inventory, state, 2)
    said: list[str] = []
    started = time.monotonic()
    with runlock.holding(inventory, state, say=said.append, poll=0.1):
        waited = time.monotonic() - started
    holder.wait()
    assert waited >= 1.0, waited
    assert len(said) == 1 and said[0].startswith("waiting for `") and f"(pid {holder.pid} on " in said[0]
    assert "took over" not in " ".join(said)  # the first ended cleanly


def test_a_lock_whose_run_was_killed_is_taken_over_at_once_and_said(where):
    inventory, state = where
    holder = hold(inventory, state, 60)
    holder.send_signal(signal.SIGKILL)
    holder.wait()
    said: list[str] = []
    started = time.monotonic()
    with runlock.holding(inventory, state, say=said.append, wait=False):
        assert time.monotonic() - started < 5
    assert said and "took over the lock of `" in said[0] and f"(pid {holder.pid} on " in said[0]
    assert "ended without finishing" in said[0]


def test_another_inventory_and_a_read_only_command_do_not_wait(where, tmp_path):
    inventory, state = where
    other = tmp_path / "other"
    other.mkdir()
    holder = hold(inventory, state, 30)
    try:
        with runlock.holding(other, state, wait=False, say=lambda _: None):
            pass
        started = time.monotonic()
        proc = run_cli("plan", "lab-tiny", "-i", str(inventory), env={"SPARKPLAY_STATE_DIR": str(state)})
        assert time.monotonic() - started < 60
    finally:
        holder.kill()
        holder.wait()
    assert proc.returncode != ExitCode.BUSY and "waiting for" not in proc.stderr


def test_the_lock_and_its_note_are_the_users_alone(where):
    inventory, state = where
    with runlock.holding(inventory, state, say=lambda _: None):
        path = runlock.lock_path(inventory, state)
        note = path.read_text()
        assert str(os.getpid()) in note
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert path.read_text() == ""  # a clean end leaves no note


def test_a_changing_run_renews_its_nodes_leases_while_it_lasts_and_a_check_run_does_not(tmp_path, monkeypatch):
    """A run of hours (a download) outlives the nodes' lease (runlock.NODE_LEASE_S) unless renewed: the runner
    runs playbooks/renew.yml every runlock.RENEW_S while the playbook goes on, and says a node it lost. Ansible
    itself is a stand-in here (its run takes 0.5 s); the renewal module is tests/test_node_modules.py's."""
    import ansible_runner

    from sparkplay import runner

    ran: list[str] = []

    class Done:
        status, rc = "successful", 0
        config = type("Config", (), {"artifact_dir": str(tmp_path)})()

    def fake_run(**kwargs):
        ran.append(Path(kwargs["playbook"]).name)
        if kwargs["playbook"].endswith("renew.yml"):
            kwargs["event_handler"](
                {"event": "runner_on_ok", "event_data": {"host": "spark1", "res": {"msg": "spark1: lost it"}}}
            )
        else:
            time.sleep(0.5)
        return Done()

    monkeypatch.setattr(ansible_runner, "run", fake_run)
    monkeypatch.setattr(runlock, "RENEW_S", 0.1)
    monkeypatch.setitem(runlock.CURRENT, "note", {"command": "sparkplay up big"})
    monkeypatch.setitem(runlock.CURRENT, "wait", True)
    result = runner.run_playbook(tmp_path, "serve.yml", tmp_path / "hosts.yml")
    assert ran[0] == "serve.yml" and 2 <= ran.count("renew.yml") <= 6, ran
    assert ("spark1", "Renew | the run lock", "spark1: lost it") in result.messages
    ran.clear()
    runner.run_playbook(tmp_path, "serve.yml", tmp_path / "hosts.yml", check=True)  # a check run claims nothing
    assert ran == ["serve.yml"]
    monkeypatch.delitem(runlock.CURRENT, "note")
    monkeypatch.delitem(runlock.CURRENT, "wait")
    runner.run_playbook(tmp_path, "status.yml", tmp_path / "hosts.yml")  # a read-only command holds no lock
    assert ran == ["serve.yml", "status.yml"]


def test_runs_rotate_their_artifacts_beside_each_other_without_failing(tmp_path):
    """Two CLIs (or a run and its lease renewal) rotate one artifacts folder at once: ansible-runner's own
    rotation failed a command with FileNotFoundError when another had removed a run first (seen in CI)."""
    import threading

    from sparkplay import runner

    artifacts = tmp_path / "artifacts"
    for i in range(60):
        run = artifacts / f"run-{i:02d}"
        (run / "job_events").mkdir(parents=True)
        for j in range(30):
            (run / "job_events" / f"{j}.json").write_text("{}")
        os.utime(run, (1_000_000 + i, 1_000_000 + i))
    failures: list[BaseException] = []

    def rotate() -> None:
        try:
            runner.rotate(artifacts, keep=20)
        except OSError as exc:  # a racing rotation that fails: the finding
            failures.append(exc)

    racers = [threading.Thread(target=rotate) for _ in range(4)]
    for racer in racers:
        racer.start()
    for racer in racers:
        racer.join()
    assert failures == []
    assert sorted(p.name for p in artifacts.iterdir()) == [f"run-{i:02d}" for i in range(40, 60)]  # the newest
    runner.rotate(tmp_path / "none")  # no folder yet: nothing to do
