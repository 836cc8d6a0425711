"""`cleaner rollout`'s summary: the failed-call rows (what each SAAR mode's training does with its failed calls)."""

from __future__ import annotations

from cleaner.purify.failed_calls import FailedCall
from cleaner.purify.turns import Turn
from cleaner.trajectory.summary import NO_GROUPS, summarize, summary_rows

MASK = [1, 1, 0, 1, 1]
ANSWER = Turn(3, 5, None, None, call=False, answer=True, failed=False)
KEPT = FailedCall(
    0, ("exception",), turn_tokens=2, call_tokens=1, fate="kept", start=0, end=2, code_start=1, code_end=2
)
ROLLED_BACK = FailedCall(0, ("exception",), turn_tokens=3, call_tokens=2, fate="rolled_back", negative_candidate=True)


def record(problem: str, saar: bool, correct: bool, failed: FailedCall | None) -> dict:
    first = Turn(0, 2, 1, 2, call=True, answer=False, failed=failed is not None and failed.kept)
    return {
        "problem_id": problem,
        "uid": problem,
        "saar": saar,
        "score": float(correct),
        "acc": float(correct),
        "response_mask": MASK,
        "purify_turns": [first.to_dict(), ANSWER.to_dict()],
        "purify_generated_tokens": 6,
        "saar_spliced_spans": [[0, 2, 1, "shallow"]] if saar and failed else [],
        "purify_failed_calls": [failed.to_dict()] if failed else [],
    }


def rows(records: list[dict]) -> dict[str, list[str]]:
    return {name: values for name, values in summary_rows(summarize(records)) if name.startswith("failed-call")}


def test_each_mode_shows_what_its_training_does_with_the_failed_calls_it_generated():
    records = []
    for problem in ("p", "q"):
        # SAAR off keeps both failures: the correct trajectory's is reinforced, the incorrect one's penalized
        records += [record(problem, False, True, KEPT), record(problem, False, False, KEPT)]
        # SAAR on rolled the correct trajectory's failure back: nothing of it is trained
        records += [record(problem, True, True, ROLLED_BACK), record(problem, True, False, None)]
    table = rows(records)  # columns: SAAR on, SAAR off
    assert table["failed-call tokens / trajectory (generated)"] == ["1.5", "2.0"]
    assert table["failed-call tokens rolled back"] == ["100.0%", "0.0%"]
    assert table["failed-call tokens reinforced / penalized / untrained"] == [
        "0.0% / 0.0% / 100.0%",
        "50.0% / 50.0% / 0.0%",
    ]


def test_one_sample_per_prompt_gives_no_signs_and_says_how_to_get_groups():
    table = rows([record("p", False, True, KEPT), record("q", False, False, KEPT)])
    assert table["failed-call tokens / trajectory (generated)"] == ["2.0"]
    assert table["failed-call tokens reinforced / penalized / untrained"] == [NO_GROUPS]
    assert "-n" in NO_GROUPS


def test_records_without_the_failed_call_record_show_no_failed_call_figures():
    records = [{k: v for k, v in record("p", False, True, KEPT).items() if k != "purify_failed_calls"}] * 2
    assert list(rows(records).values()) == [["n/a"]] * 3
