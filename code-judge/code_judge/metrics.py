"""Prometheus metrics of one API process (a private registry, so several apps can live in one process)."""

from __future__ import annotations

from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, float("inf"))


@dataclass
class ApiMetrics:
    registry: CollectorRegistry = field(default_factory=CollectorRegistry)

    def __post_init__(self) -> None:
        r = self.registry
        self.requests = Counter("code_judge_requests", "HTTP requests by endpoint", ["endpoint"], registry=r)
        self.submissions = Counter("code_judge_submissions", "programs submitted by endpoint", ["endpoint"], registry=r)
        self.latency = Histogram(
            "code_judge_request_seconds",
            "request latency by endpoint",
            ["endpoint"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.service_verdicts = Counter(
            "code_judge_service_verdicts",
            "verdicts given by the service itself (no finished run), by reason",
            ["reason"],
            registry=r,
        )
        self.rejections = Counter("code_judge_rejections", "requests refused with 503, by cause", ["cause"], registry=r)
        self.resubmitted = Counter(
            "code_judge_resubmitted_jobs", "jobs re-queued after Redis lost its data", registry=r
        )
        self.reaped = Counter("code_judge_reaped_jobs", "jobs of dead workers, by outcome", ["outcome"], registry=r)
        self.pending = Gauge("code_judge_pending_jobs", "jobs this API process is waiting for", registry=r)
        self.queue_length = Gauge("code_judge_queue_length", "jobs waiting in the Redis queue", registry=r)
        self.live_workers = Gauge("code_judge_live_workers", "workers with a fresh heartbeat", registry=r)
