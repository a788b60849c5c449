"""Verify what every play that lists the project's defaults needs of a node (the role has no tasks; its
converge asserts the defaults resolve as documented): systemd as the service manager and a Python for
Ansible's modules (testinfra, read-only)."""


def test_systemd_runs_the_node_and_python3_answers_ansible(host):
    assert host.check_output("ps -p 1 -o comm=").strip() == "systemd"
    assert host.exists("python3")
