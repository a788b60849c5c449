"""How bytes cross the cable: one module a transport, each with `send(job) -> Sent`.

ssh (the default): parallel streams, each an ssh session to `sink` on the peer.
tcp: the same streams over plain TCP to a receiver that rank 0 starts on the
peer through ssh for this run only, for a private cable.
rsync: rsync over ssh, the plain well-known fallback.
"""

from __future__ import annotations

from .base import Job, Progress, Sent

NAMES = ("ssh", "tcp", "rsync")


def send(name: str, job: Job) -> Sent:
    if name == "ssh":
        from .ssh import send as chosen
    elif name == "tcp":
        from .tcp import send as chosen
    elif name == "rsync":
        from .rsync import send as chosen
    else:
        raise ValueError(f"unknown transport {name!r}: use one of {', '.join(NAMES)}")
    return chosen(job)


__all__ = ["NAMES", "Job", "Progress", "Sent", "send"]
