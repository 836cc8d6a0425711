"""Every recipe and evaluation run composes to what the recipe files of `data/composed/REVISION` composed, key by key,
except the SAAR and purification keys that are now written out with their defaults (multi_turn/cleaner.yaml), new
keys (ADDED), and the deliberate changes of single recipes named with their reasons (CHANGED_ON_PURPOSE).

The snapshots are `composed_snapshots.py`'s output for that revision (`python tests/recipes/composed_snapshots.py
REVISION` rewrites them); the last test regenerates them from the revision and compares, where git has it.
"""

from __future__ import annotations

import json
import subprocess

import pytest
import yaml
from composed_snapshots import CASES, RECIPE_CONFIGS, REVISION_FILE, ROOT, SNAPSHOTS, compose_case, compose_revision

from cleaner.purify.config import PurificationConfig
from cleaner.saar.config import SaarConfig
from cleaner.verl.trainer_config import compose_trainer_config

pytestmark = pytest.mark.slow  # composes every recipe with verl's Hydra config

MULTI_TURN = "actor_rollout_ref.rollout.multi_turn."
DECLARED = yaml.safe_load((RECIPE_CONFIGS / "multi_turn" / "cleaner.yaml").read_text())
# New keys, each with the value it has with the scripts' environment (JUDGE_URL unset).
ADDED: dict[str, str] = {}
# Deliberate changes of one recipe since the snapshots' revision, each with its reason (key -> value now).
RAY_ENV = "ray_kwargs.ray_init.runtime_env.env_vars."
ACTOR = "actor_rollout_ref.actor."
CHANGED_ON_PURPOSE = {
    # SGLang computes the scoring prefills' prompt log-probs in chunks (docs/saar.md "Scoring cost and memory").
    "qwen3_4b_cleaner_is_gate": {
        RAY_ENV + "SGLANG_ENABLE_LOGITS_PROCESSER_CHUNK": "1",
        RAY_ENV + "SGLANG_LOGITS_PROCESSER_CHUNK_SIZE": "2048",
    },
    # Cut rollouts leave the batch, so verl's mini-batch of ppo_mini_batch_size x n rows is set for 4 updates of the
    # kept rows (docs/purification.md).
    "qwen3_4b_roc": {ACTOR + "ppo_mini_batch_size": 16, "critic.ppo_mini_batch_size": 16},
    # Matched on CLEANER-4B's generated tokens (96 prompts x 32) and its 4 updates per step (the recipe's comment).
    "qwen3_4b_roc_matched": {
        ACTOR + "ppo_mini_batch_size": 12,
        "critic.ppo_mini_batch_size": 12,
        "data.train_batch_size": 96,
    },
}


@pytest.fixture(scope="module")
def stock():
    return compose_trainer_config()


def snapshot(case: str) -> list[dict]:
    return json.loads((SNAPSHOTS / f"{case}.json").read_text())


def multi_turn(leaves: dict) -> dict:
    return {key.removeprefix(MULTI_TURN): value for key, value in leaves.items() if key.startswith(MULTI_TURN)}


def test_every_snapshot_has_a_case():
    assert {path.stem for path in SNAPSHOTS.glob("*.json")} == set(CASES)


@pytest.mark.parametrize("case", CASES)
def test_each_run_composes_as_before_with_its_multi_turn_defaults_written_out(case, stock):
    before, after = snapshot(case), compose_case(case, RECIPE_CONFIGS, stock)
    assert len(after) == len(before)
    on_purpose = CHANGED_ON_PURPOSE.get(case, {})
    for run_before, run_after in zip(before, after):
        assert {key: run_after.get(key, "<absent>") for key in on_purpose} == on_purpose
        changed = {
            key: (run_before.get(key, "<absent>"), run_after.get(key, "<absent>"))
            for key in run_before.keys() | run_after.keys()
            if run_before.get(key, "<absent>") != run_after.get(key, "<absent>") and key not in on_purpose
        }
        # Only keys that were absent: the ADDED ones, and multi_turn keys with the value multi_turn/cleaner.yaml
        # declares for them.
        assert {key: value for key, value in changed.items() if key in ADDED} == {
            key: ("<absent>", value) for key, value in ADDED.items()
        }
        assert {key: value for key, value in changed.items() if key not in ADDED} == {
            key: ("<absent>", DECLARED[key.removeprefix(MULTI_TURN)])
            for key in changed
            if key.startswith(MULTI_TURN) and key.removeprefix(MULTI_TURN) in DECLARED
        }
        # ... so the agent loop and the trainer read the same settings as before.
        if changed and not any(key.startswith(MULTI_TURN) for key in on_purpose):
            assert SaarConfig.from_multi_turn(multi_turn(run_after)) == SaarConfig.from_multi_turn(
                multi_turn(run_before)
            )
            assert PurificationConfig.from_multi_turn(multi_turn(run_after)) == PurificationConfig.from_multi_turn(
                multi_turn(run_before)
            )


def test_the_snapshots_are_what_the_generator_composes_from_their_revision():
    revision = REVISION_FILE.read_text().strip()
    known = subprocess.run(["git", "-C", str(ROOT), "cat-file", "-e", f"{revision}^{{commit}}"], capture_output=True)
    if known.returncode != 0:
        pytest.skip(f"this checkout's git history lacks {revision} (a shallow clone)")
    assert compose_revision(revision) == {case: snapshot(case) for case in CASES}
