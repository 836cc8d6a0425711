"""The recipes' tooling outside a training run: the translation of the reference's override lines
(`cleaner.recipes.overrides`). Composing a config is `cleaner.verl.trainer_config`; the trainer-start check and
DRY_RUN are `cleaner.verl.start_check`."""
