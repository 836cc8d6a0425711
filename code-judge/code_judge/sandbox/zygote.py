"""The warm interpreter that lives inside the sandbox and forks one child per program.

This file is executed by the sandbox's own Python (`python3 -I -c <this source> <config json>`), so it
uses the standard library only and never imports `code_judge`. The supervisor talks to it over one
SOCK_SEQPACKET socket: a request is a small fixed-layout message (REQUEST) carrying four file descriptors (source,
stdin, stdout, stderr); the reply is a fixed-layout message (REPLY) with what the zygote measured, followed by the
child's report as it wrote it. Only the start-up message is JSON: per run, json's encoder and decoder would dirty
(and so, after every fork, copy) ~70 of the zygote's pages.

What the zygote measures (exit status, signal, wall time, CPU time, timeouts) comes from the kernel via
wait4, never from the program. Only the `report` (exception type/line/message) is written by the forked
child itself, so a program can misreport its own exception, just as it can raise any exception it likes.
"""

import _signal
import atexit
import ctypes
import gc
import importlib
import json
import math
import os
import resource
import select
import signal
import socket
import struct
import sys
import time
import traceback
import types

PR_SET_DUMPABLE = 4
PR_SET_CHILD_SUBREAPER = 36
MADV_COLLAPSE = 25
HUGE_PAGE = 2 << 20
MAX_REQUEST_BYTES = 65536
MAX_REPORT_BYTES = 65536
MAX_MESSAGE_CHARS = 1000
MAX_CLEANUP_ENTRIES = 10_000
# wait_for_exit: waits longer than this end early by this share, so their slack cannot pass the deadline.
PRECISE_WAIT_S = 0.05
EARLY_WAKE_SHARE = 0.98
SOURCE_NAME = "solution.py"
ISOLATED_WORKDIR = "/tmp/run"
WORKDIR_VARIABLES = ("HOME", "TMPDIR", "PWD")
# The child's stdout/stderr/stdin are rebuilt on these descriptors.
STDIN_FD, STDOUT_FD, STDERR_FD = 0, 1, 2
SIGINT = int(signal.SIGINT)
# wall_time_s, cpu_time_s, address_space_bytes, max_processes, max_file_size_bytes.
REQUEST = struct.Struct("<ddqqq")
# retire, exit_code (-1: none), signal (0: none), cost_s, cpu_s, total_cpu_s, cpu_wait_s (NaN: unknown), timed_out,
# strays; the child's report (JSON it wrote itself, possibly empty) follows.
REPLY = struct.Struct("<?iidddd?q")


LIBC = ctypes.CDLL(None, use_errno=True)


def prctl(option: int, value: int) -> None:
    if LIBC.prctl(option, value, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), f"prctl({option}, {value}) failed")


def warm_up_sympy() -> None:
    """Exercise common sympy entry points once, so the submodules they import lazily are already loaded.

    Measured cold in a fresh child, the first `solve` cost ~100 ms and the first `simplify` ~400 ms of lazy
    imports and one-time set-up; after this warm-up, ~45 and ~50 ms.
    The expression cache is cleared afterwards so no results carry over into programs.
    """
    import sympy as sp

    x, y = sp.symbols("x y")
    sp.solve([x + y - 2, x - y], [x, y])
    sp.solve(x**2 - 1, x)
    sp.integrate(x**2 * sp.sin(x), x)
    sp.diff(sp.exp(x) * x, x)
    sp.simplify(sp.sin(x) ** 2 + sp.cos(x) ** 2)
    sp.factor(x**2 - 1)
    sp.expand((x + 1) ** 3)
    sp.limit(sp.sin(x) / x, x, 0)
    sp.series(sp.exp(x), x, 0, 3)
    sp.nsimplify(0.5)
    sp.Matrix([[1, 2], [3, 4]]).inv()
    sp.factorint(1001)
    sp.isprime(97)
    sp.N(sp.pi, 30)
    sp.core.cache.clear_cache()


