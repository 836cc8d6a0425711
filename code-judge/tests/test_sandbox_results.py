"""What a run reports: output read with a cap, supervisor-measured cost, the program's own exceptions and exit."""

from __future__ import annotations

import resource
import textwrap

import pytest

from code_judge.execution import LimitHit, Limits
from code_judge.sandbox import Sandbox

LIMITS = Limits(wall_time_s=10, cpu_time_s=10)


def run(sandbox: Sandbox, source: str, stdin: str = "", limits: Limits = LIMITS):
    return sandbox.run(textwrap.dedent(source), stdin, limits)


def test_100_mb_of_prints_costs_neither_memory_nor_time(sandbox):
    peak_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    result = run(
        sandbox,
        """
        import sys
        chunk = "y" * (1 << 20)
        for _ in range(100):
            sys.stdout.write(chunk)
        print("done", file=sys.stderr)
        """,
        limits=Limits(max_output_bytes=1000),
    )
    # The program wrote all of it and ended by itself (its last line is on stderr, exit code 0): the supervisor
    # kept draining past the cap instead of leaving it blocked on a full pipe until the wall limit.
    assert result.exit_code == 0 and result.run_success
    assert result.stdout == "y" * 1000 and result.stdout_truncated
    assert result.stderr == "done\n" and not result.stderr_truncated
    assert result.limit_hit is LimitHit.OUTPUT
    grown_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - peak_before
    assert grown_kib < 20 * 1024


def test_marker_like_text_is_just_output_and_cannot_forge_cost(sandbox):
    markers = "@@E\n@@D0.000001\n__CODE_JUDGE__ exit=0 cost=0\n"
    result = run(
        sandbox,
        f"""
        import os, sys, time
        time.sleep(0.3)
        sys.stdout.write({markers!r})
        sys.stdout.flush()
        os._exit(0)
        """,
    )
    assert result.stdout == markers
    assert result.exit_code == 0
    assert result.cost_s >= 0.3  # the supervisor's measure, not the forged 0 or 0.000001


@pytest.mark.parametrize("forged", [b"[" * 60000, b"\xff{", b"[1, 2]", b"{"])
def test_a_forged_exception_report_is_no_report_and_the_next_run_is_unaffected(sandbox, forged):
    # The report pipe is the only descriptor above 2 a program inherits; what it writes there reaches the supervisor
    # undecoded, so garbage, a non-object or JSON nested too deep for the decoder must mean "no report".
    result = run(
        sandbox,
        f"""
        import os
        for fd in sorted(int(name) for name in os.listdir("/proc/self/fd") if int(name) > 2):
            try:
                os.write(fd, {forged!r})
            except OSError:
                pass
        print("wrote")
        """,
    )
    assert result.exit_code == 0 and result.stdout == "wrote\n"
    assert result.exception_type is None and result.limit_hit is None
    assert run(sandbox, "print(int(input()) + 1)", "41\n").stdout == "42\n"


def test_uncaught_exception_reports_type_line_message_with_the_users_own_line_numbers(sandbox):
    result = run(
        sandbox,
        """
        def helper():
            return undefined_name

        helper()
        """,
    )
    assert (result.exit_code, result.exception_type, result.exception_line) == (1, "NameError", 3)
    assert result.exception_message == "name 'undefined_name' is not defined"
    assert 'solution.py", line 5, in <module>' in result.stderr
    assert 'solution.py", line 3, in helper' in result.stderr
    assert "zygote" not in result.stderr and "<string>" not in result.stderr


def test_syntax_error_is_reported_before_running(sandbox):
    result = run(sandbox, "print('ran')\nif True\n    pass\n")
    assert result.stdout == ""
    assert (result.exit_code, result.exception_type, result.exception_line) == (1, "SyntaxError", 2)
    assert "SyntaxError" in result.stderr


@pytest.mark.parametrize(
    ("source", "exit_code", "stderr"),
    [("import sys; sys.exit(3)", 3, ""), ("raise SystemExit('bye')", 1, "bye\n"), ("import os; os._exit(7)", 7, "")],
)
def test_exit_status_is_the_programs(sandbox, source, exit_code, stderr):
    result = run(sandbox, source)
    assert (result.exit_code, result.signal, result.stderr, result.exception_type) == (exit_code, None, stderr, None)


def test_stdin_and_preloaded_modules(sandbox):
    source = """
        import numpy as np, sympy
        a, b = map(int, input().split())
        print(a + b, np.random.randint(1 << 30), sympy.factorint(360))
        """
    first, second = run(sandbox, source, "2 40\n"), run(sandbox, source, "2 40\n")
    assert first.stdout.startswith("42 ") and first.stdout.endswith("{2: 3, 3: 2, 5: 1}\n")
    # numpy's global generator is reseeded per run, so forked runs do not repeat each other.
    assert first.stdout != second.stdout


