"""`code_interpreter` end to end against the real code-judge service (loopback, embedded redis)."""

from __future__ import annotations

import asyncio
import socket

import pytest

from cleaner.resources import TOOL_CONFIG, resource_path
from cleaner.saar.outcome import TOOL_OUTCOME_KEY, ErrorCategory, OutcomeKind, ToolOutcome
from cleaner.tools.judge_client import JudgeClientConfig, shared_judge_client
from cleaner.verl.code_interpreter_tool import CodeInterpreterTool

TOOL_YAML = resource_path(TOOL_CONFIG)


def make_tool(url: str, **config) -> CodeInterpreterTool:
    return CodeInterpreterTool({"type": "native", "judge_url": url, "backoff_s": 0.01, **config})


async def call(tool: CodeInterpreterTool, parameters, **kwargs) -> tuple[str, ToolOutcome]:
    instance_id, _ = await tool.create()
    try:
        response, reward, metrics = await tool.execute(instance_id, parameters, **kwargs)
    finally:
        await tool.release(instance_id)
    assert reward == 0.0
    return response.text, ToolOutcome.from_dict(metrics[TOOL_OUTCOME_KEY])


async def test_success_shows_stdout_and_echoes_the_last_expression(judge_url):
    tool = make_tool(judge_url)
    text, outcome = await call(tool, {"code": "import math\nprint('hi')\nx = math.factorial(5)\nx + 1"})
    assert outcome.is_ok
    assert text == "Tool call success\nstdout: hi\n121\n\nstderr: "


async def test_name_error_is_reported_at_the_models_line(judge_url):
    tool = make_tool(judge_url)
    client = shared_judge_client(tool.settings.judge)
    requests_before = client.stats.http_requests
    text, outcome = await call(tool, {"code": "a = 1\nprint(a)\nprint(b)\n"})
    assert client.stats.http_requests - requests_before == 1  # a model error is never retried
    assert (outcome.kind, outcome.category, outcome.exception_type) == (
        OutcomeKind.MODEL_ERROR,
        ErrorCategory.EXCEPTION,
        "NameError",
    )
    assert text == (
        "Tool call failure\nreason: \nstdout: 1\n\nstderr: NameError at line 3: name 'b' is not defined\n    print(b)"
    )


async def test_syntax_error(judge_url):
    text, outcome = await call(make_tool(judge_url), {"code": "x = 1\nif x > 0\n    print(x)"})
    assert outcome.category is ErrorCategory.SYNTAX_ERROR
    assert outcome.exception_type == "SyntaxError"
    assert "SyntaxError at line 2: " in text and "    if x > 0" in text


async def test_nonzero_exit_without_exception(judge_url):
    text, outcome = await call(make_tool(judge_url), {"code": "import sys\nprint('partial')\nsys.exit(3)"})
    assert outcome.category is ErrorCategory.NONZERO_EXIT
    assert text.endswith("stdout: partial\n\nstderr: The process exited with code 3")


async def test_timeout_is_a_model_error(judge_url):
    # Sleeping (not spinning) keeps the shared CI cores free while the judge's wall-time limit fires.
    text, outcome = await call(
        make_tool(judge_url), {"code": "import time\nprint('started', flush=True)\ntime.sleep(120)"}
    )
    assert (outcome.kind, outcome.category) == (OutcomeKind.MODEL_ERROR, ErrorCategory.TIMEOUT)
    assert text.startswith("Tool call failure\nreason: worker_timeout\nstdout: started\n")


async def test_memory_limit_is_a_model_error(judge_url):
    text, outcome = await call(make_tool(judge_url), {"code": "x = 1\nblock = bytearray(8 * 1024 ** 3)"})
    assert (outcome.category, outcome.exception_type) == (ErrorCategory.MEMORY_LIMIT, "MemoryError")
    assert "MemoryError at line 2" in text