def build_standard_streams() -> tuple:
    """The program's sys.stdin, stdout and stderr, built once here so that no child pays for it (~90 page copies).

    They are built on descriptors 0-2 while those are of the kinds a program gets (stdin an in-memory file,
    stdout and stderr pipes), because the streams record what they learn at creation (seekable, block size). A
    child only puts its own descriptors under them. Our own descriptors 0-2 are restored afterwards.
    """
    saved = [os.dup(fd) for fd in (STDIN_FD, STDOUT_FD, STDERR_FD)]
    stdin = os.memfd_create("stdin", os.MFD_CLOEXEC)
    read_end, write_end = os.pipe()
    try:
        os.dup2(stdin, STDIN_FD)
        os.dup2(write_end, STDOUT_FD)
        os.dup2(write_end, STDERR_FD)
        return (
            open(STDIN_FD, encoding="utf-8", errors="replace", closefd=False),
            open(STDOUT_FD, "w", encoding="utf-8", errors="backslashreplace", closefd=False),
            open(STDERR_FD, "w", encoding="utf-8", errors="backslashreplace", closefd=False, buffering=1),
        )
    finally:
        for fd, copy in zip((STDIN_FD, STDOUT_FD, STDERR_FD), saved):
            os.dup2(copy, fd)
            os.close(copy)
        for fd in (stdin, read_end, write_end):
            os.close(fd)


def collapse_heap_into_huge_pages() -> int:
    """Back the preloaded heap with 2 MiB pages where possible; return how many bytes were collapsed.

    fork() copies one page-table entry per 4 KiB page and the child's exit frees them again, so with sympy loaded
    (~50 MB of heap) that is most of a run's cost. A collapsed 2 MiB range is one entry to copy; a write to it
    after fork splits only that range. MADV_COLLAPSE needs Linux 6.1; elsewhere it fails and nothing changes,
    which only costs speed.
    """
    LIBC.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    collapsed = 0
    with open("/proc/self/maps") as maps:
        regions = [line.split() for line in maps]
    for fields in regions:
        low, high = (int(bound, 16) for bound in fields[0].split("-"))
        private_writable = fields[1].startswith("rw") and fields[1][3] == "p"
        anonymous = len(fields) < 6 or fields[5] == "[heap]"
        start, end = (low + HUGE_PAGE - 1) & ~(HUGE_PAGE - 1), high & ~(HUGE_PAGE - 1)
        if private_writable and anonymous and end > start and LIBC.madvise(start, end - start, MADV_COLLAPSE) == 0:
            collapsed += end - start
    return collapsed


def loaded_packages() -> list:
    """Top-level names of the loaded modules that are not part of the standard library (numpy, sympy, mpmath...)."""
    return sorted({name.partition(".")[0] for name in sys.modules} - set(sys.stdlib_module_names))


def vm_size_bytes() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("VmSize missing from /proc/self/status")


def rlimits_for(cpu_time_s: float, address_space_bytes: int, max_processes: int, max_file_size_bytes: int) -> tuple:
    """The run's limits as (resource, (soft, hard)) pairs."""
    # soft == hard: an unprivileged program cannot raise a hard limit, so it cannot lift these.
    cpu = max(1, math.ceil(cpu_time_s))
    return (
        # Set by the supervisor: the program's budget on top of what the largest zygote maps before any program.
        (resource.RLIMIT_AS, (address_space_bytes,) * 2),
        # SIGXCPU at the soft limit, SIGKILL one second later for a program that ignores SIGXCPU.
        (resource.RLIMIT_CPU, (cpu, cpu + 1)),
        (resource.RLIMIT_NPROC, (max_processes,) * 2),
        (resource.RLIMIT_FSIZE, (max_file_size_bytes,) * 2),
        (resource.RLIMIT_CORE, (0, 0)),
    )


