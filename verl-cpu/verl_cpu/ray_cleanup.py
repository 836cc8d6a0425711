"""Stop the Ray processes of one local cluster, found by its temp dir: `python -m verl_cpu.ray_cleanup DIR`.

verl's driver starts a local Ray cluster (`ray.init`, here with `_temp_dir=DIR`) and stops it on a normal
exit. When the driver is killed or crashes, Ray's own processes (gcs_server, raylet, workers, dashboard)
can outlive it. Each of them carries DIR in its command line, so only that cluster's processes are
signalled, by pid: never Ray clusters of other users or other runs.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

GRACE_S = 5.0


def cluster_pids(temp_dir: Path) -> list[int]:
    """Pids (other than this process) whose command line mentions `temp_dir`."""
    needle = str(temp_dir.resolve()).encode()
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if needle in cmdline:
            pids.append(int(entry.name))
    return pids


def stop_cluster(temp_dir: Path) -> int:
    """SIGTERM the cluster's processes, SIGKILL what is left after GRACE_S; returns how many there were."""
    pids = cluster_pids(temp_dir)
    for pid in pids:
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + GRACE_S
    while time.monotonic() < deadline and any(Path(f"/proc/{pid}").exists() for pid in pids):
        time.sleep(0.1)
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return len(pids)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m verl_cpu.ray_cleanup RAY_TEMP_DIR", file=sys.stderr)
        return 2
    count = stop_cluster(Path(args[0]))
    if count:
        print(f"stopped {count} leftover Ray process(es) of {args[0]}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
