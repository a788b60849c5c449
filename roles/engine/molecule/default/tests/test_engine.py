"""Verify the engine role put the lab recipe's engine on every rank: llama.cpp's Debian packages and the
RPC server the plan runs, and the unprivileged user the engine runs as (testinfra, read-only)."""


def test_llama_cpps_packages_are_installed(host):
    for name in ("llama.cpp-tools", "libggml0-backend-rpc"):
        assert host.package(name).is_installed, name
    assert host.file("/usr/bin/llama-server").exists


def test_the_engine_runs_as_its_own_unprivileged_user(host):
    user = host.user("sparkplay-engine")
    assert user.exists and user.uid != 0 and user.shell in ("/usr/sbin/nologin", "/bin/false")
