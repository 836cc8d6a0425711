"""`code-judge serve | api | worker`: run the API and the workers together, or apart for scale-out."""

from __future__ import annotations

import argparse
import functools
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, replace

import uvicorn

from code_judge.redis_server import EmbeddedRedis, RedisStartError
from code_judge.settings import JudgeSettings, SettingsError
from code_judge.worker import SandboxFactory, WorkerGroup

logger = logging.getLogger("code_judge")


class SetupError(Exception):
    """A configuration problem the user must fix; printed without a traceback."""


def sandbox_factory(settings: JudgeSettings, insecure: bool) -> tuple[SandboxFactory, str]:
    """A picklable factory for the workers' sandboxes, after checking this machine can run it."""
    from code_judge.sandbox import Sandbox, SandboxConfig, SandboxUnavailable, check_sandbox_support

    config = SandboxConfig(
        mode="insecure" if insecure else "bwrap",
        python=settings.python_executor_path,
        preload=settings.preload_modules,
        demote_after_s=settings.demote_after,
        demote_cpu_s=settings.demote_cpu,
        demoted_nice=settings.demoted_nice,
        starved_cpu_share=settings.starved_cpu_share,
        # As many warm zygotes as young runs can overlap, so a burst of short programs never waits for one.
        warm_zygotes=settings.worker_short_slots,
    )
    try:
        check_sandbox_support(config)
    except SandboxUnavailable as exc:
        raise SetupError(
            f"the bubblewrap sandbox cannot run here: {exc}. Fix it, or pass --insecure to run untrusted code "
            "WITHOUT a sandbox (only for code you trust)"
        ) from exc
    if insecure:
        logger.warning("sandbox DISABLED (--insecure): submitted code runs with this service's privileges")
    return functools.partial(Sandbox, config), config.mode


def _settings(args: argparse.Namespace) -> JudgeSettings:
    settings = JudgeSettings.from_env()
    if getattr(args, "redis_uri", None):
        settings = replace(settings, redis_uri=args.redis_uri)
    if getattr(args, "workers", None) is not None:
        settings = replace(settings, max_workers=args.workers)
    return settings


@dataclass
class _Workers:
    group: WorkerGroup
    supervisor: threading.Thread
    failed: threading.Event  # supervision raised: the command shuts down and exits 1


def _start_workers(settings: JudgeSettings, insecure: bool, tick: Callable[[], object] | None) -> _Workers:
    factory, mode = sandbox_factory(settings, insecure)
    group = WorkerGroup(settings, settings.max_workers, factory, mode)
    failed = threading.Event()

    def supervise() -> None:
        try:
            group.supervise(tick)
        except Exception:
            # Without supervision dead workers stay dead (and a dead embedded Redis stays down): stop serving.
            logger.exception("worker supervision failed; shutting down")
            failed.set()
            os.kill(os.getpid(), signal.SIGTERM)

    group.start()
    supervisor = threading.Thread(target=supervise, name="worker-supervisor", daemon=True)
    supervisor.start()
    logger.info(
        "%d workers of %d slots (%d short) started (sandbox: %s)",
        settings.max_workers,
        settings.worker_slots,
        settings.worker_short_slots,
        mode,
    )
    return _Workers(group, supervisor, failed)


def _serve_http(settings: JudgeSettings, host: str, port: int) -> None:
    from code_judge.app import create_app

    server = uvicorn.Server(
        uvicorn.Config(
            create_app(settings),
            host=host,
            port=port,
            loop="uvloop",
            http="httptools",
            log_level="warning",
            access_log=False,
        )
    )

    # uvicorn re-raises the signal that stopped it once it is done; this handler turns that into a normal
    # return so the caller's cleanup (workers, embedded redis) runs.
    def stop(*_: object) -> None:
        server.should_exit = True

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    logger.info("code-judge API on http://%s:%d", host, port)
    server.run()
    if not server.started:
        raise SetupError(f"the HTTP server could not start on {host}:{port} (see the log above)")


def cmd_serve(args: argparse.Namespace) -> int:
    settings = _settings(args)
    embedded: EmbeddedRedis | None = None
    workers: _Workers | None = None
    try:
        if settings.redis_uri is None:
            embedded = EmbeddedRedis()
            settings = replace(settings, redis_uri=embedded.start())
        workers = _start_workers(settings, args.insecure, None if embedded is None else embedded.restart_if_dead)
        _serve_http(settings, args.host, args.port)
    finally:
        if workers is not None:
            workers.group.stop(grace_s=settings.max_execution_time + 2)
        if embedded is not None:
            embedded.stop()
    return 1 if workers.failed.is_set() else 0


def cmd_api(args: argparse.Namespace) -> int:
    settings = _settings(args)
    if settings.redis_uri is None:
        raise SetupError("`code-judge api` needs --redis-uri or REDIS_URI")
    _serve_http(settings, args.host, args.port)
    return 0


def cmd_worker(args: argparse.Namespace) -> int:
    settings = _settings(args)
    if settings.redis_uri is None:
        raise SetupError("`code-judge worker` needs --redis-uri or REDIS_URI")
    stopping = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopping.set())
    signal.signal(signal.SIGINT, lambda *_: stopping.set())
    workers = _start_workers(settings, args.insecure, None)
    try:
        while not stopping.wait(1.0):  # a timed wait keeps the main thread responsive to signals
            pass
    finally:
        workers.group.stop(grace_s=settings.max_execution_time + 2)
    return 1 if workers.failed.is_set() else 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="code-judge", description=__doc__)
    parser.add_argument("--log-level", default="INFO")
    sub = parser.add_subparsers(dest="command", required=True)

    def add_http(p: argparse.ArgumentParser) -> None:
        p.add_argument("--host", default="127.0.0.1")
        p.add_argument("--port", type=int, default=8088)

    def add_workers(p: argparse.ArgumentParser) -> None:
        p.add_argument("--workers", type=int, default=None, help="worker processes (default: MAX_WORKERS)")
        p.add_argument(
            "--insecure", action="store_true", help="run code WITHOUT the bubblewrap sandbox (trusted code only)"
        )

    serve = sub.add_parser("serve", help="API + workers (+ a private redis-server when REDIS_URI is unset)")
    add_http(serve)
    add_workers(serve)
    serve.set_defaults(func=cmd_serve)

    api = sub.add_parser("api", help="the HTTP API only, on a shared Redis")
    add_http(api)
    api.add_argument("--redis-uri", default=None, help="default: REDIS_URI")
    api.set_defaults(func=cmd_api)

    worker = sub.add_parser("worker", help="a group of workers on a shared Redis (scale-out)")
    worker.add_argument("--redis-uri", default=None, help="default: REDIS_URI")
    add_workers(worker)
    worker.set_defaults(func=cmd_worker)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        return args.func(args)
    except (SetupError, RedisStartError, SettingsError) as exc:
        print(f"code-judge: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
