"""The reference implementation's tool yaml and executor namespace, against this project's tool.

Its yaml names the judge with `host_addr` / `host_port` (defaults localhost and 8088); its tool calls ran in an
executor script whose namespace held typing's names and the script's own imports, while programs sent straight to
its judge also got math / numpy / sympy when they named them.
"""

from __future__ import annotations

from urllib.parse import urlsplit

import pytest

from cleaner.saar.outcome import ErrorCategory
from cleaner.tools.code_interpreter import CodeInterpreter, CodeInterpreterConfig
from cleaner.tools.judge_client import with_judge_url


@pytest.mark.parametrize(
    ("raw", "url"),
    [
        ({"host_addr": "localhost", "host_port": "8088"}, "http://localhost:8088"),  # the reference yaml: a string
        ({"host_addr": "10.0.0.7", "host_port": 9000}, "http://10.0.0.7:9000"),
        ({"host_port": 8089}, "http://localhost:8089"),
        ({"host_addr": "judge.internal"}, "http://judge.internal:8088"),
        ({"host_addr": "::1", "host_port": "8088"}, "http://[::1]:8088"),
    ],
)
def test_host_addr_and_host_port_name_the_judge(raw, url):
    assert with_judge_url({"type": "native", **raw}) == {"type": "native", "judge_url": url}
    assert CodeInterpreterConfig.from_dict({"type": "native", **raw}).judge.url == url


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"host_addr": "h", "judge_url": "http://h:1"}, "judge_url or as host_addr/host_port, not both"),
        ({"host_port": "80a"}, "host_port must be a port number, got '80a'"),
        ({"host_port": 0}, "host_port must be within 1..65535"),
        ({"host_addr": "http://h"}, "host_addr must be a host name or address"),
        (
            {"request_processor_batch_size": 32, "request_processor_concurrency": 8},
            "request_processor_batch_size -> max_batch_size",
        ),
    ],
)
def test_bad_or_unused_reference_keys_are_named(raw, message):
    with pytest.raises(ValueError, match=message):
        CodeInterpreterConfig.from_dict(raw)


def interpreter(judge_url: str, auto_imports: str) -> CodeInterpreter:
    address = urlsplit(judge_url)
    config = {"host_addr": address.hostname, "host_port": str(address.port), "auto_imports": auto_imports}
    return CodeInterpreter(CodeInterpreterConfig.from_dict(config))


async def test_a_reference_tool_call_namespace_on_the_real_judge(judge_url):
    tool = interpreter(judge_url, "reference")
    text, outcome = await tool.run({"code": "def top(xs: List[int]) -> int:\n    return max(xs)\ntop([3, 9])"}, None)
    assert outcome.is_ok and "stdout: 9" in text
    text, outcome = await tool.run({"code": "x = 2\nmath.sqrt(x)"}, None)
    assert outcome.category is ErrorCategory.EXCEPTION
    assert "NameError at line 2: name 'math' is not defined" in text  # as in a reference tool call


async def test_the_reference_judges_name_triggered_imports_on_the_real_judge(judge_url):
    tool = interpreter(judge_url, "reference_judge")
    text, outcome = await tool.run({"code": "x = symbols('x')\nprint(math.sqrt(16), int(np.arange(4).sum()))"}, None)
    assert outcome.is_ok and "stdout: 4.0 6" in text
    text, _ = await tool.run({"code": "import math\n\nmath.sqrt(-1)"}, None)
    assert "ValueError at line 3: math domain error" in text
