"""Verify the NVIDIA stack role on lab nodes, which have no GPU (testinfra, read-only).

What is real: the role's own tasks on a systemd node. What cannot exist here:
a GPU, its driver and NVIDIA's container runtime, so the check is that the
role changed nothing it would only change for one.
"""


def test_nvidia_runtime_is_not_registered_on_a_node_without_gpu(host):
    daemon = host.file("/etc/docker/daemon.json")
    assert not daemon.exists or "nvidia" not in daemon.content_string


def test_nvidia_packages_are_not_installed_on_a_node_without_gpu(host):
    assert not host.package("nvidia-container-toolkit").is_installed
