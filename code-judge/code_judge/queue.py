"""The Redis work queue: a reliable list queue with per-worker leases, shared by API processes and workers.

Flow: an API process LPUSHes jobs onto `queue` (one Lua call per request or batch, which also enforces the queue
bound). A worker process runs several jobs at once; each of its slots moves the oldest job atomically into the
worker's `processing:<worker>` list (its leases), runs it, then in one Lua call pushes the verdict onto the API's
`reply:<api>` list, removes that job from its leases and leases the next one. Workers heartbeat into the
`workers` sorted set (scored by Redis' own clock, so hosts need no clock sync); a worker that stops heartbeating
is dead and `reap` puts every job it leased back at the head of the queue, or answers a job with an error once
it has been leased by `max_attempts` workers that died. Replies are framed as `<job id> <body>`: a JSON verdict,
or `!worker_died` for a job given up on.
"""

from __future__ import annotations

import os
import secrets
import socket
from dataclasses import dataclass

import redis
import redis.asyncio as aioredis
from redis.backoff import ExponentialBackoff
from redis.retry import Retry

KEY_VERSION = "cleaner1"  # keys differ from upstream's (`js:0.0.5:...`), so both can share one Redis
WORKER_DIED = b"!worker_died"

_ENQUEUE = """
if redis.call('LLEN', KEYS[1]) + #ARGV - 1 > tonumber(ARGV[1]) then return -1 end
for i = 2, #ARGV do redis.call('LPUSH', KEYS[1], ARGV[i]) end
return redis.call('LLEN', KEYS[1])
"""

# KEYS: processing, queue, reply. ARGV: reply message ('' = none), reply expiry (s), the finished job as leased
# ('' = none), '1' to lease the next job.
_FINISH = """
if ARGV[1] ~= '' then
  redis.call('RPUSH', KEYS[3], ARGV[1])
  redis.call('EXPIRE', KEYS[3], ARGV[2])
end
if ARGV[3] ~= '' then redis.call('LREM', KEYS[1], 1, ARGV[3]) end
if ARGV[4] == '1' then return redis.call('LMOVE', KEYS[2], KEYS[1], 'RIGHT', 'LEFT') end
return false
"""

# KEYS: processing, queue. Every leased job goes back to the head of the queue, the oldest lease first in line.
_GIVE_BACK = """
local moved = 0
while redis.call('LMOVE', KEYS[1], KEYS[2], 'LEFT', 'RIGHT') do moved = moved + 1 end
return moved
"""

_HEARTBEAT = """
local t = redis.call('TIME')
redis.call('ZADD', KEYS[1], t[1] * 1000 + math.floor(t[2] / 1000), ARGV[1])
"""

_LIVE_WORKERS = """
local t = redis.call('TIME')
return redis.call('ZRANGEBYSCORE', KEYS[1], t[1] * 1000 + math.floor(t[2] / 1000) - tonumber(ARGV[1]), '+inf')
"""

# KEYS: workers, queue. ARGV: heartbeat timeout (ms), max attempts, key base, reply expiry (s), worker id ('' =
# every worker whose heartbeat is older than the timeout). Returns {requeued, given up}. The job is put back
# byte for byte (re-encoding with cjson would round big integers); its re-runs are counted under its own key.
_REAP = """
local dead
if ARGV[5] ~= '' then
  dead = {ARGV[5]}
else
  local t = redis.call('TIME')
  dead = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', t[1] * 1000 + math.floor(t[2] / 1000) - tonumber(ARGV[1]))
end
local requeued, given_up = 0, 0
for _, worker in ipairs(dead) do
  local lease = ARGV[3] .. ':processing:' .. worker
  while true do
    local raw = redis.call('RPOP', lease)
    if not raw then break end
    local job = cjson.decode(raw)
    local reruns_key = ARGV[3] .. ':reruns:' .. job.id
    local attempts = 1 + redis.call('INCR', reruns_key)
    redis.call('EXPIRE', reruns_key, 86400)
    if attempts > tonumber(ARGV[2]) then
      redis.call('RPUSH', job.reply, job.id .. ' !worker_died')
      redis.call('EXPIRE', job.reply, ARGV[4])
      given_up = given_up + 1
    else
      redis.call('RPUSH', KEYS[2], raw)
      requeued = requeued + 1
    end
  end
  redis.call('ZREM', KEYS[1], worker)
end
return {requeued, given_up}
"""


@dataclass(frozen=True)
class QueueKeys:
    prefix: str

    @property
    def base(self) -> str:
        return f"{self.prefix}:{KEY_VERSION}"

    @property
    def queue(self) -> str:
        return f"{self.base}:queue"

    @property
    def workers(self) -> str:
        return f"{self.base}:workers"

    def processing(self, worker_id: str) -> str:
        return f"{self.base}:processing:{worker_id}"

    def reply(self, api_id: str) -> str:
        return f"{self.base}:reply:{api_id}"


@dataclass(frozen=True)
class ReapPolicy:
    heartbeat_timeout_s: float
    max_attempts: int
    reply_expire_s: float

    def args(self, keys: QueueKeys, worker_id: str) -> list[object]:
        return [
            int(self.heartbeat_timeout_s * 1000),
            self.max_attempts,
            keys.base,
            int(self.reply_expire_s),
            worker_id,
        ]


