"""cleaner's verl plugin: registers the `cleaner_tool_agent` agent loop (`AGENT_NAME`), and checks loudly that it did.

verl imports this module for the `verl.plugins` entry point during `import verl` (when
VERL_USE_EXTERNAL_PLUGINS is `auto`, the default, or a list naming `cleaner`) and swallows any
exception it raises, logging it only at DEBUG. A broken plugin would then surface much later, inside a
Ray worker, as "Agent loop cleaner_tool_agent not registered". Hence three loud paths:

- a failed import is logged at ERROR here, with the cause, before verl swallows the exception;
- `require_registered()` raises `PluginError` naming the import failure (the cleaner agent-loop worker
  calls it at start-up);
- `python -m cleaner.verl.plugin --check` checks the entry point, the plugin policy, the registration
  and the agent-loop yaml, and exits non-zero on any failure.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
from dataclasses import dataclass
from importlib.metadata import entry_points
from pathlib import Path

from cleaner.names import AGENT_NAME
from cleaner.resources import AGENT_LOOP_CONFIG, resource_path

logger = logging.getLogger(__name__)

PLUGIN_MODULE = "cleaner.verl.plugin"
AGENT_LOOP_MODULE = "cleaner.verl.agent_loop"
# Registers the `cleaner_lenient*` tool-call parsers, so `multi_turn.format` can name them without our tool.
TOOL_PARSER_MODULE = "cleaner.verl.tool_parser"
START_CHECK_MODULE = "cleaner.verl.start_check"
AGENT_LOOP_TARGET = f"{AGENT_LOOP_MODULE}.CleanerToolAgentLoop"
ENTRY_POINT_GROUP = "verl.plugins"
ENTRY_POINT_NAME = "cleaner"
PLUGIN_POLICY_ENV = "VERL_USE_EXTERNAL_PLUGINS"


class PluginError(RuntimeError):
    """The cleaner agent loop could not be registered with verl."""


def register() -> None:
    """Import the agent loop and the tool parsers, whose decorators add them to verl's registries."""
    # Then the tool-DPO advantage estimators (docs/negative-samples.md), and the start-up check that runs the config
    # checks where main_ppo validates its config, before any worker starts (cleaner.verl.start_check).
    for module in (AGENT_LOOP_MODULE, TOOL_PARSER_MODULE, "cleaner.verl.tool_dpo.estimator", START_CHECK_MODULE):
        _import_loudly(module)


def _import_loudly(module: str) -> None:
    try:
        importlib.import_module(module)
    except Exception as exc:
        message = (
            f"cleaner verl plugin: importing {module} failed ({type(exc).__name__}: {exc}); "
            f"agent loop '{AGENT_NAME}' is NOT registered (nor are the cleaner tool parsers)"
        )
        # verl swallows this exception at `import verl` and logs it at DEBUG only: say it loudly first.
        logger.error(message, exc_info=exc)
        raise PluginError(message) from exc


def registered_target() -> str | None:
    """The `_target_` verl would instantiate for `AGENT_NAME` in this process, if registered."""
    from verl.experimental.agent_loop.agent_loop import _agent_loop_registry

    entry = _agent_loop_registry.get(AGENT_NAME)
    return None if entry is None else str(entry["_target_"])


def require_registered() -> None:
    """Make sure `AGENT_NAME` is registered in this process; raise `PluginError` with the cause if not."""
    if registered_target() is None:
        register()
    target = registered_target()
    if target != AGENT_LOOP_TARGET:
        raise PluginError(
            f"agent loop '{AGENT_NAME}' is registered as {target!r}, expected {AGENT_LOOP_TARGET!r} "
            f"(did {AGENT_LOOP_MODULE} stop using @register('{AGENT_NAME}')?)"
        )


def plugin_policy_allows_cleaner(policy: str) -> bool:
    """Mirror of verl's VERL_USE_EXTERNAL_PLUGINS rule: `auto` loads all, `none` none, else a name list."""
    policy = policy.strip().lower()
    if policy == "auto":
        return True
    if policy == "none":
        return False
    return ENTRY_POINT_NAME in {name.strip() for name in policy.split(",")}


