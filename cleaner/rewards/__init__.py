"""verl custom reward function for CLEANER: math, GPQA and code answers.

Point verl at it by file (`reward.custom_reward_function.path=<repo>/cleaner/rewards/__init__.py`) or by
package (`path=pkg://cleaner.rewards`), with `name=compute_score`. Imports are absolute so that loading this
file by path still shares one module state (worker pools, judge clients) with `import cleaner.rewards`.
"""

from cleaner.rewards.config import RewardConfig
from cleaner.rewards.dispatch import RewardKind, compute_score, reward_kind
from cleaner.rewards.result import Reason, RewardResult

__all__ = ["Reason", "RewardConfig", "RewardKind", "RewardResult", "compute_score", "reward_kind"]
