"""An added deployment updated beside itself (docs/serving.md "Updating an added deployment"): its stand-in's
names, port and version, whether one is wanted, its admission beside the deployment, the routes it moves and
the drain that waits for the requests in flight before a deployment stops (no lab)."""

from __future__ import annotations

import http.client
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from sparkplay import admission, deployment, served
from sparkplay.admission import GIB
from sparkplay.engines import names
from sparkplay.errors import BadInput
from sparkplay.nodetools.serve import cli as serve_cli
from sparkplay.nodetools.serve.drain import drained
from tests import test_gateway
from tests.test_deployment import facts_of, recipe
from tests.test_gateway import open_stream, post, serve, write_routes
from tests.test_several import hosts, record_of

ADD = {"serve_mode": "add", "serve_node": "rank1"}


def staged(name: str, settings: dict | None = None, doc: dict | None = None) -> dict:
    doc = doc or recipe(name)
    one = deployment.compute(doc, {"rank0": 0, "rank1": 1}, settings)
    return deployment.with_launch(one, doc, facts_of(2), settings)


def changed_small() -> dict:
    doc = recipe("lab-small")
    args = doc["serve"]["args"]
    args[args.index("-c") + 1] = "256"
    doc["context_length"] = 256
    return doc


def test_a_stand_in_has_names_of_its_own_no_recipe_can_take_and_the_next_thousandth_port():
    slot = names.standin("lab-small")
    assert (
        slot == "lab-small.NEW"
        and names.stands_in_for(slot) == "lab-small"
        and names.stands_in_for("lab-small") is None
    )
    named, own = names.for_slot(slot), names.for_slot("lab-small")
    assert named["units"]["serve"] == "sparkplay-serve@lab-small.NEW.service"
    assert not {json.dumps(v) for v in named.values()} & {json.dumps(v) for v in own.values()}
    for bad in ("lab-small.new.NEW", "Lab", "x.NEW.NEW", "x.New"):  # recipe names are lower case, one suffix
        ok = bad == "lab-small.new.NEW"
        assert bool(names.SLOT.match(bad)) is ok
    got = staged("lab-small", {**ADD, "serve_standin": True})
    assert got["slot"] == slot and got["stands_in_for"] == "lab-small" and got["api"]["port"] == 9933 + 1000
    # the primary has no stand-in: the flag changes nothing without --add
    assert staged("lab-tiny", {"serve_standin": True})["slot"] is None
    with pytest.raises(BadInput, match="no port for lab-small's stand-in"):
        staged("lab-small", {**ADD, "serve_standin": True, "serve_port": 65000})


def test_a_stand_ins_version_is_its_deployments_plan_digest_from_the_same_inputs():
    running = staged("lab-small", ADD)["launch"]["ranks"][0]["record"]
    same = staged("lab-small", {**ADD, "serve_standin": True})["launch"]["ranks"][0]["record"]
    assert same["plan_sha256"] != running["plan_sha256"]  # its own names and port
    assert same["version_sha256"] == running["plan_sha256"] == running["version_sha256"]
    other = staged("lab-small", {**ADD, "serve_standin": True}, changed_small())["launch"]["ranks"][0]["record"]
    assert other["version_sha256"] != running["plan_sha256"]
    assert (
        other["version_sha256"]
        == staged("lab-small", ADD, changed_small())["launch"]["ranks"][0]["record"]["plan_sha256"]
    )