@dataclass(frozen=True)
class CheckResult:
    name: str
    ok: bool
    detail: str


def check_entry_point() -> CheckResult:
    found = [ep for ep in entry_points(group=ENTRY_POINT_GROUP) if ep.name == ENTRY_POINT_NAME]
    if not found:
        return CheckResult(
            "entry point",
            False,
            f"no '{ENTRY_POINT_NAME}' entry point in group {ENTRY_POINT_GROUP}: is cleaner installed?",
        )
    if found[0].value != PLUGIN_MODULE:
        return CheckResult(
            "entry point", False, f"'{ENTRY_POINT_NAME}' points at {found[0].value}, not {PLUGIN_MODULE}"
        )
    return CheckResult("entry point", True, f"{ENTRY_POINT_GROUP}: {ENTRY_POINT_NAME} = {found[0].value}")


def check_import_verl_registers() -> CheckResult:
    """`import verl` alone (the entry-point route) must register the agent loop."""
    policy = os.environ.get(PLUGIN_POLICY_ENV, "auto")
    name = "import verl registers the agent loop"
    if not plugin_policy_allows_cleaner(policy):
        return CheckResult(
            name,
            False,
            f"{PLUGIN_POLICY_ENV}={policy!r} keeps verl from loading the plugin; "
            "unset it, add 'cleaner' to it, or use the agent-loop yaml route",
        )
    import verl  # noqa: F401  (loads the entry points)

    if registered_target() is None:
        try:
            register()
        except PluginError as exc:
            return CheckResult(name, False, f"{exc}; cause: {exc.__cause__!r}")
        return CheckResult(name, False, "verl did not load the plugin although its policy allows it")
    try:
        require_registered()
    except PluginError as exc:
        return CheckResult(name, False, str(exc))
    return CheckResult(name, True, f"{AGENT_NAME} -> {AGENT_LOOP_TARGET}")


def check_agent_loop_config(path: Path) -> CheckResult:
    """The yaml route: the file verl would load lists `AGENT_NAME` with an importable agent loop."""
    import hydra.utils
    from omegaconf import OmegaConf
    from verl.experimental.agent_loop.tool_agent_loop import ToolAgentLoop

    name = f"agent loop config {path}"
    if not path.is_file():
        return CheckResult(name, False, "file not found")
    entries = [entry for entry in OmegaConf.load(path) if entry.get("name") == AGENT_NAME]
    if len(entries) != 1:
        return CheckResult(name, False, f"expected exactly one entry named {AGENT_NAME}, found {len(entries)}")
    target = entries[0].get("_target_")
    try:
        agent_loop_class = hydra.utils.get_class(target)
    except Exception as exc:
        return CheckResult(name, False, f"_target_ {target!r} does not import: {exc.__cause__ or exc!r}")
    if not issubclass(agent_loop_class, ToolAgentLoop):
        return CheckResult(name, False, f"_target_ {target!r} is not a verl ToolAgentLoop subclass")
    return CheckResult(name, True, f"{AGENT_NAME} -> {target}")


def run_checks(agent_loop_config: Path | None) -> list[CheckResult]:
    results = [check_entry_point(), check_import_verl_registers()]
    if agent_loop_config is not None:
        results.append(check_agent_loop_config(agent_loop_config))
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m cleaner.verl.plugin", description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", required=True, help="check both registration routes")
    parser.add_argument(
        "--agent-loop-config",
        type=Path,
        default=None,
        help="agent-loop yaml to check (default: the one cleaner ships, cleaner/resources/agent_loop.yaml)",
    )
    args = parser.parse_args(argv)
    results = run_checks(args.agent_loop_config or resource_path(AGENT_LOOP_CONFIG))
    for result in results:
        print(f"{'ok  ' if result.ok else 'FAIL'}  {result.name}: {result.detail}")
    return 0 if all(result.ok for result in results) else 1


if __name__ == "__main__":
    sys.exit(main())
else:
    # Importing the module is the registration (that is all verl's entry-point loader does).
    register()
