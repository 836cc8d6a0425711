import pytest

from cleaner.saar.aggregate import SaarStatsError, summarize_saar
from cleaner.saar.stats import TrajectoryStats

NEW_COUNTERS = ("saar_planb_appends", "saar_planb_replaces", "saar_is_scored")


def record(version: int, **counters) -> dict:
    """A trajectory record's flat saar_* fields, as `cleaner rollout` writes them."""
    row = {"version": version, **TrajectoryStats(rollbacks_triggered=1, rollbacks_recovered=1).to_extra_fields()}
    row.update(counters)
    return row


def test_a_version_1_record_without_the_is_gate_counters_counts_them_as_zero():
    old = {key: value for key, value in record(1).items() if key not in NEW_COUNTERS}
    summary = summarize_saar([old, record(2, saar_planb_appends=1, saar_is_scored=1)])
    assert (summary.total("planb_appends"), summary.total("planb_replaces"), summary.total("is_scored")) == (1, 0, 1)
    assert summary.total("rollbacks_triggered") == 2


def test_a_newer_row_lacking_a_counter_is_still_an_error():
    new = {key: value for key, value in record(2).items() if key != "saar_planb_appends"}
    with pytest.raises(SaarStatsError, match="saar_planb_appends"):
        summarize_saar([new])
    # a version-1 record still needs every counter it did carry
    old = {key: value for key, value in record(1).items() if key not in (*NEW_COUNTERS, "saar_retries_used")}
    with pytest.raises(SaarStatsError, match="saar_retries_used"):
        summarize_saar([old])
    # trainer rows (extra_fields, no record version) carry every counter
    trainer_row = {key: value for key, value in record(2).items() if key not in ("version", "saar_is_scored")}
    with pytest.raises(SaarStatsError, match="saar_is_scored"):
        summarize_saar([trainer_row])
