"""The verl tool yaml with its tools pointed at a judge (`cleaner rollout --judge-url`; the recipes need no copy: the
shipped yaml reads JUDGE_URL)."""

from __future__ import annotations

from pathlib import Path

import yaml


def write_tool_config(source: Path, target: Path, judge_url: str) -> Path:
    """Copy the tool yaml `source` to `target`, with every tool's `judge_url` set to `judge_url`."""
    config = yaml.safe_load(Path(source).read_text(encoding="utf-8"))
    tools = config.get("tools") if isinstance(config, dict) else None
    if not tools:
        raise ValueError(f"{source}: not a verl tool config (no `tools:` list)")
    for tool in tools:
        tool.setdefault("config", {})["judge_url"] = judge_url
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    return target
