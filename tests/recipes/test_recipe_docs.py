"""What the docs say about the recipe scripts holds: recipe/cleaner/README.md names every script, and every
environment variable a doc sets on a script's command line is one that script reads."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RECIPES = ROOT / "recipe" / "cleaner"
LIBRARIES = {"launch.sh", "cpu_process.sh", "eval/eval_common.sh"}
DOCS = [*sorted((ROOT / "docs").glob("*.md")), ROOT / "README.md", RECIPES / "README.md"]
# `VAR=value ... recipe/cleaner/<script>.sh` on a doc's command line
COMMAND = re.compile(r"((?:\b[A-Z_][A-Z0-9_]*=\S*[ \t]+)+)(?:\S*/)?recipe/cleaner/(\S+\.sh)")


def scripts() -> set[str]:
    return {str(path.relative_to(RECIPES)) for path in [*RECIPES.glob("*.sh"), *RECIPES.glob("eval/*.sh")]}


def reads(script: str) -> str:
    """The text a script and what it sources read variables from: the script, the libraries, the configs."""
    configs = "".join(path.read_text() for path in (RECIPES / "config").rglob("*.yaml"))
    return "".join((RECIPES / name).read_text() for name in {script, *LIBRARIES}) + configs


def test_the_recipe_readme_names_every_script():
    readme = (RECIPES / "README.md").read_text()
    unnamed = sorted(name for name in scripts() - LIBRARIES if Path(name).name not in readme)
    assert not unnamed, f"recipe/cleaner/README.md does not name {unnamed}"


def test_every_variable_a_doc_sets_for_a_script_is_read_by_it():
    found, unread = 0, []
    for doc in DOCS:
        for assignments, script in COMMAND.findall(doc.read_text()):
            text = reads(script)
            for name in re.findall(r"\b([A-Z_][A-Z0-9_]*)=", assignments):
                found += 1
                if not re.search(rf"\${{{name}\b|\${name}\b|oc\.env:{name}\b|\b{name}=", text):
                    unread.append(f"{doc.relative_to(ROOT)}: {name}=... {script}")
    assert found > 5
    assert not unread, "variables the scripts never read:\n" + "\n".join(unread)
