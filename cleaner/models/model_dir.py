"""What makes a directory a usable Hugging Face causal-LM model, and how one is published atomically.

verl's `HFModelConfig` (and `AutoModelForCausalLM` / `AutoTokenizer`) read `config.json` with exactly one
architecture, the weights, and the tokenizer files with a chat template (the agent loop renders every prompt
with it). `validate_model_dir` checks all of that up front so a wrong `model.path` fails in one line instead of
deep inside a Ray worker. `publish_dir` builds a model in a temporary sibling directory and renames it into
place, so an interrupted build never leaves a directory that looks valid.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import struct
from collections.abc import Callable
from pathlib import Path

logger = logging.getLogger(__name__)

# Written last into every directory this package builds: what it was built from, so a re-run can reuse it.
MARKER_FILE = "cleaner_model.json"
_HOW_TO_BUILD = "build one with `python -m cleaner.models convert` or `python -m cleaner.models tiny --out DIR`"


class InvalidModelDir(ValueError):
    """A path given as a model directory is not a complete Hugging Face model."""


def _fail(path: Path, problem: str) -> InvalidModelDir:
    return InvalidModelDir(f"{path} is not a model directory: {problem} ({_HOW_TO_BUILD})")


def _read_json(path: Path, model_dir: Path) -> dict:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise _fail(model_dir, f"{path.name} is not readable JSON: {exc}") from exc


def _safetensors_complete(path: Path) -> bool:
    """True when the file is as long as its header says: a truncated copy fails here, not at load time."""
    size = path.stat().st_size
    with open(path, "rb") as handle:
        prefix = handle.read(8)
        if len(prefix) != 8:
            return False
        header_len = struct.unpack("<Q", prefix)[0]
        if header_len > size - 8:
            return False
        try:
            header = json.loads(handle.read(header_len))
        except ValueError:
            return False
    ends = [entry["data_offsets"][1] for key, entry in header.items() if key != "__metadata__"]
    return 8 + header_len + max(ends, default=0) == size


def _check_weights(path: Path) -> None:
    index = path / "model.safetensors.index.json"
    if index.is_file():
        shards = sorted(set(_read_json(index, path).get("weight_map", {}).values()))
        if not shards:
            raise _fail(path, "model.safetensors.index.json lists no shards")
    else:
        shards = [p.name for p in path.glob("*.safetensors")]
        if not shards:
            raise _fail(path, "no weights (model.safetensors or model.safetensors.index.json)")
    for shard in shards:
        shard_path = path / shard
        if not shard_path.is_file():
            raise _fail(path, f"weight shard {shard} is missing")
        if not _safetensors_complete(shard_path):
            raise _fail(path, f"weight file {shard} is truncated or corrupt")


def validate_model_dir(path: str | os.PathLike) -> Path:
    """`path` as a Path if it holds config (one architecture), complete safetensors weights and a tokenizer with a
    chat template; otherwise raise `InvalidModelDir` naming the path and the first thing missing."""
    path = Path(path)
    if not path.is_dir():
        raise _fail(path, "it does not exist" if not path.exists() else "it is a file, not a directory")
    config_path = path / "config.json"
    if not config_path.is_file():
        raise _fail(path, "config.json is missing")
    config = _read_json(config_path, path)
    architectures = config.get("architectures")
    if not isinstance(architectures, list) or len(architectures) != 1:
        raise _fail(path, f"config.json must name exactly one architecture (verl requires it), has {architectures!r}")
    if not config.get("model_type"):
        raise _fail(path, "config.json has no model_type")
    _check_weights(path)
    tokenizer_config_path = path / "tokenizer_config.json"
    if not tokenizer_config_path.is_file():
        raise _fail(path, "tokenizer_config.json is missing")
    if not (path / "tokenizer.json").is_file() and not (path / "vocab.json").is_file():
        raise _fail(path, "tokenizer files are missing (tokenizer.json or vocab.json)")
    tokenizer_config = _read_json(tokenizer_config_path, path)
    if not tokenizer_config.get("chat_template") and not (path / "chat_template.jinja").is_file():
        raise _fail(path, "the tokenizer has no chat template (tokenizer_config.json chat_template)")
    return path


def read_marker(path: Path) -> dict | None:
    """The build record of a directory this package wrote, or None."""
    marker = path / MARKER_FILE
    if not marker.is_file():
        return None
    try:
        return json.loads(marker.read_text(encoding="utf-8"))
    except ValueError:
        return None


def reusable(path: Path, expected_marker: dict) -> bool:
    """True when `path` is a complete model built from exactly `expected_marker`'s inputs."""
    if read_marker(path) != expected_marker:
        return False
    try:
        validate_model_dir(path)
    except InvalidModelDir as exc:
        logger.warning("rebuilding: %s", exc)
        return False
    return True


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _remove_stale_builds(target: Path) -> None:
    """Delete temporary build dirs for `target` left by processes that died (they can hold gigabytes)."""
    for leftover in target.parent.glob(f".{target.name}.*.tmp"):
        pid = leftover.name[len(target.name) + 2 : -len(".tmp")]
        if pid.isdigit() and not _pid_alive(int(pid)):
            logger.info("removing an interrupted build: %s", leftover)
            shutil.rmtree(leftover, ignore_errors=True)


def publish_dir(target: Path, build: Callable[[Path], None], marker: dict) -> Path:
    """Run `build(tmp)` into a temporary sibling of `target`, validate it, write `marker`, then rename it to `target`.

    A failure (or a kill) never leaves `target` half-written. If another process published `target` first, its
    copy is kept and ours is discarded.
    """
    if target.is_file() or (target.is_dir() and any(target.iterdir()) and read_marker(target) is None):
        raise FileExistsError(f"{target} exists and was not built by cleaner.models: choose another path or delete it")
    target.parent.mkdir(parents=True, exist_ok=True)
    _remove_stale_builds(target)
    tmp = target.parent / f".{target.name}.{os.getpid()}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        tmp.mkdir()
        build(tmp)
        validate_model_dir(tmp)
        (tmp / MARKER_FILE).write_text(json.dumps(marker, indent=1) + "\n", encoding="utf-8")
        if target.exists() and read_marker(target) != marker:
            shutil.rmtree(target)  # an outdated or broken build of ours: replaced, never merged into
        try:
            os.rename(tmp, target)
        except OSError:
            if read_marker(target) != marker:
                raise
            logger.info("%s was built concurrently by another process; using it", target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target