class Zygote:
    def __init__(self, config: dict):
        self.isolated = config["mode"] == "bwrap"
        self.control_fd = config["control_fd"]
        self.sock = socket.socket(fileno=self.control_fd)
        self.scratch_dirs = config["scratch_dirs"]
        if self.isolated and os.getpid() != 1:
            # kill(-1) below would reach the whole host if we were not the pid namespace's init.
            raise RuntimeError(f"bwrap mode needs the zygote as pid 1 of its namespace, got pid {os.getpid()}")
        # Non-dumpable: programs running as the same uid can neither ptrace us nor open /proc/1/{mem,fd,environ}.
        prctl(PR_SET_DUMPABLE, 0)
        if not self.isolated:
            # Orphans of a program re-parent to us, so we can find and kill every process it started.
            prctl(PR_SET_CHILD_SUBREAPER, 1)
        # As pid 1 we only receive signals we handle; Python's SIGINT handler would let programs interrupt us.
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        for name in config["preload"]:
            importlib.import_module(name)
        if config["warm_up"] and "sympy" in config["preload"]:
            warm_up_sympy()
        # The first compile() in a process builds the compiler's AST types: ~0.8 ms that every child would repeat.
        compile("pass", SOURCE_NAME, "exec", dont_inherit=True)
        # Installed here, once: replacing sys.std* in a child freed the zygote's own streams there (their
        # finalizers and the objects they release), ~45 page copies per run. The zygote's own messages go through
        # them to its descriptors 0-2 too, which are under them whenever no child is being prepared.
        streams = build_standard_streams()
        sys.stdin, sys.stdout, sys.stderr = streams
        sys.__stdin__, sys.__stdout__, sys.__stderr__ = streams
        if self.isolated:
            # Every run's directory is the same fresh /tmp/run (see make_workdir), so set its variables once here.
            for name in WORKDIR_VARIABLES:
                os.environ[name] = ISOLATED_WORKDIR
        reseed_preloaded_generators()
        # Move every preloaded object out of the collector's reach: otherwise the first full collection in a
        # child walks (and so copies, page by page) the whole inherited heap, ~40 ms with sympy loaded.
        gc.freeze()
        self.huge_bytes = collapse_heap_into_huge_pages()
        self.base_vm_bytes = vm_size_bytes()

    def serve(self) -> None:
        ready = {
            "ready": True,
            "base_vm_bytes": self.base_vm_bytes,
            "packages": loaded_packages(),
            "huge_bytes": self.huge_bytes,
            "python": sys.version.split()[0],
        }
        self.sock.send(json.dumps(ready).encode())
        while True:
            message, fds, _, _ = socket.recv_fds(self.sock, MAX_REQUEST_BYTES, 4)
            if not message:
                return
            reply, retire = self.run(REQUEST.unpack(message), fds)
            self.sock.send(reply)
            if retire:
                return
            # For the next child, done here rather than in it: the last child has exited, so these pages are ours
            # alone again and cheap to write, whereas the child would copy each one it touches. After the reply,
            # so the verdict does not wait for it.
            reseed_preloaded_generators()

    def run(self, request: tuple, fds: list) -> tuple:
        """Run one program; return the reply and whether this zygote must retire."""
        wall_time_s, *limits = request
        workdir = self.make_workdir()
        # Worked out here rather than in the child, where every object built costs page copies.
        rlimits = rlimits_for(*limits)
        source_path = os.path.join(workdir, SOURCE_NAME)
        report_read, report_write = os.pipe()
        cpu_before = children_cpu_seconds()
        started = time.monotonic()
        pid = os.fork()
        if pid == 0:
            os.close(report_read)
            # Raw closes and calls in the child from here on: each Python object it touches dirties (and so
            # copies) a shared page, e.g. socket.close() ~20 pages, signal.signal() ~40.
            os.close(self.control_fd)
            run_child(rlimits, workdir, source_path, fds, report_write)
        for fd in fds:
            os.close(fd)
        os.close(report_write)
        # The cap runs from the fork, not from here: a zygote descheduled after the fork must not give the program
        # extra time (a program sleeping exactly the limit then finished first on a loaded machine).
        exited = wait_for_exit(pid, started + wall_time_s)
        cpu_wait_s = None
        if not exited:
            # Read before the kill: once the processes are gone, so is their scheduler record.
            cpu_wait_s = self.cpu_wait_seconds()
            self.signal_everything()
        _, status, usage = os.wait4(pid, 0)
        cost_s = time.monotonic() - started
        # A run whose measured wall time reached the cap is a timeout even if the program exited before we saw the
        # deadline pass: a verdict never says a program ran for the limit or longer and succeeded.
        timed_out = not exited or cost_s >= wall_time_s
        strays = self.kill_everything()
        report = read_report(report_read)
        retire = not self.wipe(workdir)
        reply = REPLY.pack(
            retire,
            os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else -1,
            os.WTERMSIG(status) if os.WIFSIGNALED(status) else 0,
            cost_s,
            usage.ru_utime + usage.ru_stime,
            # Every process of the run has been reaped by now (by us: we are their init or subreaper).
            children_cpu_seconds() - cpu_before,
            math.nan if cpu_wait_s is None else cpu_wait_s,
            timed_out,
            strays,
        )
        return reply + report, retire

    def cpu_wait_seconds(self):
        """Seconds the run's live processes spent runnable but waiting for a CPU, or None where unknown."""
        pids = list_namespace_processes() if self.isolated else list_descendants()
        total = 0
        for pid in pids:
            try:
                # Fields: time on a CPU, time waiting on a run queue (both ns), time slices.
                total += int(read_all(os.open(f"/proc/{pid}/schedstat", os.O_RDONLY)).split()[1])
            except (FileNotFoundError, ProcessLookupError):
                continue  # exited meanwhile
            except (OSError, IndexError, ValueError):
                return None  # a kernel without scheduler statistics
        return total / 1e9

    def make_workdir(self) -> str:
        if self.isolated:
            # /tmp is this sandbox's private tmpfs, emptied after every run, so a fixed path is fresh each time
            # and tracebacks are identical across runs.
            os.mkdir(ISOLATED_WORKDIR, 0o700)
            return ISOLATED_WORKDIR
        # Not tempfile.mkdtemp: importing tempfile loads `random`, whose at-fork reseed every child would pay.
        path = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"code-judge-run-{os.urandom(8).hex()}")
        os.mkdir(path, 0o700)
        return path

    def kill_everything(self) -> int:
        """SIGKILL every process the program left behind and reap them all; return how many there were."""
        killed = 0
        while True:
            self.signal_everything()
            reaped, children_left = reap_exited()
            killed += reaped
            if not children_left:
                return killed
            if not reaped:
                # SIGKILLed processes can take a moment to exit (e.g. unmapping a large heap).
                time.sleep(0.001)

    def signal_everything(self) -> None:
        if self.isolated:
            # We are pid 1: kill(-1) reaches every other process in the namespace, i.e. only the program's.
            try:
                os.kill(-1, signal.SIGKILL)
            except ProcessLookupError:
                pass
            return
        # Insecure mode shares the host's pid namespace, so walk our own process tree instead.
        for pid in list_descendants():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def wipe(self, workdir: str) -> bool:
        """Delete everything the run wrote; False if something resisted and this zygote must be retired."""
        try:
            if not self.isolated:
                empty_directory(workdir)
                os.rmdir(workdir)
                return True
            remove_sysv_ipc_objects()
            for scratch in self.scratch_dirs:
                empty_directory(scratch)
        except (OSError, TooMuchToClean) as error:
            # E.g. a directory nested deeper than PATH_MAX. A fresh sandbox starts with fresh scratch space.
            print(f"zygote retiring: cannot clean up after a run: {error}", file=sys.stderr, flush=True)
            return False
        return True


