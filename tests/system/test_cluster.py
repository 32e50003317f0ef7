"""Serving from shards on a real Ray cluster, inside a private network namespace.

The cluster tests themselves are tests/system/cluster_in_netns.py; this runs them inside
`unshare -n -p` (tests/system/netns.py) and checks, from the host, what the namespace must
guarantee: while they run nothing of Ray listens on the host's network, and once they end no
Ray process is left.
"""

from __future__ import annotations

import subprocess
import tempfile
import threading
from pathlib import Path

import pytest

from benchmarks.netns import can_make_namespaces, listeners, run_inside

pytestmark = pytest.mark.slow
INNER = Path(__file__).with_name("cluster_in_netns.py")
RAY_OWNERS = ("raylet", "gcs_server", "ray::", "dashboard", "runtime_env", "ServeRepl", "ServeCont", "ProxyActor")
RAY_PROCESSES = ("raylet", "gcs_server", "ray::", "ServeReplica", "ServeController", "ProxyActor", "default_worker.py")


def ray_processes() -> list[str]:
    out = subprocess.run(["ps", "-eo", "pid,args"], capture_output=True, text=True, check=True).stdout
    return [line for line in out.splitlines()[1:] if any(name in line for name in RAY_PROCESSES)]


def test_the_cluster_tests_pass_inside_a_private_namespace_and_leave_nothing():
    pytest.importorskip("ray", reason="the cluster extra is not installed: pip install 'quarry[cluster]'")
    reason = can_make_namespaces()
    if reason:
        pytest.skip(reason)
    assert ray_processes() == []
    seen_outside: set[str] = set()
    polls, errors = [0], []
    done = threading.Event()

    def watch() -> None:
        while not done.wait(0.5):
            try:
                seen_outside.update(a for a in listeners(owners=True) if any(n in a for n in RAY_OWNERS))
                polls[0] += 1
            except Exception as e:  # noqa: BLE001 - reported below: a watcher that cannot look proves nothing
                errors.append(repr(e))

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        with tempfile.TemporaryDirectory(prefix="qr", dir="/tmp") as ray_tmp:  # short: Ray's socket paths
            result = run_inside([str(INNER), "-s"], timeout_s=1800, tmp=Path(ray_tmp))
    finally:
        done.set()
        watcher.join()
    print(result.stdout[-6000:], result.stderr[-3000:])
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-3000:]
    assert " passed" in result.stdout and " skipped" not in result.stdout
    assert ray_processes() == []  # the pid namespace took every Ray process with it
    assert errors == [] and polls[0] > 10  # the host's listeners were read all along
    assert seen_outside == set()  # Ray's sockets were never in the host's network
