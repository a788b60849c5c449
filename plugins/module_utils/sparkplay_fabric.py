"""Read a Spark's ConnectX-7 fabric from sysfs: cabled port, twins, RDMA devices, GID index.

Runs on the node (inside an Ansible module), so it uses the standard library
only. Every path is under a `root` (normally "/") so tests can point it at
captured sysfs trees. The rules, from the reference notes on the Spark fabric:

- a QSFP port appears as two netdevs, one per PCIe domain ("twins");
  the netdev name encodes domain/bus/slot/function/port
  (enp1s0f1np1 = domain 0, bus 1, slot 0, function 1, port 1;
   enP2p1s0f1np1 = the same in domain 2);
- the cabled port is the one whose netdev has carrier;
- twins share bus:device.function across domains (the PCI address from
  sysfs when the netdev has a device, else the one its name encodes);
- boards like the ASUS GX10 wire the second domain to the other physical
  port, so pairing can be switched off: then each carrier-up netdev stands
  alone;
- the RDMA device behind a netdev is found in
  /sys/class/infiniband/<dev>/device/net/; a down HCA is never listed;
- the GID index for NCCL is the lowest RoCE v2 entry holding an IPv4-mapped
  address.
"""

from __future__ import annotations

import os
import re

NETDEV_NAME = re.compile(r"^en(?:P(?P<domain>\d+))?p(?P<bus>\d+)s(?P<slot>\d+)f(?P<fn>\d+)np(?P<port>\d+)\Z")
PCI_ADDRESS = re.compile(r"^(?P<domain>[0-9a-f]{4,}):(?P<bus>[0-9a-f]{2}):(?P<slot>[0-9a-f]{2})\.(?P<fn>[0-7])\Z")
IPV4_MAPPED_GID = re.compile(r"^0000:0000:0000:0000:0000:ffff:[0-9a-f]{4}:[0-9a-f]{4}\Z")


def _read(path: str) -> str | None:
    try:
        with open(path) as fh:
            return fh.read().strip()
    except OSError:
        return None


def _listdir(path: str) -> list[str]:
    try:
        return sorted(os.listdir(path))
    except OSError:
        return []


def pci_of(root: str, netdev: str) -> dict | None:
    """{domain, bus, slot, fn} of a netdev: from its device link, else from its name."""
    target = os.path.realpath(os.path.join(root, "sys/class/net", netdev, "device"))
    match = PCI_ADDRESS.match(os.path.basename(target)) if os.path.exists(target) else None
    if match:
        return {k: int(v, 16) for k, v in match.groupdict().items()}
    match = NETDEV_NAME.match(netdev)
    if match:
        return {
            "domain": int(match.group("domain") or "0"),
            "bus": int(match.group("bus")),
            "slot": int(match.group("slot")),
            "fn": int(match.group("fn")),
        }
    return None


def cx7_netdevs(root: str) -> dict:
    """Every netdev named like a ConnectX-7 port, with its link state and PCI identity."""
    found = {}
    for name in _listdir(os.path.join(root, "sys/class/net")):
        match = NETDEV_NAME.match(name)
        if not match:
            continue
        base = os.path.join(root, "sys/class/net", name)
        mtu = _read(os.path.join(base, "mtu"))
        found[name] = {
            "carrier": _read(os.path.join(base, "carrier")) == "1",
            "operstate": _read(os.path.join(base, "operstate")) or "unknown",
            "mtu": int(mtu) if mtu and mtu.isdigit() else None,
            "port": int(match.group("port")),
            "pci": pci_of(root, name),
            "rdma": None,
        }
    return found


def gid_index(root: str, rdma_dev: str, port: int = 1) -> int | None:
    """The lowest GID index of type RoCE v2 holding an IPv4-mapped address, or None."""
    base = os.path.join(root, "sys/class/infiniband", rdma_dev, "ports", str(port))
    indexes = sorted(int(i) for i in _listdir(os.path.join(base, "gid_attrs/types")) if i.isdigit())
    for index in indexes:
        kind = _read(os.path.join(base, "gid_attrs/types", str(index))) or ""
        gid = _read(os.path.join(base, "gids", str(index))) or ""
        if kind.lower() == "roce v2" and IPV4_MAPPED_GID.match(gid.lower()):
            return index
    return None


