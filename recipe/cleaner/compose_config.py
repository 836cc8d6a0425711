"""The recipes' config command (DRY_RUN, preflight, override translation, tool yaml): `cleaner.recipes.dry_run`.

python recipe/cleaner/compose_config.py OVERRIDE...              # DRY_RUN: compose, validate, print, exit
python recipe/cleaner/compose_config.py --preflight OVERRIDE...  # print what would stop a run, one per line
python recipe/cleaner/compose_config.py --translate RECIPE_OVERRIDE... -- USER_OVERRIDE...
python recipe/cleaner/compose_config.py --write-tool-config SRC DST JUDGE_URL
"""

import sys

from cleaner.recipes.dry_run import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
