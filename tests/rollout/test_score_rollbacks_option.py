"""`cleaner rollout --score-rollbacks`: turns on SAAR's rollback_is_measure, only where the server can score."""

from __future__ import annotations

import pytest

from cleaner.cli import build_parser
from cleaner.rollout.cli import check_scoring, settings_from_args
from cleaner.rollout.driver import trainer_overrides

MEASURE = "+actor_rollout_ref.rollout.multi_turn.rollback_is_measure=true"


def parse(*extra: str):
    argv = ["rollout", "--data", "p.jsonl", "--output", "o.jsonl", "--server-url", "http://127.0.0.1:1"]
    return build_parser().parse_args([*argv, "--tokenizer", "t", *extra])


@pytest.mark.parametrize("backend", ["vllm", "sglang"])
def test_the_option_sets_rollback_is_measure_for_the_saar_pass(backend, tmp_path):
    args = parse("--backend", backend, "--score-rollbacks")
    check_scoring(args)
    settings = settings_from_args(args)
    assert MEASURE in trainer_overrides(settings, tmp_path / "tools.yaml", saar=True)
    assert MEASURE not in trainer_overrides(settings, tmp_path / "tools.yaml", saar=False)
    plain = settings_from_args(parse("--backend", backend))
    assert MEASURE not in trainer_overrides(plain, tmp_path / "tools.yaml", saar=True)


def test_llamacpp_is_refused_before_anything_runs():
    with pytest.raises(SystemExit, match="--score-rollbacks needs prompt-token log-probs, which the llamacpp server"):
        check_scoring(parse("--backend", "llamacpp", "--score-rollbacks"))
    check_scoring(parse("--backend", "llamacpp"))  # without the option nothing is asked of the server


def test_the_option_needs_saar_on():
    with pytest.raises(SystemExit, match="needs --saar on"):
        check_scoring(parse("--backend", "vllm", "--saar", "off", "--score-rollbacks"))
