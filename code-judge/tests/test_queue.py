"""The Redis queue's guarantees, against a real redis-server."""

from __future__ import annotations

import json

import pytest

from code_judge.queue import (
    WORKER_DIED,
    ApiQueue,
    QueueKeys,
    ReapPolicy,
    WorkerQueue,
    connect_async,
    connect_sync,
    reap_sync,
)

KEYS = QueueKeys("test")


def job(job_id: str, reply: str) -> bytes:
    # A 17-digit sub_id: re-queueing must not round it.
    return json.dumps({"id": job_id, "reply": reply, "code": "print(1)", "sub_id": 12345678901234567}).encode()


@pytest.fixture
def sync_client(redis_process):
    client = connect_sync(redis_process.uri, 5)
    yield client
    client.close()


@pytest.fixture
async def api_queue(redis_process):
    client = connect_async(redis_process.uri, 5)
    yield ApiQueue(client, KEYS, "api1")
    await client.aclose()


async def test_enqueue_refuses_a_batch_that_would_overflow_the_queue(api_queue, sync_client):
    reply = api_queue.reply_key
    assert await api_queue.enqueue([job("a", reply), job("b", reply)], max_queue_length=3)
    assert not await api_queue.enqueue([job("c", reply), job("d", reply)], max_queue_length=3)
    assert await api_queue.queue_length() == 2  # all or nothing


async def test_jobs_are_served_in_order_and_replies_reach_the_api(api_queue, sync_client):
    reply = api_queue.reply_key
    await api_queue.enqueue([job("first", reply)], 100)
    await api_queue.enqueue([job("second", reply)], 100)
    worker = WorkerQueue(sync_client, KEYS, "w1", reply_expire_s=60)
    leased = worker.take(block_s=1)
    assert json.loads(leased)["id"] == "first"
    assert sync_client.lrange(KEYS.processing("w1"), 0, -1) == [leased]  # the lease
    following = worker.finish(leased, reply, b"first {}", take_next=True)
    assert json.loads(following)["id"] == "second"
    assert sync_client.lrange(KEYS.processing("w1"), 0, -1) == [following]
    assert sync_client.ttl(reply) > 0  # an abandoned reply list does not live forever
    assert await api_queue.pop_replies(block_s=1) == [b"first {}"]
    assert worker.finish(following, reply, b"second {}", take_next=True) is None
    assert sync_client.llen(KEYS.processing("w1")) == 0


async def test_slots_of_one_worker_hold_separate_leases(api_queue, sync_client):
    policy = ReapPolicy(heartbeat_timeout_s=5, max_attempts=2, reply_expire_s=60)
    reply = api_queue.reply_key
    await api_queue.enqueue([job(name, reply) for name in ("a", "b", "c", "d")], 100)
    worker = WorkerQueue(sync_client, KEYS, "w1", reply_expire_s=60)
    slot_a, slot_b, slot_c = worker.take(1), worker.take(1), worker.take(1)
    # Finishing one slot's job drops that lease only; a long run's slot takes nothing next.
    assert worker.finish(slot_b, reply, b"b {}", take_next=False) is None
    assert sync_client.lrange(KEYS.processing("w1"), 0, -1) == [slot_c, slot_a]
    # A clean stop gives back what was leased, oldest first in line, ahead of what was still queued.
    assert worker.give_back() == 2
    assert [json.loads(worker.take(1))["id"] for _ in range(3)] == ["a", "c", "d"]
    # A dead worker's leases are all re-queued.
    assert reap_sync(sync_client, KEYS, policy, "w1") == (3, 0)
    assert await api_queue.queue_length() == 3


async def test_job_of_a_dead_worker_is_rerun_then_given_up(api_queue, sync_client):
    policy = ReapPolicy(heartbeat_timeout_s=5, max_attempts=2, reply_expire_s=60)
    reply = api_queue.reply_key
    await api_queue.enqueue([job("waiting", reply), job("deadly", reply)], 100)
    await api_queue.enqueue([job("later", reply)], 100)
    first = WorkerQueue(sync_client, KEYS, "w1", 60)
    assert json.loads(first.take(1))["id"] == "waiting"
    assert reap_sync(sync_client, KEYS, policy, "w1") == (1, 0)
    # The re-queued job goes first, ahead of jobs queued after it, with its attempt counted.
    second = WorkerQueue(sync_client, KEYS, "w2", 60)
    assert second.take(1) == job("waiting", reply)  # byte for byte
    assert reap_sync(sync_client, KEYS, policy, "w2") == (0, 1)
    assert await api_queue.pop_replies(1) == [b"waiting " + WORKER_DIED]


async def test_a_silent_worker_is_found_dead_by_its_heartbeat(api_queue, sync_client):
    policy = ReapPolicy(heartbeat_timeout_s=30.0, max_attempts=2, reply_expire_s=60)
    await api_queue.enqueue([job("x", api_queue.reply_key)], 100)
    silent, alive = WorkerQueue(sync_client, KEYS, "bwrap/h/1/a", 60), WorkerQueue(sync_client, KEYS, "bwrap/h/1/b", 60)
    silent.heartbeat()
    silent.take(1)
    # The silent worker's last beat, moved a minute into the past (the score is Redis time in ms).
    sync_client.zincrby(KEYS.workers, -60_000, "bwrap/h/1/a")
    alive.heartbeat()
    assert await api_queue.live_workers(30.0) == ["bwrap/h/1/b"]
    assert await api_queue.reap_dead_workers(policy) == (1, 0)
    assert json.loads(alive.take(1))["id"] == "x"
    assert await api_queue.reap_dead_workers(policy) == (0, 0)  # the live worker keeps its lease
