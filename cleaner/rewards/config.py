"""Reward options, read from the keyword arguments verl passes (`reward.custom_reward_function.reward_kwargs`)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from cleaner.tools.cell import AUTO_IMPORTS

MATH_EQUIVALENCES = ("math_verify", "strict")
CODE_SCORINGS = ("fraction", "all_pass")
SCORERS = ("math", "gpqa", "code")  # the values of `data_sources` and `default_source`
# verl's reward managers add these for reward-model routing; a rule-based reward has no use for them.
VERL_INJECTED_KWARGS = frozenset({"reward_router_address", "reward_model_tokenizer"})


# Python types each option accepts (hydra passes YAML scalars as int / float / str / bool / None).
_OPTION_TYPES: dict[str, tuple[type, ...]] = {
    "math_equivalence": (str,),
    "math_timeout_s": (int, float),
    "math_workers": (int,),
    "code_scoring": (str,),
    "code_max_tests": (int, type(None)),
    "code_auto_imports": (str,),
    "judge_url": (str,),
    "judge_request_timeout_s": (int, float),
    "judge_max_retries": (int,),
    "infra_error_score": (int, float),
    "data_sources": (dict,),
    "default_source": (str, type(None)),
}


@dataclass(frozen=True)
class RewardConfig:
    math_equivalence: str = "math_verify"  # or "strict": the boxed answer must equal the ground truth string
    math_timeout_s: float = 10.0  # hard limit for one math-verify check, enforced from outside its process
    math_workers: int = 2  # processes that run math-verify (it needs a main thread for its own timeouts)
    code_scoring: str = "fraction"  # score = fraction of tests passed, or "all_pass": 1 only if all pass
    code_max_tests: int | None = None  # run only the first N hidden tests of a problem (None: all)
    # Names a solution may use without importing them: as on the reference's judge (cleaner.tools.cell.AUTO_IMPORTS)
    code_auto_imports: str = "reference_judge"
    judge_url: str = "http://127.0.0.1:8088"
    judge_request_timeout_s: float = 120.0
    judge_max_retries: int = 3
    infra_error_score: float = 0.0  # score of a row the judge could not check; `infra_error` marks it
    data_sources: dict[str, str] = field(default_factory=dict)  # extra data_source -> "math" | "gpqa" | "code"
    # The scorer of every data_source no pattern or `data_sources` entry knows ("math" | "gpqa" | "code"); None:
    # such a source is an error. The reference scored every non-code source as math.
    default_source: str | None = None

    def __post_init__(self) -> None:
        if self.math_equivalence not in MATH_EQUIVALENCES:
            raise ValueError(f"math_equivalence must be one of {MATH_EQUIVALENCES}, got {self.math_equivalence!r}")
        if self.code_scoring not in CODE_SCORINGS:
            raise ValueError(f"code_scoring must be one of {CODE_SCORINGS}, got {self.code_scoring!r}")
        if self.math_timeout_s <= 0:
            raise ValueError(f"math_timeout_s must be positive, got {self.math_timeout_s}")
        if self.math_workers < 1:
            raise ValueError(f"math_workers must be at least 1, got {self.math_workers}")
        if self.code_auto_imports not in AUTO_IMPORTS:
            raise ValueError(f"code_auto_imports must be one of {sorted(AUTO_IMPORTS)}, got {self.code_auto_imports!r}")
        if self.code_max_tests is not None and self.code_max_tests < 1:
            raise ValueError(f"code_max_tests must be at least 1 or None, got {self.code_max_tests}")
        if self.default_source not in (None, *SCORERS):
            raise ValueError(f"default_source must be one of {SCORERS} or None, got {self.default_source!r}")
        if self.judge_request_timeout_s <= 0:
            raise ValueError(f"judge_request_timeout_s must be positive, got {self.judge_request_timeout_s}")

    @classmethod
    def from_kwargs(cls, kwargs: dict[str, Any]) -> RewardConfig:
        """Build from verl's reward kwargs; an unknown option is a configuration error, named in the message."""
        known = {f.name for f in dataclasses.fields(cls)}
        options = {k: v for k, v in kwargs.items() if k not in VERL_INJECTED_KWARGS}
        unknown = sorted(set(options) - known)
        if unknown:
            raise ValueError(f"unknown reward option(s) {unknown}; known options: {sorted(known)}")
        if "data_sources" in options:
            options["data_sources"] = dict(options["data_sources"])
        for name, value in options.items():
            accepted = _OPTION_TYPES[name]
            if not isinstance(value, accepted) or (isinstance(value, bool) and bool not in accepted):
                kinds = " or ".join(t.__name__ for t in accepted)
                raise ValueError(f"reward option {name} must be {kinds}, got {value!r}")
        return cls(**options)
