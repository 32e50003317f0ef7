"""A Ray cluster for tests and benchmarks, only ever inside a private network namespace.

Ray must never start on the host's network: it rewrites 127.0.0.1 to the host's address and
Serve replicas listen on every interface. So a cluster test (or benchmarks/cluster.py) runs
in two halves:

- the outer test (tests/system/test_cluster.py) runs pytest again on an inner module inside
  `unshare -n -p -f --mount-proc --kill-child`: a network namespace whose only interface is
  `lo`, and a pid namespace whose processes all die with the inner pytest;
- the inner module (tests/system/cluster_in_netns.py) brings `lo` up, refuses to run unless
  `lo` is the only interface, and starts a head and two worker nodes with `ray_cluster`.

The start follows what made Ray 2.60 reliable on a busy machine (../shared/STACK_NOTES.md):
fixed agent ports per node, no dashboard, a long agent registration timeout, a short
RAY_TMPDIR, no usage statistics.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import socket
import struct
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

INSIDE = "QUARRY_IN_PRIVATE_NETNS"
SIOCGIFFLAGS, SIOCSIFFLAGS, IFF_UP, IFF_RUNNING = 0x8913, 0x8914, 0x1, 0x40
RAY_ENV = {"RAY_USAGE_STATS_ENABLED": "0", "RAY_agent_register_timeout_ms": "300000", "RAY_DEDUP_LOGS": "0"}


def can_make_namespaces() -> str | None:
    """Why this machine cannot run the cluster tests, or None."""
    if shutil.which("unshare") is None:
        return "util-linux's unshare is missing"
    probe = subprocess.run(["unshare", "-n", "-p", "-f", "--mount-proc", "true"], capture_output=True, text=True)
    return None if probe.returncode == 0 else f"unshare -n -p cannot run here: {probe.stderr.strip()}"


def inside_command(argv: list[str], tmp: Path) -> tuple[list[str], dict[str, str]]:
    """The command line and environment that run `python ARGV` in a new network and pid
    namespace (its processes die with it)."""
    env = dict(os.environ, **RAY_ENV, **{INSIDE: "1", "RAY_TMPDIR": str(tmp)})
    return ["unshare", "-n", "-p", "-f", "--mount-proc", "--kill-child", sys.executable, *argv], env


def run_inside(args: list[str], timeout_s: float, tmp: Path) -> subprocess.CompletedProcess[str]:
    """`python -m pytest ARGS` inside a private namespace (`inside_command`)."""
    command, env = inside_command(["-m", "pytest", "-x", "-p", "no:cacheprovider", *args], tmp)
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout_s, env=env)


def interfaces() -> list[str]:
    """This network namespace's interfaces (asked of the kernel: /sys shows the mounting one's)."""
    return sorted(name for _, name in socket.if_nameindex())


def lo_up() -> None:
    """Bring the namespace's loopback up (a new namespace has it down)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        flags = struct.unpack("16sH", fcntl.ioctl(s, SIOCGIFFLAGS, struct.pack("16sH", b"lo", 0)))[1]
        fcntl.ioctl(s, SIOCSIFFLAGS, struct.pack("16sH", b"lo", flags | IFF_UP | IFF_RUNNING))


def listeners(owners: bool = False) -> list[str]:
    """Every listening TCP address in this namespace (`ss -ltnH`), with its owning processes
    (`ss -p`) when `owners`."""
    out = subprocess.run(["ss", "-ltnpH" if owners else "-ltnH"], capture_output=True, text=True, check=True).stdout
    return [" ".join([line.split()[3], *line.split()[5:]]) if owners else line.split()[3]
            for line in out.splitlines() if line.strip()]


def _ports(base: int) -> dict[str, int]:
    return {"metrics_agent_port": base, "metrics_export_port": base + 1, "dashboard_agent_listen_port": base + 2,
            "runtime_env_agent_port": base + 3}


@contextmanager
def ray_cluster(workers: int = 2) -> Iterator[object]:
    """A head and `workers` worker nodes (1 CPU each, a `node-i` resource each), connected;
    shut down, Serve first, when the block ends. Only inside a private namespace."""
    if os.environ.get(INSIDE) != "1" or interfaces() != ["lo"]:
        raise RuntimeError("a Ray cluster starts only inside the private network namespace a test made")
    import ray
    from ray import serve
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False,
                                                            "resources": {"node-0": 1}, **_ports(20100)})
    try:
        for i in range(1, workers + 1):
            cluster.add_node(num_cpus=1, resources={f"node-{i}": 1}, **_ports(20100 + 10 * i))
        ray.init(address=cluster.address, log_to_driver=False)
        cluster.wait_for_nodes()
        serve.start(http_options={"host": "127.0.0.1", "port": 18000})
        yield cluster
    finally:
        try:
            if ray.is_initialized():  # else serve.shutdown() would start a Ray of its own
                serve.shutdown()
        finally:
            ray.shutdown()
            cluster.shutdown()
