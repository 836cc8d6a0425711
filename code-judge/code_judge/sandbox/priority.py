"""CPU priority of a run, changed from outside the sandbox: a run that goes on for long yields to short ones.

Two kernel mechanisms decide how CPU time is shared, and which one applies depends on the host:
- the nice value of each process, which is what counts when processes compete directly;
- the nice value of an *autogroup*: where the kernel has `sched_autogroup_enabled` and the service runs in the
  root CPU cgroup, each session is one scheduling group and the CPU is shared between groups first. Each run is
  a session of its own (the zygote's child calls setsid), so its group can be lowered without lowering the
  zygote, which must wake on time to enforce the wall-clock cap.
Both are changed here. A process killed while at the lowest priority can wait long for the CPU time it needs to
exit, which would delay the verdict past the wall-clock cap, so the supervisor raises a long run back to the
default priority just before its cap: that needs CAP_SYS_NICE (and CAP_SYS_ADMIN, which lifts the kernel's rate
limit on autogroup changes). Without them long runs are not lowered at all.
The program cannot undo its per-process nice (that needs CAP_SYS_NICE); it can reset its autogroup's nice or
start a new session, which is why a long run is lowered again every second. A process that exits meanwhile only
costs fairness, never a result.
"""

from __future__ import annotations

import logging
import os

logger = logging.getLogger(__name__)
CAP_SYS_NICE = 23
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
# What reading /proc/<pid>/... raises for a process that exited meanwhile: before the open, or between open and read.
GONE = (FileNotFoundError, ProcessLookupError)
CAP_SYS_ADMIN = 21


def descendants(pid: int) -> list[int]:
    """Every live process below `pid` (children, grandchildren, ...), read from /proc."""
    found, frontier = [], [pid]
    while frontier:
        parent = frontier.pop()
        try:
            tasks = os.listdir(f"/proc/{parent}/task")
        except GONE:
            continue
        for task in tasks:
            try:
                with open(f"/proc/{parent}/task/{task}/children") as children:
                    kids = [int(kid) for kid in children.read().split()]
            except GONE:
                continue
            found += kids
            frontier += kids
    return found


def run_cpu_seconds(zygote_pid: int) -> float:
    """CPU time of a zygote's run so far: its live processes, with what they used of the children they reaped."""
    ticks = 0
    for pid in descendants(zygote_pid):
        try:
            with open(f"/proc/{pid}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except GONE:
            continue
        ticks += sum(int(value) for value in fields[11:15])  # utime, stime, cutime, cstime
    return ticks / CLOCK_TICKS


def _autogroup(pid: int) -> tuple[str, int] | None:
    """(group name, its nice) from /proc/<pid>/autogroup, e.g. "/autogroup-12 nice 0"; None where unavailable."""
    try:
        with open(f"/proc/{pid}/autogroup") as entry:
            name, _, nice = entry.read().split()
    except (OSError, ValueError):
        return None
    return name, int(nice)


def can_restore_priority() -> bool:
    """Whether this process may raise a lowered priority again (CAP_SYS_NICE) without the kernel's rate limit
    on autogroup changes (CAP_SYS_ADMIN): both are needed to lower a run and raise it again before its cap."""
    with open("/proc/self/status") as status:
        caps = int(next(line.split()[1] for line in status if line.startswith("CapEff:")), 16)
    return bool(caps & (1 << CAP_SYS_NICE)) and bool(caps & (1 << CAP_SYS_ADMIN))


def set_run_priority(zygote_pid: int, nice: int) -> int:
    """Give every process of a zygote's run, and their autogroups, this nice value; return how many processes.

    The zygote itself and its own autogroup keep theirs.
    """
    own_group = _autogroup(zygote_pid)
    groups: dict[str, int] = {}  # group name -> one pid in it, whose file changes the whole group
    changed = 0
    for pid in descendants(zygote_pid):
        try:
            if os.getpriority(os.PRIO_PROCESS, pid) != nice:
                os.setpriority(os.PRIO_PROCESS, pid, nice)
        except (ProcessLookupError, PermissionError):
            continue
        changed += 1
        group = _autogroup(pid)
        if group is not None and group[1] != nice and (own_group is None or group[0] != own_group[0]):
            groups.setdefault(group[0], pid)
    for name, pid in groups.items():
        try:
            with open(f"/proc/{pid}/autogroup", "w") as entry:
                entry.write(str(nice))
        except OSError as error:  # the run ended meanwhile
            logger.debug("could not set the CPU priority of %s: %s", name, error)
    return changed
