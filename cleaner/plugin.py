"""The public path `cleaner.plugin`: recipes name `cleaner.plugin.SaarMultiTurnConfig` (`cleaner.verl.multi_turn_config`).

`python -m cleaner.plugin --check` runs `python -m cleaner.verl.plugin --check` (the plugin's checks).
"""

if __name__ == "__main__":
    import runpy

    runpy.run_module("cleaner.verl.plugin", run_name="__main__", alter_sys=True)
else:
    from cleaner.verl.multi_turn_config import MULTI_TURN_TARGET, SaarMultiTurnConfig

    __all__ = ["MULTI_TURN_TARGET", "SaarMultiTurnConfig"]
