"""The cluster page in a real browser on the real lab (issue 57): Debian's Chromium, headless, driven through
Selenium and ChromeDriver. Marked `lab` and `extra` (`make test-extra`; `make browser` installs the browser).

The browser runs in rank 0's network namespace (nsenter), where the gateway listens on loopback as it does for
a user on the leader; ChromeDriver takes commands from the host's lab address only. On the lab: lab-tiny across
both ranks and lab-ui-od, lab-small's model served on demand on rank 1. The page shows both and their states; a
request for the stopped one shows it loading, then serving, within 5 s of each change; a pulled cable shows its
cause on lab-ui-od (behind the cable) within 15 s and clears after the plug. A screenshot is kept in
.cache/ui/ (docs/ui.png is one). Stand-ins: none.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.conftest import PROJECT, lab_cli, lab_small_as, run_cli
from tests.test_lab import in_node

pytestmark = [pytest.mark.lab, pytest.mark.extra, pytest.mark.usefixtures("lab_host", "own_lab")]

ON_DEMAND = "lab-ui-od"
PAGE = "http://127.0.0.1:9930/ui"
DRIVER_PORT = 9515
KEPT = PROJECT / ".cache" / "ui"


def inspect(field: str) -> str:
    return subprocess.run(
        ["docker", "inspect", "-f", field, "sparkplay-lab-rank0"], capture_output=True, text=True, check=True
    ).stdout.strip()


@pytest.fixture(scope="module")
def served() -> Iterator[None]:
    settings = PROJECT / "inventory" / "lab" / "group_vars" / "all" / "ui.yml"
    recipe = PROJECT / "recipes" / f"{ON_DEMAND}.yml"
    recipe.write_text(yaml.safe_dump(lab_small_as(ON_DEMAND, 1 << 20, 9944), sort_keys=False))
    settings.parent.mkdir(parents=True, exist_ok=True)
    settings.write_text(yaml.safe_dump({"serve_on_demand": [ON_DEMAND]}))
    try:
        for args in (("lab-tiny",), (ON_DEMAND, "--add", "--node", "sparkplay-lab-rank1")):
            proc = lab_cli("up", *args, "--yes")
            assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr
        yield
    finally:
        lab_cli("stop", ON_DEMAND, "--yes")
        recipe.unlink(missing_ok=True)
        settings.unlink(missing_ok=True)


@pytest.fixture(scope="module")
def browser(served: None) -> Iterator[object]:
    if not shutil.which("chromedriver") or not shutil.which("chromium"):
        pytest.fail("no Chromium or ChromeDriver: run `make browser` (as root) first")
    from selenium import webdriver

    address, host = inspect("{{range .NetworkSettings.Networks}}{{.IPAddress}} {{.Gateway}}{{end}}").split()[:2]
    driver_proc = subprocess.Popen(
        [
            "nsenter",
            "-t",
            inspect("{{.State.Pid}}"),
            "-n",
            "chromedriver",
            f"--port={DRIVER_PORT}",
            f"--allowed-ips={host}",
            "--allowed-origins=*",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    options = webdriver.ChromeOptions()
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--window-size=1400,1000",
    ):
        options.add_argument(arg)
    deadline = time.monotonic() + 20
    while True:
        try:
            driver = webdriver.Remote(f"http://{address}:{DRIVER_PORT}", options=options)
            break
        except Exception:
            if time.monotonic() > deadline:
                driver_proc.kill()
                raise
            time.sleep(0.5)
    driver.get(PAGE)
    yield driver
    driver.quit()
    driver_proc.kill()


def rows(driver) -> dict[str, dict[str, str]]:
    """The page's models table as a user reads it: model -> its cells by column."""
    return json.loads(
        driver.execute_script(
            "const heads = [...document.querySelectorAll('#models thead th')].map(h => h.textContent);"
            "return JSON.stringify(Object.fromEntries([...document.querySelectorAll('#models tbody tr')].map(r =>"
            " [r.dataset.model, Object.fromEntries([...r.cells].map((c, i) => [heads[i], c.textContent]))])));"
        )
    )


def wait_for(driver, check, within: float, what: str) -> float:
    """Seconds until `check(rows)` holds on the page; fails past `within`, saying what the page showed."""
    started = time.monotonic()
    shown: dict = {}
    while time.monotonic() - started < within:
        shown = rows(driver)
        if check(shown):
            return time.monotonic() - started
        time.sleep(0.1)
    raise AssertionError(f"the page did not show {what} within {within} s: {shown}")


