"""The recipes' tool yaml pointed at another judge: a copy of the shipped one with its `judge_url` set.

    python -m cleaner.recipes.judge_tool_config JUDGE_URL OUT_FILE   # writes OUT_FILE, prints its path

`recipe/cleaner/launch.sh` runs it when JUDGE_URL is not the default, and passes the copy to the run in
CLEANER_TOOL_CONFIG (the recipes' `multi_turn.tool_config_path` reads it), so the reward and the tool call one judge.
"""

from __future__ import annotations

import sys
from pathlib import Path

from cleaner.resources import TOOL_CONFIG, resource_path
from cleaner.tools.tool_config import write_tool_config


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    judge_url, target = argv
    print(write_tool_config(resource_path(TOOL_CONFIG), Path(target), judge_url))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
