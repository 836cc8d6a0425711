"""The real `code_interpreter` (on the real judge) inside the SAAR agent loop, driven by a scripted model."""

from __future__ import annotations

import socket

from cleaner.verl.agent_loop import CleanerToolAgentLoop
from cleaner.verl.code_interpreter_tool import CodeInterpreterTool
from support.scripted_llm import (
    ScriptedLLMServer,
    agent_loop_config,
    build_agent_loop,
    tool_call_text,
    training_sampling_params,
)

FINAL = "The total is \\boxed{45}."


async def run_trajectory(tokenizer, tool, marker: str, turns: list[str], **multi_turn):
    multi_turn = {"enable_tool_rollback": True, "max_tool_retries": 3, "max_tool_response_length": 512, **multi_turn}
    config = agent_loop_config(**multi_turn)
    server = ScriptedLLMServer(tokenizer, scripts={marker: turns})
    loop = build_agent_loop(CleanerToolAgentLoop, config, server, tokenizer, [tool])
    output = await loop.run(
        training_sampling_params(config),
        raw_prompt=[{"role": "user", "content": f"{marker}: what is 0 + 1 + ... + 9?"}],
        tools_kwargs={},
        extra_info={},
        index=0,
    )
    return output, tokenizer.decode(output.response_ids)


async def test_name_error_is_rolled_back_out_of_the_trajectory(qwen3_tokenizer, judge_url):
    tool = CodeInterpreterTool({"type": "native", "judge_url": judge_url})
    failing = "values = range(10)\nprint(sum(valuez))"
    fixed = "values = range(10)\nprint(sum(values))"
    output, response = await run_trajectory(
        qwen3_tokenizer,
        tool,
        "ROLLBACK",
        [f"Let me add them.\n{tool_call_text(failing)}", f"Let me add them.\n{tool_call_text(fixed)}", FINAL],
    )
    extra = output.extra_fields
    assert (extra["saar_rollbacks_triggered"], extra["saar_rollbacks_recovered"]) == (1, 1)
    assert extra["saar_fail_exception"] == 1 and extra["saar_infra_error"] is False
    assert "Tool call success\nstdout: 45" in response
    assert "NameError" not in response and "valuez" not in response
    assert response.rstrip().endswith(FINAL + "<|im_end|>")


async def test_infra_outage_is_kept_and_marked_not_rolled_back(qwen3_tokenizer):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        dead_url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    tool = CodeInterpreterTool({"type": "native", "judge_url": dead_url, "max_retries": 1, "backoff_s": 0.01})
    output, response = await run_trajectory(
        qwen3_tokenizer, tool, "OUTAGE", [f"Let me add them.\n{tool_call_text('print(sum(range(10)))')}", FINAL]
    )
    extra = output.extra_fields
    assert extra["saar_rollbacks_triggered"] == 0
    assert extra["saar_infra_error"] is True and extra["saar_infra_errors"] == 1
    assert "execution service unavailable" in response
    assert "print(sum(range(10)))" in response  # the call stays in the trajectory


async def test_python_block_runs_through_the_lenient_parser(qwen3_tokenizer, judge_url):
    tool = CodeInterpreterTool({"type": "native", "judge_url": judge_url})
    output, response = await run_trajectory(
        qwen3_tokenizer,
        tool,
        "LENIENT",
        ["Let me add them.\n```python\nsum(range(10))\n```", FINAL],
        enable_tool_rollback=False,
        format="cleaner_lenient",
    )
    assert "Tool call success\nstdout: 45" in response
    assert output.extra_fields["saar_tool_calls"] == 1