class TooMuchToClean(Exception):
    """The run left more entries than a quick clean-up can remove; a fresh sandbox is cheaper."""


def empty_directory(top: str) -> None:
    """Remove everything under `top`, including directories the program made unreadable (it owns them)."""
    pending, emptied, removed = [top], [], 0
    while pending:
        directory = pending.pop()
        os.chmod(directory, 0o700)
        emptied.append(directory)
        for entry in os.scandir(directory):
            removed += 1
            if removed > MAX_CLEANUP_ENTRIES:
                # The verdict waits for this clean-up, so it must stay short whatever the program left.
                raise TooMuchToClean(f"more than {MAX_CLEANUP_ENTRIES} files and directories left behind")
            if entry.is_dir(follow_symlinks=False):
                pending.append(entry.path)
            else:
                os.unlink(entry.path)
    # Deepest first, so every directory is empty when it is removed.
    for directory in reversed(emptied[1:]):
        os.rmdir(directory)


def remove_sysv_ipc_objects() -> None:
    """Delete the shared memory, semaphores and message queues a program left in this sandbox's IPC namespace."""
    for kind, remove in SYSV_IPC_REMOVERS.items():
        # Raw reads: this runs after every program, and three text-mode open()s cost ~0.15 ms of page faults.
        rows = read_all(os.open(f"/proc/sysvipc/{kind}", os.O_RDONLY | os.O_CLOEXEC)).splitlines()[1:]
        for ipc_id in [int(row.split()[1]) for row in rows]:
            if remove(ipc_id) != 0:
                raise OSError(ctypes.get_errno(), f"cannot remove SysV {kind} {ipc_id}")


IPC_RMID = 0
SYSV_IPC_REMOVERS = {
    "shm": lambda ipc_id: LIBC.shmctl(ipc_id, IPC_RMID, None),
    "sem": lambda ipc_id: LIBC.semctl(ipc_id, 0, IPC_RMID),
    "msg": lambda ipc_id: LIBC.msgctl(ipc_id, IPC_RMID, None),
}