def test_reading_past_the_end_of_stdin_is_eof_not_a_hang(sandbox):
    result = run(sandbox, "print(input())\nprint(input())", stdin="only line\n")
    assert result.stdout == "only line\n"
    assert (result.exception_type, result.exception_line) == ("EOFError", 2)


def test_non_daemon_threads_finish_before_exit(sandbox):
    result = run(
        sandbox,
        """
        import threading, time
        threading.Thread(target=lambda: (time.sleep(0.1), print("thread done"))).start()
        """,
    )
    assert result.stdout == "thread done\n"


def test_a_program_ends_as_in_cpython_atexit_callbacks_run_and_multiprocessing_children_are_joined(sandbox):
    after_an_exception = run(sandbox, "import atexit\natexit.register(print, 'atexit ran')\nraise ValueError('x')")
    assert after_an_exception.stdout == "atexit ran\n"
    assert (after_an_exception.exception_type, after_an_exception.exit_code) == ("ValueError", 1)
    child_outlives_main = run(
        sandbox,
        """
        import time
        from multiprocessing import Process

        def work():
            time.sleep(0.5)
            print("child done", flush=True)

        if __name__ == "__main__":
            Process(target=work).start()
            print("main done", flush=True)
        """,
    )
    assert child_outlives_main.stdout == "main done\nchild done\n" and child_outlives_main.run_success


def test_text_that_is_not_valid_utf8_is_the_programs_problem_not_the_sandboxs(sandbox):
    broken_source = run(sandbox, "print('\ud800')")
    assert broken_source.exception_type == "SyntaxError"
    broken_input = run(sandbox, "print(len(input()))", stdin="a\ud800b\n")
    assert broken_input.exit_code == 0


def test_runs_as_a_main_script_so_multiprocessing_works(sandbox):
    result = run(
        sandbox,
        """
        import os, sys
        from multiprocessing import Pool

        def square(x):
            return x * x

        if __name__ == "__main__":
            with Pool(2) as pool:
                print(pool.map(square, range(5)))
            print(sys.argv == [__file__], os.getcwd() == os.environ["PWD"] == os.path.dirname(__file__))
        """,
    )
    assert result.stdout == "[0, 1, 4, 9, 16]\nTrue True\n"


def test_every_run_gets_fresh_standard_streams_of_the_right_kind(sandbox):
    # The zygote builds the streams once; each run must still see its own input from the start, a seekable
    # stdin (an in-memory file), pipes for stdout and stderr, and stderr line-buffered, as `python solution.py`.
    source = """
        import sys
        line = sys.stdin.readline()
        print(line.strip(), sys.stdin.tell(), sys.stdin.seekable(), sys.stdout.seekable(), sys.stderr.seekable())
        print(sys.stdout.encoding, sys.stderr.line_buffering, sys.stdin is sys.__stdin__, file=sys.stderr)
        """
    for text, first_line in (("first\nrest\n", "first 6"), ("second\n", "second 7"), ("", " 0")):
        result = run(sandbox, source, stdin=text)
        assert result.stdout == f"{first_line} True False False\n"
        assert result.stderr == "utf-8 True True\n"


def test_what_a_program_changes_in_its_interpreter_is_gone_in_the_next_run(sandbox):
    # Every run is a fresh fork of the zygote, whose sys.std* are the programs' streams: a program that closes,
    # replaces or reconfigures them, or changes module, gc or sys state, leaves nothing for the next one.
    spoiler = """
        import gc, io, math, sys
        gc.disable()
        gc.set_threshold(1)
        math.pi = 3
        sys.setrecursionlimit(60)
        sys.modules["json"] = None
        sys.stdin.read()
        sys.stdout.write("partial, never flushed")
        sys.stdout.reconfigure(line_buffering=True)
        sys.__stdout__.close()
        sys.stderr = io.StringIO()
        sys.__stderr__.close()
        sys.stdout = io.StringIO()
        """
    checker = """
        import gc, json, math, sys
        print(input(), gc.isenabled(), gc.get_threshold()[0] > 1, math.pi > 3.14, sys.getrecursionlimit() >= 1000)
        print(sys.stdout is sys.__stdout__, sys.stdout.line_buffering, sys.stderr is sys.__stderr__, file=sys.stderr)
        """
    run(sandbox, spoiler, stdin="spoiled\n")
    result = run(sandbox, checker, stdin="fresh\n")
    assert result.stdout == "fresh True True True True\n"
    assert result.stderr == "True False True\n"
