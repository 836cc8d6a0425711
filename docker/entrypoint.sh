#!/usr/bin/env bash
# Container entrypoint.
#   cleaner-entrypoint judge [ARGS]         code-judge (API + workers + private Redis) in the foreground
#   cleaner-entrypoint judge-worker ARGS    code-judge workers only, on a shared Redis (--redis-uri ...)
#   cleaner-entrypoint COMMAND...           COMMAND; with START_JUDGE=1 a code-judge is started in the
#                                           background first and COMMAND runs once it answers /ping
# Settings: JUDGE_HOST (0.0.0.0), JUDGE_PORT (8088), JUDGE_START_TIMEOUT (120 s), JUDGE_LOG
# (/tmp/code-judge.log); code-judge itself reads MAX_WORKERS, MAX_EXECUTION_TIME, ... from the environment.
set -euo pipefail

: "${JUDGE_HOST:=0.0.0.0}"
: "${JUDGE_PORT:=8088}"
: "${JUDGE_START_TIMEOUT:=120}"
: "${JUDGE_LOG:=/tmp/code-judge.log}"

case "${1:-}" in
    judge)
        shift
        exec code-judge serve --host "$JUDGE_HOST" --port "$JUDGE_PORT" "$@"
        ;;
    judge-worker)
        shift
        exec code-judge worker "$@"
        ;;
esac

if [[ "${START_JUDGE:-0}" == "1" ]]; then
    code-judge serve --host "$JUDGE_HOST" --port "$JUDGE_PORT" >"$JUDGE_LOG" 2>&1 &
    CLEANER_JUDGE_PID=$!
    export CLEANER_JUDGE_PID
    ping_url="http://127.0.0.1:$JUDGE_PORT/ping"
    deadline=$((SECONDS + JUDGE_START_TIMEOUT))
    until curl -fsS --max-time 2 "$ping_url" >/dev/null 2>&1; do
        if ! kill -0 "$CLEANER_JUDGE_PID" 2>/dev/null; then
            echo "code-judge exited during start-up; its log ($JUDGE_LOG):" >&2
            cat "$JUDGE_LOG" >&2
            exit 1
        fi
        if ((SECONDS >= deadline)); then
            echo "code-judge did not answer $ping_url within ${JUDGE_START_TIMEOUT}s; log: $JUDGE_LOG" >&2
            kill "$CLEANER_JUDGE_PID"
            exit 1
        fi
        sleep 0.5
    done
    echo "code-judge is up on port $JUDGE_PORT (pid $CLEANER_JUDGE_PID, log $JUDGE_LOG)" >&2
fi

exec "$@"