def test_a_stand_in_is_wanted_only_for_a_changed_added_one_node_deployment_that_fits():
    running = record_of(staged("lab-small", ADD)["launch"], {"rank1": {"bytes": GIB, "how": "x"}})
    same = staged("lab-small", {**ADD, "serve_standin": True})["launch"]
    changed = staged("lab-small", {**ADD, "serve_standin": True}, changed_small())["launch"]
    assert served.update_beside(running, changed) == {
        "beside": True,
        "why": "lab-small changed: its new version starts beside the running one first",
    }
    for found, launch, wanted, refused, why in [
        ([], changed, True, "", "lab-small is not served yet"),
        (running, same, True, "", "lab-small is unchanged"),
        (running, changed, False, "", "serve_update_beside is false"),
        (running, changed, True, "lab-small.NEW does not fit on rank1", "does not fit beside the running one"),
        (
            running,
            staged("lab-small", {"serve_mode": "add", "serve_standin": True}, changed_small())["launch"],
            True,
            "",
            "elsewhere",
        ),
        (running, {**changed, "on_demand": True}, True, "", "on demand"),
        (record_of(staged("lab-tiny")["launch"], {}), staged("lab-tiny")["launch"], True, "", "not an added"),
    ]:
        got = served.update_beside(found, launch, wanted, refused)
        assert got["beside"] is False and why in got["why"], got


def test_a_stand_in_is_admitted_beside_its_deployment_with_both_claims_counted():
    running = record_of(staged("lab-small", ADD)["launch"], {"rank1": {"bytes": 50 * GIB, "how": "x"}})
    standin = staged("lab-small", {**ADD, "serve_standin": True}, changed_small())["launch"]
    assert admission.decide(standin, hosts(), running)["checked"]  # the same recipe and served name: its twin
    crowded = record_of(staged("lab-small", ADD)["launch"], {"rank1": {"bytes": 117 * GIB, "how": "x"}})
    with pytest.raises(BadInput, match=r"does not fit on rank1.*admitted there: lab-small \(running\) 117\.0 GiB"):
        admission.decide(standin, hosts(), crowded)  # its deployment's claim is not given back: both run at once
    # the deployment's restart beside its stand-in (the second pass) is admitted too
    both = running + record_of(standin, {"rank1": {"bytes": GIB, "how": "y"}})
    assert admission.decide(staged("lab-small", ADD, changed_small())["launch"], hosts(), both)["checked"]
    # any other deployment of that recipe or served name is still refused
    other = {**standin, "slot": "lab-smaller"}
    with pytest.raises(BadInput, match="lab-small is already served on rank1"):
        admission.decide(other, hosts(), running)


def test_the_run_that_serves_a_model_routes_it_and_a_stand_in_never_outlives_its_run():
    small = staged("lab-small", ADD)["launch"]
    standin = staged("lab-small", {**ADD, "serve_standin": True}, changed_small())["launch"]
    found = record_of(small, {}) + record_of(standin, {})
    first = served.routes(found[:1], [standin["slot"]], standin["ranks"][0]["record"], "rank1")
    assert first["models"]["lab-small"]["url"].endswith(":10933")  # pass one: the stand-in takes the route
    second = served.routes(found, ["lab-small"], small["ranks"][0]["record"], "rank1")
    assert second["models"]["lab-small"]["url"].endswith(":9933")  # pass two: the deployment takes it back
    assert served.routes(found, [])["models"]["lab-small"]["slot"] == "lab-small"  # any other run: the same
    moved = served.moved(first, second)
    assert moved == [
        {"model": "lab-small", "from": first["models"]["lab-small"]["url"], "to": second["models"]["lab-small"]["url"]}
    ]
    assert served.moved(second, second) == [] and served.moved(None, second) == []
    assert served.moved({"models": "junk"}, second) == []


def test_drained_needs_the_new_route_and_nothing_in_flight_on_the_old_api():
    state = {"routes": {"m": "http://b"}, "upstreams": {"http://a": 2, "http://b": 5}}
    assert drained(state, "m", "http://b", "http://a") == (False, 2)
    assert drained({**state, "upstreams": {"http://b": 5}}, "m", "http://b", "http://a") == (True, 0)
    assert drained({**state, "routes": {"m": "http://a"}, "upstreams": {}}, "m", "http://b", "http://a")[0] is False
    assert drained({"routes": "x", "upstreams": {"http://a": "2"}}, "m", "http://b", "http://a") == (False, 0)


