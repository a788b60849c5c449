"""Build sysfs trees for the fabric parser, laid out as the kernel lays them out.

The layouts follow the Spark facts in the project's reference notes (two
netdevs and two RDMA devices per QSFP port, one per PCIe domain; GID tables
under ports/1). The lab's layout (veths with no PCI device, no infiniband
class) is the one `sparkplay lab up` really produces.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

# A GID table as a ConnectX-7 shows it once an IPv4 address is on the netdev.
GIDS_V4_AT_3 = {
    0: ("IB/RoCE v1", "fe80:0000:0000:0000:0000:0000:0000:0001"),
    1: ("RoCE v2", "fe80:0000:0000:0000:0000:0000:0000:0001"),
    2: ("IB/RoCE v1", "0000:0000:0000:0000:0000:ffff:c0a8:640a"),
    3: ("RoCE v2", "0000:0000:0000:0000:0000:ffff:c0a8:640a"),
}
# "some setups needed 5": an extra IPv6 pair ahead of the IPv4 entries
GIDS_V4_AT_5 = {
    **{k: v for k, v in GIDS_V4_AT_3.items() if k < 2},
    2: ("IB/RoCE v1", "2001:0db8:0000:0000:0000:0000:0000:0001"),
    3: ("RoCE v2", "2001:0db8:0000:0000:0000:0000:0000:0001"),
    4: ("IB/RoCE v1", "0000:0000:0000:0000:0000:ffff:c0a8:650a"),
    5: ("RoCE v2", "0000:0000:0000:0000:0000:ffff:c0a8:650a"),
}


def build(root: Path, netdevs: dict[str, dict[str, Any]], rdma: dict[str, dict[str, Any]] | None = None) -> Path:
    net = root / "sys/class/net"
    net.mkdir(parents=True, exist_ok=True)
    for name, spec in netdevs.items():
        dev = net / name
        dev.mkdir()
        (dev / "carrier").write_text("1\n" if spec.get("carrier") else "0\n")
        (dev / "mtu").write_text(f"{spec.get('mtu', 1500)}\n")
        (dev / "operstate").write_text("up\n" if spec.get("carrier") else "down\n")
        if spec.get("pci"):
            target = root / "sys/devices/pci0000:00" / spec["pci"]
            target.mkdir(parents=True, exist_ok=True)
            (dev / "device").symlink_to(os.path.relpath(target, dev))
    for name, spec in (rdma or {}).items():
        base = root / "sys/class/infiniband" / name
        (base / "device/net" / spec["netdev"]).mkdir(parents=True)
        port = base / "ports/1"
        (port / "gid_attrs/types").mkdir(parents=True)
        (port / "gids").mkdir(parents=True)
        (port / "state").write_text("4: ACTIVE\n" if spec.get("active", True) else "1: DOWN\n")
        for index, (kind, gid) in spec.get("gids", {}).items():
            (port / "gid_attrs/types" / str(index)).write_text(kind + "\n")
            (port / "gids" / str(index)).write_text(gid + "\n")
    return root


def spark(root: Path, cabled_port: int = 1, gids: dict | None = None, second_twin_carrier: bool = True) -> Path:
    """A DGX Spark: both QSFP ports, each as two netdevs and two RDMA devices."""
    netdevs, rdma = {}, {}
    for port in (0, 1):
        for domain in (0, 2):
            name = f"enp1s0f{port}np{port}" if domain == 0 else f"enP2p1s0f{port}np{port}"
            cabled = port == cabled_port and (domain == 0 or second_twin_carrier)
            netdevs[name] = {"carrier": cabled, "pci": f"{domain:04x}:01:00.{port}", "mtu": 9000 if cabled else 1500}
            dev = f"rocep1s0f{port}" if domain == 0 else f"roceP2p1s0f{port}"
            rdma[dev] = {"netdev": name, "active": cabled, "gids": (gids or GIDS_V4_AT_3) if cabled else {}}
    netdevs["enP7s7"] = {"carrier": True, "pci": "0007:07:00.0"}  # management, not the fabric
    return build(root, netdevs, rdma)
