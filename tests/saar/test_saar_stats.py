from cleaner.saar.outcome import ErrorCategory
from cleaner.saar.stats import EXTRA_FIELD_KEYS, RollbackEvent, SplicedSpan, TrajectoryStats


def test_every_contract_key_is_present_with_its_type_even_when_nothing_happened():
    fields = TrajectoryStats().to_extra_fields()
    assert tuple(fields) == EXTRA_FIELD_KEYS
    for category in ErrorCategory:
        assert fields[f"saar_fail_{category.value}"] == 0
    assert fields["saar_spliced_token_fraction"] == 0.0
    assert fields["saar_infra_error"] is False
    assert fields["saar_spliced_spans"] == [] and fields["saar_rollback_events"] == []
    assert all(type(fields[key]) is int for key in EXTRA_FIELD_KEYS if key.startswith("saar_fail_"))


def test_fraction_flags_and_provenance():
    stats = TrajectoryStats(spliced_tokens=30, response_tokens=120, infra_errors=1)
    stats.count_failure(ErrorCategory.TIMEOUT)
    stats.count_failure(ErrorCategory.TIMEOUT)
    stats.spliced_spans.append(SplicedSpan(10, 40, 2, "shallow"))
    stats.rollback_events.append(
        RollbackEvent(0, "print(y)", "exception", "NameError", "NameError: y", "print(x)", 0.9, "shallow", 2, 17)
    )
    fields = stats.to_extra_fields()
    assert fields["saar_spliced_token_fraction"] == 0.25
    assert fields["saar_infra_error"] is True
    assert fields["saar_fail_timeout"] == 2
    assert fields["saar_spliced_spans"] == [[10, 40, 2, "shallow"]]
    assert fields["saar_rollback_events"][0] == {
        "position": 0,
        "failed_code": "print(y)",
        "error_category": "exception",
        "exception_type": "NameError",
        "error_text": "NameError: y",
        "replacement_code": "print(x)",
        "similarity": 0.9,
        "mode": "shallow",
        "retries": 2,
        "resampled_tokens": 17,
        "model_errors": 0,
        "kept": None,
        "log_is_ratio": None,
        "is_tokens": None,
        "is_token_log_ratios": None,
        "is_decision": None,
        "is_statistic": None,
        "is_statistic_value": None,
        "is_error": None,
        "is_failure": None,
    }
