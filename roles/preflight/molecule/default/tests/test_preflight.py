"""Verify the node is what the preflight's read-only checks accept: systemd is PID 1 and running, a
Debian family OS, the rank the inventory gives it (testinfra, read-only; the idempotence step shows the
role changes nothing)."""


def rank(host):
    return int(host.backend.get_variables()["sparkplay_rank"])


def test_systemd_is_the_service_manager_and_running(host):
    assert host.check_output("ps -p 1 -o comm=").strip() == "systemd"
    state = host.run("systemctl is-system-running").stdout.strip()
    assert state in ("running", "degraded"), state


def test_the_os_is_a_debian_family_one_and_the_rank_is_the_inventorys(host):
    assert host.system_info.distribution in ("debian", "ubuntu"), host.system_info.distribution
    assert rank(host) in (0, 1)
