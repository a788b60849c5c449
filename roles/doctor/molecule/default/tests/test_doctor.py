"""Verify doctor changed nothing: the serve units still run and the fabric file is the one provisioning
wrote (testinfra, read-only; the idempotence step shows the role reports no change)."""


def test_the_served_lab_is_as_doctor_found_it(host):
    assert host.service("sparkplay-serve.service").is_running
    assert host.file("/etc/sparkplay/fabric.env").contains("SPARKPLAY_FABRIC_ADDRESSES=")
