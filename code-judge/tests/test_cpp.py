"""C++ submissions end to end: a real `code-judge serve` compiles them with g++ inside the sandbox and runs them."""

from __future__ import annotations

import httpx
import pytest
from judge_harness import SCHEDULING_SLACK_S, Launcher

TIME_LIMIT_S = 2.0
CLOCK_SKEW_SHARE = 0.01
ADD_TWO_NUMBERS = '#include <iostream>\nint main() { long a, b; std::cin >> a >> b; std::cout << a + b << "\\n"; }\n'


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    launcher = Launcher(tmp_path_factory.mktemp("cpp"))
    # A generous compile limit: g++ takes seconds of wall time when other work loads the machine.
    service = launcher("serve", MAX_WORKERS="1", MAX_EXECUTION_TIME=str(TIME_LIMIT_S), CPP_COMPILE_TIME="60")
    service.wait_http().wait_workers(1)
    with httpx.Client(base_url=service.url, timeout=120) as client:
        yield client
    launcher.stop_all()


def test_cpp_program_reads_stdin_and_is_judged(client):
    body = {"type": "cpp", "solution": ADD_TWO_NUMBERS, "input": "2 40\n", "expected_output": "42"}
    verdict = client.post("/judge", json=body).json()
    assert (verdict["success"], verdict["run_success"], verdict["reason"]) == (True, True, "")
    assert 0 < verdict["cost"] < TIME_LIMIT_S
    wrong = client.post("/run", json={**body, "expected_output": "41"}).json()
    assert (wrong["success"], wrong["run_success"], wrong["stdout"]) == (False, True, "42\n")


def test_cpp_compile_error_answers_like_upstream(client):
    verdict = client.post("/run", json={"type": "cpp", "solution": "int main() { return missing; }"}).json()
    assert (verdict["success"], verdict["run_success"], verdict["reason"]) == (False, False, "")
    assert verdict["stdout"] == "" and verdict["cost"] == 0
    assert "'missing' was not declared" in verdict["stderr"].replace("‘", "'").replace("’", "'")
    assert verdict["exception_type"] == "CompileError"


def test_cpp_infinite_loop_hits_the_time_limit(client):
    source = "int main() { volatile unsigned long n = 0; for (;;) n++; }"
    verdict = client.post("/judge", json={"type": "cpp", "solution": source}).json()
    assert verdict["run_success"] is False and verdict["reason"] in ("worker_timeout", "worker_starved")
    # The CPU-time limit has the same value and can stop the loop first; the kernel counts CPU time on its scheduler
    # clock, which in a VM runs up to a few hundred ppm apart from the monotonic clock the cost is read on, so such a
    # stop can read a millisecond or two under the limit (1.9985 s was seen at 2 s).
    assert TIME_LIMIT_S * (1 - CLOCK_SKEW_SHARE) <= verdict["cost"] < TIME_LIMIT_S + SCHEDULING_SLACK_S


def test_cpp_sleeping_past_the_limit_answers_upstreams_timeout_line(client):
    """Upstream's own C++ timeout test, at this service's limit."""
    source = f'#include <cstdio>\n#include <unistd.h>\nint main(){{sleep({TIME_LIMIT_S:g});printf("a");return 0;}}\n'
    verdict = client.post("/run", json={"type": "cpp", "solution": source, "expected_output": "a"}).json()
    assert (verdict["success"], verdict["run_success"], verdict["reason"]) == (False, False, "worker_timeout")
    assert verdict["stdout"].strip() == "Suicide from timeout."


def test_cpp_memory_bomb_is_stopped_by_the_memory_limit(client):
    source = (
        "#include <vector>\nint main() { std::vector<char*> kept; for (;;) { char* block = new char[1 << 20];\n"
        "for (int i = 0; i < (1 << 20); i += 4096) block[i] = 1; kept.push_back(block); } }\n"
    )
    verdict = client.post("/run", json={"type": "cpp", "solution": source}).json()
    assert (verdict["success"], verdict["run_success"]) == (False, False)
    assert "std::bad_alloc" in verdict["stderr"] and verdict["limit"] == "memory"


def test_cpp_and_python_share_a_long_batch_in_input_order(client):
    submissions = [
        {"type": "cpp", "solution": ADD_TWO_NUMBERS, "input": "1 2", "expected_output": "3"},
        {"type": "python", "solution": "print(input()[::-1])", "input": "abc", "expected_output": "cba"},
        {"type": "cpp", "solution": "int main() { return 3; }"},
    ]
    answer = client.post("/run/long-batch", json={"type": "batch", "submissions": submissions}).json()
    outcomes = [(r["success"], r["exit_code"]) for r in answer["results"]]
    assert outcomes == [(True, 0), (True, 0), (False, 3)]
