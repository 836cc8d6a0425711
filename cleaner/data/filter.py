"""Stratified filtering by rollout success rate (the 7B recipe's training set), row for row as the reference.

Each prompt was rolled out `attempts` times (8); its bucket is the number of successes. A ratio per bucket
says which share of that bucket to keep. Code and non-code rows are sampled separately, each bucket keeping
`int(count * ratio)` rows drawn without replacement with numpy's legacy generator (`np.random.seed` +
`np.random.choice`, here a private `RandomState` with the same stream) seeded `42 + int(rate * 1000)` for code
rows and `43 + int(rate * 1000)` for the others, over the bucket's rows in dataset order. That is the reference
implementation's published algorithm, so the same stats file gives the same rows.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from cleaner.data.rows import iter_jsonl

# The reference's default: drop unsolved and always-solved prompts, thin out the hardest solvable ones.
DEFAULT_SUCCESS_RATE_RATIOS = "0.0:0.0,0.125:0.8,0.25:0.9,0.375:1.0,0.5:1,0.625:1,0.75:1,0.875:1,1.0:0.0"
DEFAULT_ATTEMPTS = 8
CODE_SEED_BASE = 42
NON_CODE_SEED_BASE = 43
STATS_KEYS = ("uid", "data_source", "successes", "attempts", "success_rate", "avg_score", "keep")
# The reference buckets by success_rate within this tolerance; it must agree with successes / attempts.
RATE_TOLERANCE = 0.001

# The reference's filter calls a row "code" by these keywords of its stats data_source (case-insensitive): an
# exact match, else a keyword inside the source or the source inside a keyword. The names of its math and
# science categories are exact matches that are not code. This is not the reward's classification
# (cleaner.source_kinds): it only decides which rows are sampled together, as in the reference.
REFERENCE_CODE_KEYWORDS = (
    "leetcode",
    "codeforces",
    "apps",
    "mbpp",
    "humaneval",
    "codecontests",
    "taco",
    "code",
    "programming",
    "bigcodebench",
    "livecodebench",
)
REFERENCE_OTHER_CATEGORY_NAMES = frozenset(
    {
        "math",
        "gsm8k",
        "mathqa",
        "aime",
        "olympiad",
        "competition_math",
        "algebra",
        "geometry",
        "number_theory",
        "counting",
        "prealgebra",
        "precalculus",
        "intermediate_algebra",
        "amc",
        "numina",
        "deepscaler",
        "open-r1-math",
        "scibench",
        "scienceqa",
        "physics",
        "chemistry",
        "biology",
        "science",
        "gpqa",
    }
)


def is_code_row(data_source: Any) -> bool:
    """Whether the reference's filter samples a row with this stats `data_source` among the code rows."""
    if data_source is None or (isinstance(data_source, float) and math.isnan(data_source)):
        return False
    lowered = str(data_source).lower()
    if lowered == "unknown" or lowered in REFERENCE_OTHER_CATEGORY_NAMES:
        return False
    return any(keyword in lowered or lowered in keyword for keyword in REFERENCE_CODE_KEYWORDS)


def parse_success_rate_ratios(text: str, attempts: int = DEFAULT_ATTEMPTS) -> dict[int, float]:
    """Bucket (number of successes) -> share kept.

    Accepts the reference's `rate:ratio,...` form (rates k/attempts) or `attempts+1` bare ratios for
    buckets 0..attempts. Every bucket needs a ratio.
    """
    entries = [entry.strip() for entry in text.split(",") if entry.strip()]
    ratios: dict[int, float] = {}
    if entries and all(":" not in entry for entry in entries):
        if len(entries) != attempts + 1:
            raise ValueError(
                f"success_rate_ratios: {len(entries)} bare values given, need {attempts + 1} (one per bucket 0..{attempts})"
            )
        pairs = [(str(k / attempts), value) for k, value in enumerate(entries)]
    else:
        pairs = []
        for entry in entries:
            if entry.count(":") != 1:
                raise ValueError(f"success_rate_ratios: entry {entry!r} is not rate:ratio")
            pairs.append(tuple(entry.split(":")))
    for rate_text, ratio_text in pairs:
        try:
            rate, ratio = float(rate_text), float(ratio_text)
        except ValueError as exc:
            raise ValueError(f"success_rate_ratios: {rate_text}:{ratio_text} is not numeric") from exc
        bucket = round(rate * attempts)
        if abs(bucket - rate * attempts) > 1e-6 or not 0 <= bucket <= attempts:
            raise ValueError(f"success_rate_ratios: rate {rate} is not k/{attempts} for k in 0..{attempts}")
        if not 0.0 <= ratio <= 1.0:
            raise ValueError(f"success_rate_ratios: ratio {ratio} for rate {rate} is outside [0, 1]")
        if bucket in ratios:
            raise ValueError(f"success_rate_ratios: rate {rate} is given twice")
        ratios[bucket] = ratio
    missing = [f"{k}/{attempts}" for k in range(attempts + 1) if k not in ratios]
    if missing:
        raise ValueError(f"success_rate_ratios: no ratio for bucket(s) {', '.join(missing)}")
    return ratios


