"""`make demo` runs `cleaner rollout` itself: its command lines must stay valid for the CLI, one slot per pass."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from cleaner.cli import build_parser
from cleaner.resources import DEMO_PROBLEMS, resource_path
from cleaner.rollout.cli import run as rollout_run

DEMO_SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "demo.py"


@pytest.fixture(scope="module")
def demo():
    spec = importlib.util.spec_from_file_location("cleaner_demo_script", DEMO_SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve their module through sys.modules
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        del sys.modules[spec.name]


def test_each_pass_is_a_valid_cleaner_rollout_command_on_its_own_server(demo, tmp_path):
    args = demo.parse_args(["--out-dir", str(tmp_path), "--limit", "3", "-n", "2", "--override", "a.b=1"])
    layout = demo.Layout(tmp_path)
    services = demo.Services(
        "http://127.0.0.1:1",
        {True: SimpleNamespace(url="http://127.0.0.1:2"), False: SimpleNamespace(url="http://127.0.0.1:3")},
    )
    problems, model = tmp_path / "p.jsonl", tmp_path / "m.gguf"
    for saar, mode, url in [(True, "on", "http://127.0.0.1:2"), (False, "off", "http://127.0.0.1:3")]:
        parsed = build_parser().parse_args(demo.rollout_argv(args, problems, model, services, layout, saar))
        assert parsed.func is rollout_run
        assert (parsed.saar, parsed.server_url, parsed.output) == (mode, url, layout.rollout(saar))
        assert (parsed.data, parsed.gguf, parsed.judge_url) == (problems, model, "http://127.0.0.1:1")
        # One trajectory in flight per server: the pairing of the two passes depends on it.
        assert parsed.concurrency == 1
        assert (parsed.limit, parsed.n_samples, parsed.override) == (3, 2, ["a.b=1"])
        assert parsed.max_assistant_turns == 5 and parsed.tool_format == "cleaner_lenient"


def test_problem_ids_select_rows_in_the_given_order(demo, tmp_path):
    args = demo.parse_args(["--out-dir", str(tmp_path), "--problem-ids", "math-07,math-06"])
    layout = demo.Layout(tmp_path)
    path, count = demo.select_problems(args, layout)
    assert (path, count) == (layout.problems, 2)
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert [row["extra_info"]["problem_id"] for row in rows] == ["math-07", "math-06"]
    assert demo.select_problems(demo.parse_args(["--limit", "4"]), layout) == (resource_path(DEMO_PROBLEMS), 4)
    with pytest.raises(SystemExit, match=r"--problem-ids: \['nope'\] not in"):
        demo.select_problems(demo.parse_args(["--problem-ids", "math-06,nope"]), layout)


def test_off_policy_scores_are_written_back_for_the_report(demo, tmp_path):
    from fake_inference_server import FakeInferenceServer

    from cleaner.analysis.offpolicy import ScoredTrajectory
    from cleaner.data.rows import write_jsonl
    from cleaner.trajectory.store import read_records
    from support.offpolicy_records import record

    def forcing_llamacpp(path, body):
        [[token, _]] = body["logit_bias"]
        return 200, {"tokens": [token], "completion_probabilities": [{"id": token, "logprob": -1.0}]}

    layout = demo.Layout(tmp_path)
    untouched = {**record(), "key": "p1#0#saar", "saar_spliced_spans": [], "saar_rollback_events": []}
    write_jsonl([record(), untouched], layout.rollout(True))
    with FakeInferenceServer(forcing_llamacpp) as server:
        scored = demo.score_offpolicy(layout, server.url)
    on = read_records(layout.rollout(True))
    assert on[1] == untouched
    behaviour = record()["response_logprobs"]
    deep, shallow = on[0]["saar_rollback_events"]
    assert deep["log_is_ratio"] == pytest.approx(sum(-1.0 - lp for lp in behaviour[0:4]))
    assert shallow["log_is_ratio"] == pytest.approx(sum(-1.0 - lp for lp in behaviour[7:9]))
    assert [ScoredTrajectory.from_dict(row) for row in read_records(layout.offpolicy)] == scored
    assert [t.key for t in scored] == ["p0#0#saar"] and len(scored[0].control_deltas) == 1
