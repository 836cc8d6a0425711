"""`cleaner data filter`: stratified sampling by rollout success rate."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from cleaner.data.filter import (
    DEFAULT_SUCCESS_RATE_RATIOS,
    filter_by_success_rate,
    is_code_row,
    parse_success_rate_ratios,
    read_stats,
)
from support.cli import run_cli

SHORTHAND = "0,0.8,0.9,1,1,1,1,1,0"
NON_CODE_PER_BUCKET = 10
CODE_PER_BUCKET = 5


def stats_record(uid: int, source: str, successes: int, avg_score: float = 0.0) -> dict:
    """One line of the 8-rollout statistics file (`dataset/filter/stats.jsonl`)."""
    return {
        "uid": str(uid),
        "data_source": source,
        "successes": successes,
        "attempts": 8,
        "success_rate": successes / 8,
        "avg_score": avg_score,
        "keep": True,
    }


def write_set(tmp_path: Path, rows: list[dict], stats: list[dict]) -> tuple[Path, Path]:
    """The dataset parquet and the stats file `cleaner data filter` reads."""
    dataset, stats_path = tmp_path / "train.parquet", tmp_path / "stats.jsonl"
    pd.DataFrame(rows).to_parquet(dataset)
    stats_path.write_text("".join(json.dumps(record) + "\n" for record in stats))
    return dataset, stats_path


def synthetic_set(tmp_path: Path, reverse: bool = False) -> tuple[Path, Path]:
    """For every bucket 0..8: 10 math rows and 5 code rows, interleaved; stats uid = row index."""
    plan = [(k, False) for k in range(9) for _ in range(NON_CODE_PER_BUCKET)]
    plan += [(k, True) for k in range(9) for _ in range(CODE_PER_BUCKET)]
    plan.sort(key=lambda item: (item[0] * 7919 + item[1]) % 13)
    if reverse:
        plan.reverse()
    rows, stats = [], []
    for index, (successes, code) in enumerate(plan):
        source = "train-code-taco-easy" if code else "math_dapo"
        rows.append({"data_source": source, "question": f"synthetic question {index}", "bucket": successes})
        stats.append(stats_record(index, source, successes, avg_score=successes / 4 - 1))
    return write_set(tmp_path, rows, stats)


def run_filter(tmp_path: Path, dataset: Path, stats: Path, *extra: str) -> pd.DataFrame:
    out = tmp_path / "out"
    assert (
        run_cli("data", "filter", "--dataset", str(dataset), "--stats", str(stats), "--output-dir", str(out), *extra)
        == 0
    )
    return pd.read_parquet(out / "filtered_sr.parquet")


def test_shorthand_equals_the_reference_string():
    assert parse_success_rate_ratios(SHORTHAND) == parse_success_rate_ratios(DEFAULT_SUCCESS_RATE_RATIOS)
    assert parse_success_rate_ratios(DEFAULT_SUCCESS_RATE_RATIOS)[1] == 0.8


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("0,1,1", "3 bare values given, need 9"),
        ("0.0:0.0,0.3:1", "rate 0.3 is not k/8"),
        ("0.0:1.5," + ",".join(f"{k / 8}:1" for k in range(1, 9)), "outside"),
        ("0.0:0,0.125:1", "no ratio for bucket"),
    ],
)
def test_bad_ratio_strings_are_explained(text, message):
    with pytest.raises(ValueError, match=message):
        parse_success_rate_ratios(text)


def test_kept_rows_per_bucket_follow_the_ratios(tmp_path, capsys):
    dataset, stats = synthetic_set(tmp_path)
    kept = run_filter(tmp_path, dataset, stats)
    ratios = parse_success_rate_ratios(DEFAULT_SUCCESS_RATE_RATIOS)
    for bucket, ratio in ratios.items():
        in_bucket = kept[kept["successes"] == bucket]
        assert (in_bucket["data_source"] == "math_dapo").sum() == int(NON_CODE_PER_BUCKET * ratio)
        assert (in_bucket["data_source"] != "math_dapo").sum() == int(CODE_PER_BUCKET * ratio)
    assert len(kept) == 67 + 33
    assert (kept["bucket"] == kept["successes"]).all()  # stats joined to the right rows
    assert {"uid", "successes", "attempts", "success_rate", "avg_score", "keep", "data_source_stat"} <= set(
        kept.columns
    )
    assert kept["keep"].all()  # the stats file's own flag, copied as the reference copies it
    table = capsys.readouterr().out
    assert "1/8" in table and "8/10" in table and "4/5" in table and "kept 100 of 135 rows" in table


def test_same_inputs_same_rows_and_stats_file_records_the_decision(tmp_path):
    dataset, stats = synthetic_set(tmp_path)
    first = run_filter(tmp_path, dataset, stats)
    second = run_filter(tmp_path, dataset, stats, "--success_rate_ratios", SHORTHAND)
    assert first["uid"].tolist() == second["uid"].tolist()
    decisions = [json.loads(line) for line in (tmp_path / "out" / "filtered_sr.stats.jsonl").read_text().splitlines()]
    assert {d["uid"] for d in decisions if d["keep"]} == set(second["uid"])
    assert len(decisions) == 135


def test_code_and_non_code_are_sampled_independently(tmp_path):
    """Reordering only the code rows must not change which math rows are kept."""
    rows = [{"data_source": "math_dapo"} for _ in range(20)] + [{"data_source": "train-code-taco-x"} for _ in range(20)]
    stats = {
        str(i): {
            "data_source": row["data_source"],
            "successes": 1,
            "attempts": 8,
            "success_rate": 0.125,
            "avg_score": 0.0,
            "keep": True,
        }
        for i, row in enumerate(rows)
    }
    ratios = parse_success_rate_ratios(SHORTHAND)
    kept_math = {r["uid"] for r in filter_by_success_rate(rows, stats, ratios).rows if r["data_source"] == "math_dapo"}
    assert len(kept_math) == 16
    fewer_code = rows[:20] + rows[20:30]
    stats_fewer = {uid: stats[uid] for uid in map(str, range(30))}
    kept_math_again = {
        r["uid"]
        for r in filter_by_success_rate(fewer_code, stats_fewer, ratios).rows
        if r["data_source"] == "math_dapo"
    }
    assert kept_math_again == kept_math


def test_stats_that_do_not_match_the_dataset_are_rejected(tmp_path):
    dataset, stats = synthetic_set(tmp_path)
    records = read_stats(stats)
    rows = pd.read_parquet(dataset).to_dict(orient="records")
    ratios = parse_success_rate_ratios(SHORTHAND)
    with pytest.raises(ValueError, match="1 dataset rows have no stats record"):
        filter_by_success_rate(rows, {uid: r for uid, r in records.items() if uid != "7"}, ratios)
    swapped = dict(records)
    swapped["3"] = dict(records["3"], data_source="mega-science")
    with pytest.raises(ValueError, match="row 3: stats data_source"):
        filter_by_success_rate(rows, swapped, ratios)


def test_malformed_stats_line_names_the_line(tmp_path):
    path = tmp_path / "stats.jsonl"
    path.write_text(json.dumps({"uid": "0", "data_source": "math_dapo", "successes": 2, "attempts": 4}) + "\n")
    with pytest.raises(ValueError, match=r"stats.jsonl:1: missing key\(s\) success_rate, avg_score, keep"):
        read_stats(path)


def test_cli_reports_bad_ratios_and_exits_1(tmp_path, caplog):
    dataset, stats = synthetic_set(tmp_path)
    out = tmp_path / "out"
    bad = ("--success_rate_ratios", "0,1")
    assert (
        run_cli("data", "filter", "--dataset", str(dataset), "--stats", str(stats), "--output-dir", str(out), *bad) == 1
    )
    assert "2 bare values given, need 9" in caplog.text
    assert not (tmp_path / "out").exists()


def published_filter(stats_records: list[dict], ratios: dict[float, float], retain_code: bool = False) -> set[str]:
    """The reference's filter as its documentation states it (shared notes, "Data filtering"), written out
    independently: per success rate k/8, code and non-code rows in dataset order; keep int(count * ratio) of each,
    drawn with `np.random.seed(42 + int(sr*1000))` (code) / `43 + int(sr*1000)` (non-code) and
    `np.random.choice(rows, n, replace=False)`. With retain_code, code rows are filtered at rate 0 only."""
    import numpy as np

    kept: set[str] = set()
    for k in range(9):
        sr = k / 8.0
        in_bucket = [r for r in stats_records if abs(r["success_rate"] - sr) <= 0.001]
        for code, seed_base in ((True, 42), (False, 43)):
            uids = [r["uid"] for r in in_bucket if ("code" in r["data_source"]) == code]
            ratio = 1.0 if code and retain_code and sr > 0 else ratios[sr]
            n = int(len(uids) * ratio)
            if n >= len(uids):
                kept.update(uids)
            elif n > 0:
                np.random.seed(seed_base + int(sr * 1000))
                kept.update(np.random.choice(uids, size=n, replace=False).tolist())
    return kept


def reference_like_set(tmp_path: Path, rows_per_source: int = 37) -> tuple[Path, Path, list[dict]]:
    """Sources of the 30K set with uneven bucket sizes, so every bucket really samples."""
    sources = ["math_dapo", "train-code-taco-medium", "mega-science", "train-code-leetcode-Easy", "train-math-still3"]
    rows, stats = [], []
    for index in range(rows_per_source * len(sources)):
        source = sources[(index * 7) % len(sources)]
        successes = (index * index + 3 * index) % 9
        rows.append({"data_source": source, "prompt": f"row {index}"})
        stats.append(stats_record(index, source, successes))
    return (*write_set(tmp_path, rows, stats), stats)


REFERENCE_RATIOS = {0.0: 0.0, 0.125: 0.8, 0.25: 0.9, 0.375: 1.0, 0.5: 1, 0.625: 1, 0.75: 1, 0.875: 1, 1.0: 0.0}
THINNING_RATIOS = {0.0: 0.3, 0.125: 0.8, 0.25: 0.9, 0.375: 0.5, 0.5: 0.7, 0.625: 1, 0.75: 0.35, 0.875: 0.6, 1.0: 0.2}


@pytest.mark.parametrize("ratios", [REFERENCE_RATIOS, THINNING_RATIOS], ids=["reference-default", "thinning"])
def test_the_default_reproduces_the_published_algorithm_row_for_row(tmp_path, ratios):
    dataset, stats, records = reference_like_set(tmp_path)
    ratio_text = ",".join(f"{rate}:{ratio}" for rate, ratio in ratios.items())
    kept = run_filter(tmp_path, dataset, stats, "--success_rate_ratios", ratio_text)
    expected = published_filter(records, ratios)
    assert 0 < len(expected) < len(records)
    assert set(kept["uid"]) == expected
    assert kept["uid"].tolist() == sorted(kept["uid"].tolist(), key=int)  # dataset order


def test_retain_code_filters_code_rows_only_when_never_solved(tmp_path):
    dataset, stats, records = reference_like_set(tmp_path)
    kept = run_filter(
        tmp_path, dataset, stats, "--retain_code", "--success_rate_ratios", "0.3,0.5,0.5,0.5,0.5,0.5,0.5,0.5,0.5"
    )
    ratios = dict(zip([k / 8 for k in range(9)], [0.3] + [0.5] * 8, strict=True))
    assert set(kept["uid"]) == published_filter(records, ratios, retain_code=True)
    code = [r for r in records if "code" in r["data_source"]]
    assert {r["uid"] for r in code if r["successes"] > 0} <= set(kept["uid"])


def test_a_dataset_uid_column_is_the_stats_key(tmp_path):
    rows = [{"data_source": "math_dapo", "uid": f"q{i}"} for i in range(10)]
    stats = {
        f"q{i}": {
            "data_source": "math_dapo",
            "successes": 1,
            "attempts": 8,
            "success_rate": 0.125,
            "avg_score": 0.0,
            "keep": False,
            "uid": f"q{i}",
        }
        for i in range(10)
    }
    result = filter_by_success_rate(rows, stats, parse_success_rate_ratios(SHORTHAND))
    assert len(result.rows) == 8 and all(row["uid"].startswith("q") and row["keep"] is False for row in result.rows)


@pytest.mark.parametrize(
    ("source", "code"),
    [
        ("train-code-taco-medium", True),
        ("test-code-leetcode-Medium", True),
        ("LiveCodeBench_v6", True),
        ("math_dapo", False),
        ("mega-science", False),
        ("train-math-numinamath1.5_olympiads", False),
        ("gpqa", False),
        ("unknown", False),
        (None, False),
    ],
)
def test_code_rows_are_told_apart_as_the_reference_filter_does(source, code):
    assert is_code_row(source) is code


def test_a_success_rate_that_disagrees_with_the_successes_is_refused(tmp_path):
    path = tmp_path / "stats.jsonl"
    record = {**stats_record(0, "math_dapo", 2), "success_rate": 0.5}
    path.write_text(json.dumps(record) + "\n")
    with pytest.raises(ValueError, match="success_rate=0.5 does not match successes/attempts=2/8"):
        read_stats(path)