def wait_for_exit(pid: int, deadline: float) -> bool:
    """Wait until the child exits or the `time.monotonic()` deadline passes; True when it exited.

    The kernel lets `select` wake up to 0.1 % of its timeout late (10 ms at a 10 s cap), time enough for a program
    that sleeps exactly the limit to finish first. So the wait goes in steps that end before the deadline and
    shrink toward it, and the last one, shorter than PRECISE_WAIT_S, is late by at most the timer slack (50 us).
    """
    pidfd = os.pidfd_open(pid)
    try:
        while True:
            remaining = deadline - time.monotonic()
            step = remaining if remaining < PRECISE_WAIT_S else remaining * EARLY_WAKE_SHARE
            if select.select([pidfd], [], [], max(0.0, step))[0]:
                return True
            if remaining <= 0:
                return False
    finally:
        os.close(pidfd)


def reap_exited() -> tuple:
    """Reap every exited child without blocking; return (how many, whether live children remain)."""
    reaped = 0
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return reaped, False
        if pid == 0:
            return reaped, True
        reaped += 1


def children_cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def list_namespace_processes() -> list:
    """Every process of this pid namespace but its init (us)."""
    return [int(name) for name in os.listdir("/proc") if name.isdigit() and name != "1"]


def list_descendants() -> list:
    found, frontier = [], [os.getpid()]
    while frontier:
        pid = frontier.pop()
        for task in list_dir(f"/proc/{pid}/task"):
            try:
                with open(f"/proc/{pid}/task/{task}/children") as children:
                    kids = [int(kid) for kid in children.read().split()]
            except (FileNotFoundError, ProcessLookupError):
                continue  # exited meanwhile
            found.extend(kids)
            frontier.extend(kids)
    return found


def list_dir(path: str) -> list:
    try:
        return os.listdir(path)
    except FileNotFoundError:
        return []


def read_report(fd: int) -> bytes:
    """What the child wrote to its report pipe (JSON, or nothing), passed on undecoded to the supervisor."""
    chunks, size = [], 0
    while size < MAX_REPORT_BYTES:
        chunk = os.read(fd, MAX_REPORT_BYTES - size)
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    os.close(fd)
    return b"".join(chunks)


def reseed_preloaded_generators() -> None:
    # `random` reseeds itself after fork; numpy's global generator does not, so every run would repeat it. The
    # zygote reseeds it at start-up and after each run instead. A 32-bit seed is far cheaper than numpy's default entropy
    # gathering and plenty for programs' sampling.
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        numpy.random.seed(int.from_bytes(os.urandom(4), "little"))


def read_all(fd: int) -> bytes:
    """Read `fd` to its end and close it."""
    try:
        # Sized from the file (0 for /proc files): a fixed large read would allocate, and fault in, a big buffer.
        data = os.read(fd, os.fstat(fd).st_size or 4096)
        chunks = [data]
        while data:
            data = os.read(fd, 1 << 20)
            chunks.append(data)
    finally:
        os.close(fd)
    return b"".join(chunks)


# ----- everything below runs in the forked child, as the program -----


def run_child(rlimits: tuple, workdir: str, source_path: str, fds: list, report_fd: int) -> None:
    """Become the program; never returns. A failure before the program starts is reported as `setup_error`."""
    try:
        source = prepare_child(rlimits, workdir, source_path, fds)
    except BaseException as error:  # noqa: BLE001 - the supervisor turns this into an infrastructure error
        write_report(report_fd, {"setup_error": f"{type(error).__name__}: {error}"[:MAX_MESSAGE_CHARS]})
        os._exit(1)
    os._exit(execute(source, source_path, report_fd))


