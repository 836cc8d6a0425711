"""Files shipped inside the package (agent-loop yaml, tool yaml, chat template, demo problems).

Read through `importlib.resources`, so a regular (non-editable) install finds them too.
"""

from __future__ import annotations

import atexit
from contextlib import ExitStack
from importlib.resources import as_file, files
from pathlib import Path

AGENT_LOOP_CONFIG = "agent_loop.yaml"
TOOL_CONFIG = "python_tool.yaml"
PYTHON_BLOCK_CHAT_TEMPLATE = "python_block_chat_template.jinja"
# make train-cpu: the python-block protocol with the printed value echoed in the line after a successful run
PYTHON_BLOCK_ECHO_CHAT_TEMPLATE = "python_block_echo_chat_template.jinja"
DEMO_PROBLEMS = "demo_problems.jsonl"

_extracted = ExitStack()
atexit.register(_extracted.close)


def resource_path(name: str) -> Path:
    """A file-system path of the bundled file `name` (verl and hydra load configs by path).

    From a zipped install the file is extracted once, to a temporary file removed at exit.
    """
    resource = files(__name__) / name
    if not resource.is_file():
        raise FileNotFoundError(f"cleaner ships no resource {name!r} (package cleaner.resources)")
    return _extracted.enter_context(as_file(resource))
