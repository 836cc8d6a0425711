"""The trainer's batch audit (tensor operations) against the definition, `cleaner.purify.audit.audit_row`."""

from __future__ import annotations

import random

import pytest
import torch

from cleaner.purify.audit import AuditRow, audit_counts, audit_metrics
from cleaner.purify.config import Purification
from cleaner.purify.failed_calls import FAILED_CALLS_KEY, FailedCall, failed_calls_from_field
from cleaner.purify.turns import GENERATED_TOKENS_KEY, TURNS_KEY, Turn, mask_runs, turns_from_field
from cleaner.saar.negatives import NEGATIVE_SAMPLE_KEY
from cleaner.verl import purification_audit
from cleaner.verl.purification_audit import SPLICED_SPANS, batch_audit_counts, batch_audit_metrics


def random_row(rng: random.Random, length: int) -> tuple[dict, list[int], list[float]]:
    """One trajectory as the loop records it: turns on the mask's runs, failed calls kept on failed turns and
    rolled back, spliced spans (overlapping ones too), and per-token advantages of every sign."""
    mask = [int(rng.random() < 0.7) for _ in range(length)]
    turns, calls = [], []
    for start, end in mask_runs(mask):
        call = rng.random() < 0.6
        failed = call and rng.random() < 0.4
        code_start = rng.randrange(start, end) if call else None
        turns.append(Turn(start, end, code_start, end if call else None, call, not call, failed))
        if failed:
            calls.append(FailedCall(0, ("exception",), end - start, end - code_start, "kept", start, end, code_start,
                                    end))  # fmt: skip
    for attempt in range(rng.randrange(3)):
        tokens = rng.randrange(1, 9)
        calls.append(FailedCall(attempt, ("bad_call",), tokens, rng.randrange(1, tokens + 1), "rolled_back",
                                negative_candidate=attempt == 0))  # fmt: skip
    spans = []
    for _ in range(rng.randrange(3)):
        start = rng.randrange(length)
        spans.append([start, rng.randrange(start, length + 3), 1, rng.choice(["shallow", "deep", "exhausted"])])
    fields = {
        TURNS_KEY: [turn.to_dict() for turn in turns],
        GENERATED_TOKENS_KEY: rng.choice([0, length + rng.randrange(20)]),  # 0: falls back to the model tokens
        SPLICED_SPANS: spans,
        FAILED_CALLS_KEY: [call.to_dict() for call in calls],
    }
    advantages = [rng.choice([-1.5, -0.2, 0.0, 0.3, 2.0]) for _ in range(length)]
    return fields, mask, advantages


def random_batch(rng: random.Random, rows: int, length: int):
    extra, masks, advantages = [], [], []
    for _ in range(rows):
        kind = rng.random()
        row_length = rng.randrange(1, length + 1)
        fields, mask, advantage = random_row(rng, row_length)
        if kind < 0.1:  # a negative sample: its failed call only
            start = rng.randrange(row_length)
            fields = {**fields, NEGATIVE_SAMPLE_KEY: True}
            mask = [0] * start + [1] * (row_length - start)
        elif kind < 0.15:  # another agent loop's row: no record at all
            fields = None
        elif kind < 0.2:  # a record without the failed-call record
            fields = {key: value for key, value in fields.items() if key != FAILED_CALLS_KEY}
        extra.append(fields)
        masks.append(mask)
        advantages.append(advantage)
    return extra, masks, advantages


def oracle_rows(extra, masks, advantages) -> list[AuditRow]:
    rows = []
    for fields, mask, advantage in zip(extra, masks, advantages, strict=True):
        fields = fields or {}
        calls = fields.get(FAILED_CALLS_KEY)
        rows.append(
            AuditRow(
                turns=turns_from_field(fields.get(TURNS_KEY)),
                mask=mask,
                advantages=advantage,
                generated_tokens=int(fields.get(GENERATED_TOKENS_KEY) or sum(mask)),
                spliced_spans=fields.get(SPLICED_SPANS) or (),
                failed_calls=None if calls is None else failed_calls_from_field(calls),
                negative_sample=bool(fields.get(NEGATIVE_SAMPLE_KEY)),
            )
        )
    return rows