def prepare_child(rlimits: tuple, workdir: str, source_path: str, fds: list) -> bytes:
    """Turn the fresh fork into the program's process; return the program's source."""
    source_fd, stdin_fd, stdout_fd, stderr_fd = fds
    # A session of its own: where the kernel groups sessions for CPU sharing (autogroup), each run is one group,
    # so the supervisor can lower a long run's priority without lowering ours, and a run's share does not grow
    # with the number of processes it starts.
    os.setsid()
    os.dup2(stdin_fd, STDIN_FD)
    os.dup2(stdout_fd, STDOUT_FD)
    os.dup2(stderr_fd, STDERR_FD)
    os.close(stdin_fd)
    os.close(stdout_fd)
    os.close(stderr_fd)
    _signal.signal(SIGINT, signal.default_int_handler)
    # The program is an ordinary process again (own /proc/self, ptrace of its own children); we stay protected.
    prctl(PR_SET_DUMPABLE, 1)
    # Under memory pressure the kernel should kill a program, not the zygote.
    oom_fd = os.open("/proc/self/oom_score_adj", os.O_WRONLY)
    os.write(oom_fd, b"1000")
    os.close(oom_fd)
    for kind, limit in rlimits:
        resource.setrlimit(kind, limit)
    source = read_all(source_fd)
    write_file(source_path, source)
    os.chdir(workdir)
    # In bwrap mode every run's directory is the same, and the zygote set these once.
    if workdir != ISOLATED_WORKDIR:
        for name in WORKDIR_VARIABLES:
            os.environ[name] = workdir
    # sys.std* are already the program's streams (build_standard_streams), now on this run's descriptors.
    return source


def write_file(path: str, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        written = os.write(fd, data)
        if written < len(data):
            view = memoryview(data)[written:]
            while view:
                view = view[os.write(fd, view) :]
    finally:
        os.close(fd)


def execute(source: bytes, path: str, report_fd: int) -> int:
    """Run the program as `python solution.py` would and return its exit status."""
    main = types.ModuleType("__main__")
    main.__file__ = path
    main.__builtins__ = __builtins__
    sys.modules["__main__"] = main
    sys.argv = [path]
    sys.path.insert(0, os.path.dirname(path))
    try:
        code = compile(source, path, "exec", dont_inherit=True)
        exec(code, main.__dict__)
        status = 0
    except SystemExit as exit_request:
        status = exit_status(exit_request)
    except BaseException as error:  # noqa: BLE001 - any uncaught exception is the program's result
        report_exception(error, path, report_fd)
        status = 1
    finish_like_the_interpreter()
    return flush_streams(status)


def finish_like_the_interpreter() -> None:
    """What CPython does when a program ends, however it ended, and os._exit would skip.

    It waits for non-daemon threads, then runs the atexit callbacks, among them the one with which
    `multiprocessing` joins the non-daemon processes the program started.
    """
    join_foreground_threads()
    if atexit._ncallbacks():
        # Prints and ignores an exception of a callback, as the interpreter does.
        atexit._run_exitfuncs()


def join_foreground_threads() -> None:
    # The interpreter waits for non-daemon threads before exiting; os._exit would not, so wait here. Only a
    # loaded `threading` can have started them; the zygote does not import it itself, because its at-fork
    # handler costs every child ~0.35 ms.
    threading = sys.modules.get("threading")
    if threading is None:
        return
    for thread in threading.enumerate():
        if thread is not threading.current_thread() and not thread.daemon:
            thread.join()


def exit_status(exit_request: SystemExit) -> int:
    code = exit_request.code
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


def report_exception(error: BaseException, path: str, report_fd: int) -> None:
    # Hide the zygote's own frame (the `exec` call) so the traceback starts in the user's code.
    traceback_ = error.__traceback__.tb_next if error.__traceback__ is not None else None
    error.__traceback__ = traceback_
    line = None
    if isinstance(error, SyntaxError) and error.filename == path:
        line = error.lineno
    frame = traceback_
    while frame is not None:
        if frame.tb_frame.f_code.co_filename == path:
            line = frame.tb_lineno
        frame = frame.tb_next
    report = {
        "type": type(error).__name__,
        "line": line,
        "message": str(error)[:MAX_MESSAGE_CHARS],
        "memory_error": isinstance(error, MemoryError),
        "errno": getattr(error, "errno", None) if isinstance(error, OSError) else None,
    }
    try:
        sys.excepthook(type(error), error, traceback_)
    except BaseException:  # noqa: BLE001 - a broken user excepthook must not hide the report
        traceback.print_exception(type(error), error, traceback_, file=sys.__stderr__)
    write_report(report_fd, report)


def write_report(report_fd: int, report: dict) -> None:
    try:
        os.write(report_fd, json.dumps(report).encode())
    except OSError:
        # The program closed the descriptor itself; its exit status still tells the supervisor it failed.
        pass


def flush_streams(status: int) -> int:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            # Closed or broken stream (the program closed it or the reader went away): Python ends with 120.
            status = status or 120
    return status


if __name__ == "__main__":
    zygote = Zygote(json.loads(sys.argv[1]))
    zygote.serve()
