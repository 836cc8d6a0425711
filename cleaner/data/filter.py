"""Stratified filtering by rollout success rate (the 7B recipe's training set).

Each prompt was rolled out `attempts` times (8); its bucket is the number of successes. A ratio per bucket
says which share of that bucket to keep; code and non-code rows are sampled separately, without
replacement, with fixed per-bucket seeds, so the same inputs always give the same rows.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from cleaner.data.records import iter_jsonl
from cleaner.data.sources import is_code_source

# The reference's default: drop unsolved and always-solved prompts, thin out the hardest solvable ones.
DEFAULT_SUCCESS_RATE_RATIOS = "0.0:0.0,0.125:0.8,0.25:0.9,0.375:1.0,0.5:1,0.625:1,0.75:1,0.875:1,1.0:0.0"
DEFAULT_ATTEMPTS = 8
NON_CODE_SEED_BASE = 42
CODE_SEED_BASE = 43
STATS_KEYS = ("uid", "data_source", "successes", "attempts", "success_rate", "avg_score", "keep")


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
    code: dict[int, BucketCount] = field(default_factory=dict)
    non_code: dict[int, BucketCount] = field(default_factory=dict)
    stats: list[dict[str, Any]] = field(default_factory=list)  # every prompt's stats, `keep` = our decision


def bucket_seed(bucket: int, attempts: int, code: bool) -> int:
    return (CODE_SEED_BASE if code else NON_CODE_SEED_BASE) + int(bucket / attempts * 1000)


def filter_by_success_rate(
    rows: list[dict[str, Any]],
    stats: dict[str, dict[str, Any]],
    ratios: dict[int, float],
    attempts: int = DEFAULT_ATTEMPTS,
) -> FilterResult:
    """Keep int(count * ratio) rows of every (bucket, code?) group; the uid of row i is str(i)."""
    missing = [str(index) for index in range(len(rows)) if str(index) not in stats]
    if missing:
        raise ValueError(f"{len(missing)} dataset rows have no stats record (first uids: {', '.join(missing[:5])})")
    extra = len(stats) - len(rows)
    if extra > 0:
        raise ValueError(f"the stats file has {extra} more records than the dataset has rows: wrong pairing?")
    groups: dict[tuple[int, bool], list[int]] = {}
    for index, row in enumerate(rows):
        record = stats[str(index)]
        if record["data_source"] != row.get("data_source"):
            raise ValueError(
                f"row {index}: stats data_source {record['data_source']!r} != dataset {row.get('data_source')!r}"
            )
        groups.setdefault((record["successes"], is_code_source(str(row["data_source"]))), []).append(index)

    result = FilterResult(rows=[], ratios=ratios, attempts=attempts)
    kept: set[int] = set()
    for (bucket, code), indices in sorted(groups.items()):
        count = int(len(indices) * ratios[bucket])
        rng = np.random.default_rng(bucket_seed(bucket, attempts, code))
        chosen = rng.choice(len(indices), size=count, replace=False) if count else []
        kept.update(indices[i] for i in chosen)
        table = result.code if code else result.non_code
        table[bucket] = BucketCount(total=len(indices), kept=count)

    for index, row in enumerate(rows):
        record = stats[str(index)]
        decided = dict(record, keep=index in kept)
        result.stats.append(decided)
        if index in kept:
            result.rows.append(
                dict(
                    row,
                    uid=str(index),
                    successes=int(record["successes"]),
                    attempts=int(record["attempts"]),
                    success_rate=float(record["success_rate"]),
                    avg_score=float(record["avg_score"]),
                    keep=True,
                    data_source_stat=record["data_source"],
                )
            )
    return result