@pytest.mark.parametrize("seed", range(30))
def test_the_batch_audit_equals_the_definition_on_random_batches(seed, monkeypatch):
    monkeypatch.setattr(purification_audit, "BLOCK_ROWS", 3)  # several blocks, and a partial last one
    rng = random.Random(seed)
    extra, masks, advantages = random_batch(rng, rows=rng.randrange(1, 12), length=40)
    expected = audit_counts(oracle_rows(extra, masks, advantages))
    # rows of different lengths, as v1 hands them over
    got = batch_audit_counts(extra, [torch.tensor(m) for m in masks], [torch.tensor(a) for a in advantages])
    assert got == expected


def test_a_padded_batch_gives_the_same_counts_as_its_rows():
    rng = random.Random(7)
    extra, masks, advantages = random_batch(rng, rows=9, length=30)
    rows = [torch.tensor(m) for m in masks]
    padded_mask = torch.nn.utils.rnn.pad_sequence(rows, batch_first=True)
    padded_advantages = torch.nn.utils.rnn.pad_sequence([torch.tensor(a) for a in advantages], batch_first=True)
    assert batch_audit_counts(extra, padded_mask, padded_advantages) == audit_counts(
        oracle_rows(extra, masks, advantages)
    )


def test_the_metrics_match_and_a_mode_without_failed_calls_reports_them_removed():
    rng = random.Random(3)
    extra, masks, advantages = random_batch(rng, rows=10, length=30)
    tensors = ([torch.tensor(m) for m in masks], [torch.tensor(a) for a in advantages])
    for mode in (None, Purification.SAAR, Purification.ERROR_TURN_MASK):
        expected = audit_metrics(oracle_rows(extra, masks, advantages), mode)
        assert batch_audit_metrics(extra, *tensors, mode) == pytest.approx(expected)
    removed = batch_audit_metrics(extra, *tensors, Purification.ERROR_TRAJECTORY_FILTER)
    assert removed["purify/failed_call_signal_removed"] == 1.0 and "purify/failed_call_reinforced_share" not in removed
    assert batch_audit_metrics([], torch.zeros(0, 4), torch.zeros(0, 4), None) == {}


def test_a_hand_computed_batch():
    """A kept failed turn (tokens 0..3, call 2..3) with a positive advantage, a 5-token rolled-back attempt, a
    shallow splice of tokens 6..8, and a negative sample training 2 call tokens with a negative advantage."""
    mask = [1, 1, 1, 1, 0, 0, 1, 1, 1, 0]
    turns = [Turn(0, 4, 2, 4, True, False, True), Turn(6, 9, 7, 9, True, False, False)]
    calls = [
        FailedCall(0, ("exception",), 4, 2, "kept", 0, 4, 2, 4),
        FailedCall(0, ("exception",), 5, 3, "rolled_back", negative_candidate=True, negative=True),
    ]
    trajectory = {
        TURNS_KEY: [turn.to_dict() for turn in turns],
        GENERATED_TOKENS_KEY: 19,
        SPLICED_SPANS: [[6, 9, 1, "shallow"]],
        FAILED_CALLS_KEY: [call.to_dict() for call in calls],
    }
    negative = {**trajectory, NEGATIVE_SAMPLE_KEY: True}
    counts = batch_audit_counts(
        [trajectory, negative],
        torch.tensor([mask, [0, 0, 0, 1, 1, 0, 0, 0, 0, 0]]),
        torch.tensor([[0.5] * 10, [-0.1] * 10]),
    )
    assert (counts.trajectories, counts.trained, counts.positive, counts.offpolicy) == (1, 7, 7, 3)
    assert (counts.failed_tokens, counts.failed_reinforced, counts.failed_penalized) == (9, 4, 2)
    assert (counts.failed_code_tokens, counts.failed_code_reinforced, counts.failed_code_penalized) == (5, 2, 2)
    assert (counts.failed_rolled_back, counts.replacement, counts.replacement_reinforced) == (5, 3, 3)
    assert counts.figures()["failed_call_untrained_share"] == pytest.approx(3 / 9)