@pytest.mark.parametrize(
    ("parameters", "message"),
    [
        ({"cmd": "print(1)"}, "needs the argument `code`"),
        ({}, "needs the argument `code`"),
        ({"code": "   "}, "`code` is empty"),
        ({"code": 5}, "must be a string"),
        ({"code": "print(1)", "lang": "py"}, "remove: ['lang']"),
        (["print(1)"], "expects a JSON object"),
    ],
)
async def test_malformed_calls_are_bad_call_model_errors(parameters, message):
    tool = make_tool("http://127.0.0.1:9")  # never contacted
    text, outcome = await call(tool, parameters)
    assert (outcome.kind, outcome.category) == (OutcomeKind.MODEL_ERROR, ErrorCategory.BAD_CALL)
    assert text.startswith("Tool call failure\nreason: tool_call_format_error\n") and message in text


async def test_outage_is_an_infra_error_with_a_neutral_text():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    tool = make_tool(url, max_retries=1)
    text, outcome = await call(tool, {"code": "print(1)"})
    assert (outcome.kind, outcome.category) == (OutcomeKind.INFRA_ERROR, ErrorCategory.JUDGE_UNREACHABLE)
    assert "execution service unavailable" in text and "NameError" not in text


class Trajectory:
    """Stands in for verl's AgentData: the stateful tool keys a trajectory's cells on this object."""


async def test_stateful_mode_replays_successful_cells_silently(judge_url):
    tool = make_tool(judge_url, stateful=True)
    first, second = Trajectory(), Trajectory()
    text, _ = await call(tool, {"code": "x = 20\nprint('setup')"}, agent_data=first)
    assert "setup" in text
    _, failed = await call(tool, {"code": "y = undefined_name"}, agent_data=first)
    assert failed.category is ErrorCategory.EXCEPTION
    text, outcome = await call(tool, {"code": "print('next')\nx * 2 + 2"}, agent_data=first)
    assert outcome.is_ok and text == "Tool call success\nstdout: next\n42\n\nstderr: "
    text, _ = await call(tool, {"code": "z = 1\nprint(x)"}, agent_data=first)
    assert "NameError" not in text
    text, outcome = await call(tool, {"code": "z = 1\nprint(x)"}, agent_data=second)
    assert "NameError at line 2: name 'x' is not defined" in text  # the replay line does not shift it


async def test_stateless_by_default(judge_url):
    tool = make_tool(judge_url)
    trajectory = Trajectory()
    await call(tool, {"code": "x = 1"}, agent_data=trajectory)
    _, outcome = await call(tool, {"code": "print(x)"}, agent_data=trajectory)
    assert outcome.exception_type == "NameError"


async def test_concurrent_calls_are_batched_into_fewer_requests(judge_url):
    tool = make_tool(judge_url, batch_wait_ms=50.0)
    client = shared_judge_client(tool.settings.judge)
    before = client.stats.http_requests
    results = await asyncio.gather(*(call(tool, {"code": f"print({i} * {i})"}) for i in range(12)))
    assert [text.split("\n")[1] for text, _ in results] == [f"stdout: {i * i}" for i in range(12)]
    assert client.stats.http_requests - before < 12
    await client.aclose()


async def test_yaml_config_loads_through_verl():
    from verl.tools.tool_registry import initialize_tools_from_config

    (tool,) = initialize_tools_from_config(str(TOOL_YAML))
    assert isinstance(tool, CodeInterpreterTool)
    assert tool.name == "code_interpreter"
    assert tool.get_openai_tool_schema().function.parameters.required == ["code"]
    assert tool.settings.judge == JudgeClientConfig()
    assert tool.settings.stateful is False


def test_bad_config_names_the_problem():
    with pytest.raises(ValueError, match=r"unknown config key\(s\) \['judge_uri'\]"):
        CodeInterpreterTool({"type": "native", "judge_uri": "http://x"})
    with pytest.raises(ValueError, match="stateful must be of type bool"):
        CodeInterpreterTool({"type": "native", "stateful": "yes"})