def rdma_devices(root: str) -> dict:
    """RDMA devices with the netdev behind each, their port state and GID index."""
    devices = {}
    for dev in _listdir(os.path.join(root, "sys/class/infiniband")):
        netdevs = _listdir(os.path.join(root, "sys/class/infiniband", dev, "device/net"))
        state = _read(os.path.join(root, "sys/class/infiniband", dev, "ports/1/state")) or ""
        devices[dev] = {
            "netdev": netdevs[0] if netdevs else None,
            "active": "ACTIVE" in state.upper(),
            "gid_index": gid_index(root, dev),
        }
    return devices


def _twin_key(pci: dict | None) -> tuple | None:
    return None if pci is None else (pci["bus"], pci["slot"], pci["fn"])


def detect(root: str = "/", twin_pairing: bool = True) -> dict:
    """The fabric as this host sees it. `twins` is ordered domain 0 first."""
    netdevs = cx7_netdevs(root)
    rdma = rdma_devices(root)
    for dev, info in rdma.items():
        if info["netdev"] in netdevs:
            netdevs[info["netdev"]]["rdma"] = dev
    cabled = sorted((n for n, i in netdevs.items() if i["carrier"]), key=lambda n: _sort_key(netdevs[n]))
    problems = []
    if not cabled:
        twins: list[str] = []
        problems.append("no ConnectX-7 port has carrier: check the cable (both nodes on the same port)")
    elif twin_pairing:
        first = cabled[0]
        key = _twin_key(netdevs[first]["pci"])
        group = [n for n in netdevs if key is not None and _twin_key(netdevs[n]["pci"]) == key]
        twins = sorted(group or [first], key=lambda n: _sort_key(netdevs[n]))
        down = [n for n in twins if not netdevs[n]["carrier"]]
        if down:
            problems.append(
                f"twin {', '.join(down)} of {first} has no carrier: the cable or that link is down (reseat the "
                f"cable, and check `ip link show {down[0]}` says UP on both nodes); only a board that wires one "
                "twin of the port (ASUS GX10-style) needs fabric_twin_pairing: false"
            )
            twins = [n for n in twins if netdevs[n]["carrier"]]
    else:
        twins = cabled
    ports = sorted({netdevs[n]["port"] for n in twins})
    hcas = [netdevs[n]["rdma"] for n in twins if netdevs[n]["rdma"] and rdma[netdevs[n]["rdma"]]["active"]]
    gids = [rdma[h]["gid_index"] for h in hcas if rdma[h]["gid_index"] is not None]
    # an old BIOS wires the second ConnectX half at a reduced PCIe width: a twin below its maximum is slower
    pcie = {}
    for name in twins:
        device = os.path.join(root, "sys/class/net", name, "device")
        current, most = _read(os.path.join(device, "current_link_width")), _read(os.path.join(device, "max_link_width"))
        if current and most and current.isdigit() and most.isdigit():
            pcie[name] = {
                "width": int(current),
                "max_width": int(most),
                "speed": _read(os.path.join(device, "current_link_speed")),
                "max_speed": _read(os.path.join(device, "max_link_speed")),
            }
    return {
        "netdevs": netdevs,
        "rdma_devices": rdma,
        "rdma_present": bool(rdma),
        "twins": twins,
        "cabled_ports": ports,
        "hcas": hcas,
        # one index for NCCL: the HCAs agree on a Spark; None means "let NCCL choose" (-1)
        "gid_index": min(gids) if gids else None,
        "pcie": pcie,
        "problems": problems,
    }


def _sort_key(info: dict) -> tuple:
    pci = info["pci"] or {"domain": 99, "bus": 0, "slot": 0, "fn": 0}
    return (pci["domain"], pci["bus"], pci["slot"], pci["fn"])