def trainer_batch() -> tuple[list[dict], list[list[int]], list[list[float]]]:
    """Two trajectories of one prompt: the correct one kept a failed call, the other had one rolled back."""
    kept = FailedCall(0, ("exception",), 2, 1, "kept", 0, 2, 1, 2)
    rolled_back = FailedCall(0, ("syntax_error",), 3, 2, "rolled_back", negative_candidate=True)
    turns = [Turn(0, 2, 1, 2, True, False, True), Turn(3, 5, None, None, False, True, False)]
    extra = [
        {TURNS_KEY: [t.to_dict() for t in turns], GENERATED_TOKENS_KEY: 6, SPLICED_SPANS: [],
         FAILED_CALLS_KEY: [kept.to_dict()]},
        {TURNS_KEY: [t.to_dict() for t in turns], GENERATED_TOKENS_KEY: 9, SPLICED_SPANS: [[0, 2, 1, "deep"]],
         FAILED_CALLS_KEY: [rolled_back.to_dict()]},
    ]  # fmt: skip
    mask = [1, 1, 0, 1, 1, 0]
    return extra, [mask, mask], [[0.7] * 6, [-0.7] * 6]


def test_the_legacy_trainers_audit_logs_the_failed_call_figures(monkeypatch):
    import numpy as np
    from verl import DataProto

    from cleaner.purify.config import PurificationConfig
    from cleaner.verl import purification

    extra, masks, advantages = trainer_batch()
    columns = {}
    for key in (TURNS_KEY, GENERATED_TOKENS_KEY, SPLICED_SPANS, FAILED_CALLS_KEY):
        columns[key] = np.empty(len(extra), dtype=object)
        columns[key][:] = [fields[key] for fields in extra]
    data = DataProto.from_dict(
        tensors={"response_mask": torch.tensor(masks, dtype=torch.float32), "advantages": torch.tensor(advantages)},
        non_tensors=columns,
    )
    monkeypatch.setattr(purification, "_config", PurificationConfig(purification=Purification.SAAR))
    metrics = purification.legacy_audit(data)
    assert metrics == pytest.approx(audit_metrics(oracle_rows(extra, masks, advantages), Purification.SAAR))
    # 5 failed-call tokens generated: the kept call's 2 reinforced, the rolled-back attempt's 3 untrained
    assert metrics["purify/failed_call_reinforced_share"] == pytest.approx(2 / 5)
    assert metrics["purify/failed_call_rolled_back_share"] == pytest.approx(3 / 5)
    assert metrics["purify/failed_call_signal_removed"] == 0.0


def test_the_v1_trainers_audit_logs_the_failed_call_figures(monkeypatch):
    import transfer_queue
    from transfer_queue.metadata import KVBatchMeta
    from verl.utils import tensordict_utils as tu

    from cleaner.purify.config import PurificationConfig
    from cleaner.verl import purification

    extra, masks, advantages = trainer_batch()
    keys = ["u_0_0", "u_1_0"]
    rows = {
        key: {"response_mask": torch.tensor(mask), "advantages": torch.tensor(advantage), "extra_fields": fields}
        for key, fields, mask, advantage in zip(keys, extra, masks, advantages, strict=True)
    }

    def kv_batch_get(keys, partition_id, select_fields):
        return tu.list_of_dict_to_tensordict([{name: rows[key][name] for name in select_fields} for key in keys])

    monkeypatch.setattr(transfer_queue, "kv_batch_get", kv_batch_get)
    monkeypatch.setattr(purification, "_config", PurificationConfig(purification=Purification.ERROR_TURN_MASK))
    metrics = purification.v1_audit(KVBatchMeta(keys=keys, tags=[{}, {}], partition_id="train"))
    mode = Purification.ERROR_TURN_MASK
    assert metrics == pytest.approx(audit_metrics(oracle_rows(extra, masks, advantages), mode))
    assert metrics["purify/failed_call_signal_removed"] == 1.0 and "purify/failed_call_reinforced_share" not in metrics
