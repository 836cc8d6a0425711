"""Values of a composed recipe config, for a script that reports what its run used.

    python -m cleaner.recipes.config_values CONFIG_DIR CONFIG_NAME KEY... -- OVERRIDE...

prints `<last part of KEY>=<value>` per KEY, one a line, from the config `main_ppo --config-dir CONFIG_DIR
--config-name CONFIG_NAME OVERRIDE...` composes (recipe/cleaner/eval/eval_common.sh labels its results table with
the validation sampling this way, overrides included).
"""

from __future__ import annotations

import sys
from pathlib import Path

from omegaconf import OmegaConf

from cleaner.verl.trainer_config import compose_trainer_config


def config_values(config_dir: Path, config_name: str, keys: list[str], overrides: list[str]) -> list[str]:
    config = compose_trainer_config(overrides, config_name, config_dir)
    missing = object()
    values = []
    for key in keys:
        value = OmegaConf.select(config, key, default=missing)
        if value is missing:
            raise KeyError(f"{config_name}: no key {key}")
        values.append(f"{key.rsplit('.', 1)[-1]}={value}")
    return values


def main(argv: list[str]) -> int:
    head, overrides = (argv[: argv.index("--")], argv[argv.index("--") + 1 :]) if "--" in argv else (argv, [])
    if len(head) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    config_dir, config_name, *keys = head
    print("\n".join(config_values(Path(config_dir), config_name, keys, overrides)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