def test_ui_state_names_every_served_model_and_the_page_shows_them_once_its_script_ran(browser):
    state = json.loads(in_node(0, "curl", "-s", f"{PAGE}/state").stdout)
    names = {m["name"] for m in state["models"]}
    assert {"lab-tiny", ON_DEMAND} <= names, names
    wait_for(browser, lambda shown: {"lab-tiny", ON_DEMAND} <= set(shown), 10, "both models")
    shown = rows(browser)
    assert shown["lab-tiny"]["state"].startswith("serving") and shown["lab-tiny"]["node"] == "sparkplay-lab-rank0"
    # proven at `up`, then stopped: the gateway (restarted by that `up`) has not been asked for it yet
    assert shown[ON_DEMAND]["state"] in (
        "stopped on demand (on demand)",
        "not asked for since the gateway started (on demand)",
    ), shown
    assert "carrier" in browser.find_element("id", "twins").text  # the leader's twins
    # each node with what admission counted there; the leader's own engine with its use against its limit
    nodes = {
        row.get_attribute("data-node"): row.text for row in browser.find_elements("css selector", "#nodes tbody tr")
    }
    assert set(nodes) == {"sparkplay-lab-rank0", "sparkplay-lab-rank1"}, nodes
    assert re.search(r"lab-tiny [0-9.]+ GiB: uses [0-9.]+ GiB of [0-9.]+ GiB", nodes["sparkplay-lab-rank0"]), nodes
    assert "lab-tiny" in nodes["sparkplay-lab-rank1"] and ON_DEMAND in nodes["sparkplay-lab-rank1"], nodes
    by_name = {n["name"]: n for n in state["nodes"]}
    assert by_name["sparkplay-lab-rank1"]["total_bytes"] > 0 and not by_name["sparkplay-lab-rank1"]["here"]


def test_a_request_for_the_stopped_model_shows_it_loading_then_serving(browser):
    body = json.dumps({"model": ON_DEMAND, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4})
    asked = time.monotonic()
    client = threading.Thread(
        target=in_node,
        args=(
            0,
            "curl",
            "-s",
            "-m",
            "60",
            "-H",
            "Content-Type: application/json",
            "-d",
            body,
            "http://127.0.0.1:9930/v1/chat/completions",
        ),
    )
    client.start()
    wait_for(browser, lambda s: s[ON_DEMAND]["state"].startswith("loading"), 5, "lab-ui-od loading")
    loading = time.monotonic() - asked
    wait_for(browser, lambda s: s[ON_DEMAND]["state"].startswith("serving"), 30, "lab-ui-od serving")
    serving = time.monotonic() - asked
    client.join()
    state = json.loads(in_node(0, "curl", "-s", f"{PAGE}/state").stdout)
    ready = next(m for m in state["models"] if m["name"] == ON_DEMAND)["receipt"]["http_ready_s"]
    # each change on the page within 5 s of it: loading once asked for, serving once its engine answered
    assert loading <= 5 and serving <= ready + 5, (loading, serving, ready)
    assert rows(browser)[ON_DEMAND]["TTL left"].endswith(" s")
    events = browser.find_element("id", "events").text
    assert f"starting {ON_DEMAND} on demand" in events and f"{ON_DEMAND} answers" in events
    print(f"\npage: loading {loading:.1f} s and serving {serving:.1f} s after the request (ready in {ready} s)")


def test_a_pulled_cable_shows_its_cause_on_the_deployment_behind_it_and_clears_after_the_plug(browser):
    assert run_cli("lab", "pull").returncode == 0
    try:
        shown = wait_for(browser, lambda s: "no route" in s[ON_DEMAND]["why it cannot answer"], 15, "the cause")
        assert "no carrier" in browser.find_element("id", "twins").text
        print(f"\npage: the cause {shown:.1f} s after the pull")
        KEPT.mkdir(parents=True, exist_ok=True)
        browser.save_screenshot(str(KEPT / "cable-pulled.png"))
    finally:
        assert run_cli("lab", "plug").returncode == 0
    cleared = wait_for(browser, lambda s: not s[ON_DEMAND]["why it cannot answer"], 60, "the cause cleared")
    print(f"page: cleared {cleared:.1f} s after the plug")
    browser.save_screenshot(str(KEPT / "serving.png"))
    assert Path(KEPT / "serving.png").stat().st_size > 10_000