def read_stats(path: Path, attempts: int = DEFAULT_ATTEMPTS) -> dict[str, dict[str, Any]]:
    """uid -> stats record, from the reference's stats JSONL (one record per prompt)."""
    stats: dict[str, dict[str, Any]] = {}
    for where, record in iter_jsonl(path):
        missing = [key for key in STATS_KEYS if key not in record]
        if missing:
            raise ValueError(f"{where}: missing key(s) {', '.join(missing)}")
        if record["attempts"] != attempts:
            raise ValueError(f"{where}: attempts={record['attempts']}, expected {attempts}")
        if not 0 <= record["successes"] <= attempts:
            raise ValueError(f"{where}: successes={record['successes']} is outside 0..{attempts}")
        if abs(record["success_rate"] - record["successes"] / attempts) > RATE_TOLERANCE:
            raise ValueError(
                f"{where}: success_rate={record['success_rate']} does not match successes/attempts="
                f"{record['successes']}/{attempts}"
            )
        uid = str(record["uid"])
        if uid in stats:
            raise ValueError(f"{where}: uid {uid} appears twice")
        stats[uid] = record
    return stats


@dataclass
class BucketCount:
    total: int = 0
    kept: int = 0


@dataclass
class FilterResult:
    rows: list[dict[str, Any]]  # kept rows in dataset order, with the stats columns added
    ratios: dict[int, float]
    attempts: int
    retain_code: bool = False
    code: dict[int, BucketCount] = field(default_factory=dict)
    non_code: dict[int, BucketCount] = field(default_factory=dict)
    stats: list[dict[str, Any]] = field(default_factory=list)  # every prompt's stats, `keep` = this run's decision


def bucket_seed(bucket: int, attempts: int, code: bool) -> int:
    return (CODE_SEED_BASE if code else NON_CODE_SEED_BASE) + int(bucket / attempts * 1000)


def row_uid(row: dict[str, Any], index: int) -> str:
    """A row's key in the stats file: its own `uid` column when the dataset has one, else its row number."""
    return str(row["uid"]) if "uid" in row else str(index)


def bucket_ratio(ratios: dict[int, float], bucket: int, code: bool, retain_code: bool) -> float:
    """`retain_code` keeps every code row that was solved at least once; only unsolved code rows are filtered."""
    return 1.0 if code and retain_code and bucket > 0 else ratios[bucket]


def sample_positions(count: int, keep: int, seed: int) -> list[int]:
    """Positions of the `keep` rows drawn from a bucket of `count` rows, as `np.random.seed(seed)` followed by
    `np.random.choice(rows, keep, replace=False)` draws them (RandomState is that legacy generator)."""
    if keep <= 0:
        return []
    return [int(position) for position in np.random.RandomState(seed).choice(count, size=keep, replace=False)]


def filter_by_success_rate(
    rows: list[dict[str, Any]],
    stats: dict[str, dict[str, Any]],
    ratios: dict[int, float],
    attempts: int = DEFAULT_ATTEMPTS,
    retain_code: bool = False,
) -> FilterResult:
    """Keep int(count * ratio) rows of every (bucket, code?) group, drawn as the reference draws them."""
    uids = [row_uid(row, index) for index, row in enumerate(rows)]
    missing = [uid for uid in uids if uid not in stats]
    if missing:
        raise ValueError(f"{len(missing)} dataset rows have no stats record (first uids: {', '.join(missing[:5])})")
    extra = len(stats) - len(set(uids))
    if extra > 0:
        raise ValueError(f"the stats file has {extra} more records than the dataset has rows: wrong pairing?")
    groups: dict[tuple[int, bool], list[int]] = {}
    for index, (row, uid) in enumerate(zip(rows, uids, strict=True)):
        record = stats[uid]
        if record["data_source"] != row.get("data_source"):
            raise ValueError(
                f"row {index}: stats data_source {record['data_source']!r} != dataset {row.get('data_source')!r}"
            )
        groups.setdefault((record["successes"], is_code_row(record["data_source"])), []).append(index)

    result = FilterResult(rows=[], ratios=ratios, attempts=attempts, retain_code=retain_code)
    kept: set[int] = set()
    for (bucket, code), indices in sorted(groups.items()):
        count = int(len(indices) * bucket_ratio(ratios, bucket, code, retain_code))
        kept.update(
            indices[position] for position in sample_positions(len(indices), count, bucket_seed(bucket, attempts, code))
        )
        table = result.code if code else result.non_code
        table[bucket] = BucketCount(total=len(indices), kept=count)

    for index, (row, uid) in enumerate(zip(rows, uids, strict=True)):
        record = stats[uid]
        result.stats.append(dict(record, keep=index in kept))
        if index in kept:
            result.rows.append(
                dict(
                    row,
                    uid=uid,
                    successes=int(record["successes"]),
                    attempts=int(record["attempts"]),
                    success_rate=float(record["success_rate"]),
                    avg_score=float(record["avg_score"]),
                    keep=record["keep"],  # the stats file's own flag, as the reference copies it
                    data_source_stat=record["data_source"],
                )
            )
    return result