def new_worker_id(sandbox_mode: str) -> str:
    # The sandbox mode leads the id so /status can report it without another lookup.
    return f"{sandbox_mode}/{socket.gethostname()}/{os.getpid()}/{secrets.token_hex(3)}"


def sandbox_mode_of(worker_id: str) -> str:
    return worker_id.split("/", 1)[0]


def _retry() -> Retry:
    return Retry(ExponentialBackoff(cap=1.0, base=0.05), retries=3)


def connect_sync(uri: str, socket_timeout_s: float) -> redis.Redis:
    return redis.Redis.from_url(
        uri,
        socket_timeout=socket_timeout_s,
        socket_connect_timeout=socket_timeout_s,
        retry=_retry(),
        retry_on_error=[redis.ConnectionError, redis.TimeoutError],
        health_check_interval=30,
    )


def connect_async(uri: str, socket_timeout_s: float, max_connections: int = 32) -> aioredis.Redis:
    # A blocking pool: with more requests in flight than connections, callers wait for a free connection
    # (up to the socket timeout) instead of failing with MaxConnectionsError.
    pool = aioredis.BlockingConnectionPool.from_url(
        uri,
        max_connections=max_connections,
        timeout=socket_timeout_s,
        socket_timeout=socket_timeout_s,
        socket_connect_timeout=socket_timeout_s,
        retry=_retry(),
        retry_on_error=[redis.ConnectionError, redis.TimeoutError],
    )
    return aioredis.Redis.from_pool(pool)  # the client owns the pool: aclose() closes its connections


class WorkerQueue:
    """A worker's side of the queue (blocking). Thread-safe: each slot of the worker uses it with its own jobs."""

    def __init__(self, client: redis.Redis, keys: QueueKeys, worker_id: str, reply_expire_s: float):
        self._client = client
        self._keys = keys
        self.worker_id = worker_id
        self._lease = keys.processing(worker_id)
        self._reply_expire_s = int(reply_expire_s)
        self._finish = client.register_script(_FINISH)
        self._give_back = client.register_script(_GIVE_BACK)
        self._heartbeat = client.register_script(_HEARTBEAT)

    def heartbeat(self) -> None:
        self._heartbeat(keys=[self._keys.workers], args=[self.worker_id])

    def take(self, block_s: float) -> bytes | None:
        """Lease the oldest job, waiting up to `block_s` for one."""
        return self._client.blmove(self._keys.queue, self._lease, block_s, "RIGHT", "LEFT")

    def finish(self, job: bytes, reply_key: str | None, message: bytes | None, take_next: bool) -> bytes | None:
        """Deliver a job's verdict (if any) and drop its lease; with `take_next`, lease the next job without blocking."""
        args = [message or b"", self._reply_expire_s, job, "1" if take_next else "0"]
        return self._finish(keys=[self._lease, self._keys.queue, reply_key or self._lease], args=args)

    def give_back(self) -> int:
        """Return every leased job to the head of the queue (clean shutdown, once no slot runs anything)."""
        return int(self._give_back(keys=[self._lease, self._keys.queue]))

    def deregister(self) -> None:
        self._client.zrem(self._keys.workers, self.worker_id)


def reap_sync(client: redis.Redis, keys: QueueKeys, policy: ReapPolicy, worker_id: str) -> tuple[int, int]:
    """Return the job leased by `worker_id` (known dead) to the queue; (requeued, given up)."""
    requeued, given_up = client.eval(_REAP, 2, keys.workers, keys.queue, *policy.args(keys, worker_id))
    return int(requeued), int(given_up)


class ApiQueue:
    """An API process' side of the queue (asyncio)."""

    def __init__(self, client: aioredis.Redis, keys: QueueKeys, api_id: str):
        self._client = client
        self._keys = keys
        self.reply_key = keys.reply(api_id)
        self._enqueue = client.register_script(_ENQUEUE)
        self._live_workers = client.register_script(_LIVE_WORKERS)
        self._reap = client.register_script(_REAP)

    async def enqueue(self, jobs: list[bytes], max_queue_length: int) -> bool:
        """Queue all jobs atomically; False (nothing queued) when that would exceed the queue bound."""
        return int(await self._enqueue(keys=[self._keys.queue], args=[max_queue_length, *jobs])) >= 0

    async def pop_replies(self, block_s: float, count: int = 512) -> list[bytes]:
        answer = await self._client.blmpop(block_s, 1, self.reply_key, direction="LEFT", count=count)
        return [] if answer is None else answer[1]

    async def queue_length(self) -> int:
        return int(await self._client.llen(self._keys.queue))

    async def live_workers(self, heartbeat_timeout_s: float) -> list[str]:
        ids = await self._live_workers(keys=[self._keys.workers], args=[int(heartbeat_timeout_s * 1000)])
        return [i.decode() for i in ids]

    async def reap_dead_workers(self, policy: ReapPolicy) -> tuple[int, int]:
        requeued, given_up = await self._reap(
            keys=[self._keys.workers, self._keys.queue], args=policy.args(self._keys, "")
        )
        return int(requeued), int(given_up)

    async def server_run_id(self) -> str:
        """Changes when Redis restarts, i.e. when queued jobs may have been lost."""
        return (await self._client.info("server"))["run_id"]