def drain(state: Path, timeout: float = 5) -> tuple[int, dict]:
    argv = [
        "drain",
        "--state",
        str(state),
        "--model",
        "m",
        "--to",
        "http://b",
        "--from",
        "http://a",
        "--timeout",
        str(timeout),
        "--interval",
        "0.05",
    ]
    return serve_cli.main(argv), {}


def test_the_drain_waits_for_the_last_request_on_the_old_api(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    state = tmp_path / "state.json"
    state.write_text(json.dumps({"routes": {"m": "http://b"}, "upstreams": {"http://a": 1}}))

    def answered() -> None:
        time.sleep(0.5)
        state.write_text(json.dumps({"routes": {"m": "http://b"}, "upstreams": {}}))

    threading.Thread(target=answered).start()
    assert drain(state)[0] == 0
    said = json.loads(capsys.readouterr().out)
    assert said["drained"] and said["seconds"] >= 0.4
    # still in flight at the timeout: exit 1, naming how many
    state.write_text(json.dumps({"routes": {"m": "http://b"}, "upstreams": {"http://a": 3}}))
    assert drain(state, 0.3)[0] == 1
    said = json.loads(capsys.readouterr().out)
    assert not said["drained"] and said["in_flight"] == 3 and "3 request(s) in flight on http://a" in said["why"]


def test_a_gateway_that_keeps_no_state_holds_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setattr("sparkplay.nodetools.serve.drain.NO_STATE_S", 0.2)
    assert drain(tmp_path / "none.json")[0] == 0
    assert "not running" in json.loads(capsys.readouterr().out)["why"]


@pytest.fixture
def two_engines() -> Iterator[dict]:
    yield from test_gateway.engines.__wrapped__()


def test_a_moved_route_drains_only_once_the_stream_on_the_old_api_is_answered(
    tmp_path: Path, two_engines: dict, capsys: pytest.CaptureFixture[str]
):
    """The real gateway (in a thread) and two engines: a stream holds the old API; the route moves; new
    requests go to the new API at once while the drain waits, and it ends only after the stream's last event."""
    routes, state = tmp_path / "routes.json", tmp_path / "state.json"
    old, new = two_engines["chat"][0], two_engines["coder"][0]
    write_routes(routes, {"chat": old})
    port, stop = serve(routes, "--state", str(state))
    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        reply = open_stream(conn, "chat")
        assert b'"part": "chat"' in reply.read1(4096)
        write_routes(routes, {"chat": new})
        other = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        assert post(other, {"model": "chat"})[1]["served_by"] == "coder"  # the new route, at once
        result: list[int] = []
        argv = [
            "drain",
            "--state",
            str(state),
            "--model",
            "chat",
            "--to",
            new,
            "--from",
            old,
            "--timeout",
            "20",
            "--interval",
            "0.05",
        ]
        waiting = threading.Thread(target=lambda: result.append(serve_cli.main(argv)))
        waiting.start()
        time.sleep(1.5)
        assert waiting.is_alive() and json.loads(state.read_text())["upstreams"] == {old: 1}
        two_engines["chat"][1].set()
        assert reply.read() == b"data: [DONE]\n\n"  # the stream in flight finished on the API it left
        waiting.join(10)
        assert result == [0] and json.loads(capsys.readouterr().out)["drained"]
    finally:
        stop()


def test_status_names_a_stand_in_as_an_updates_new_version():
    standin = staged("lab-small", {**ADD, "serve_standin": True}, changed_small())["launch"]
    (record,) = record_of(standin, {})
    show = {"item": record, "stdout": "ActiveState=active\nSubState=running\n"}
    (row,) = served.added_rows([show], [{"stdout": json.dumps({"health": True, "served": True})}])
    assert row["recipe"] == "lab-small" and row["standin"] and row["up"]
    assert row["line"].startswith("lab-small (its update's new version, standing in) on rank1")
