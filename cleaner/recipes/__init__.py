"""The recipes' tooling outside a training run: composing a recipe, its DRY_RUN, the translation of the reference's
override lines. What verl loads while it trains lives in `cleaner.verl`."""
