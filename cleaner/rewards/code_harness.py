"""Programs that run a model's solution against one hidden test on the judge.

A stdin/stdout test runs the solution as it is. A call-based test (`fn_name`) and an assertion test
(`test_code` + `entry_point`) run it inside a harness: the solution and the test execute in a fresh namespace
with stdout captured, so debugging prints cannot spoil the verdict, and only when the test passes does the
harness print a random token. The judge then compares stdout with that token (`expected_output`), so exiting
early, crashing or printing cannot pass a test.
"""

from __future__ import annotations

import json
from typing import Any

from cleaner.tools.cell import AUTO_IMPORTS, AutoImports

NO_AUTO_IMPORTS = AUTO_IMPORTS["none"]

# Names LeetCode-style solutions use without importing them (the official LeetCode environment provides them).
CALL_PRELUDE = (
    "from typing import *\n"
    "import bisect, collections, functools, heapq, itertools, math, operator, re, string\n"
    "from collections import Counter, defaultdict, deque, OrderedDict\n"
    "from functools import cache, lru_cache, reduce\n"
    "from heapq import heapify, heappop, heappush\n"
    "from itertools import accumulate, combinations, permutations, product\n"
    "from math import ceil, floor, gcd, inf, sqrt\n"
)

# Shared by both harnesses. `_cleaner_same` accepts what the stored answers mean rather than their exact JSON:
# tuples equal lists, floats are compared with a tolerance, and a one-element list (TACO wraps return values
# that way) equals its element.
_HARNESS_HEAD = """import io as _io
import json as _json
import math as _math
import sys as _sys


def _cleaner_same(got, want):
    if isinstance(want, float) or isinstance(got, float):
        try:
            return _math.isclose(float(got), float(want), rel_tol=1e-6, abs_tol=1e-6)
        except (TypeError, ValueError):
            return False
    if isinstance(want, list) and isinstance(got, (list, tuple)):
        return len(got) == len(want) and all(_cleaner_same(g, w) for g, w in zip(got, want))
    if isinstance(want, dict) and isinstance(got, dict):
        return got.keys() == want.keys() and all(_cleaner_same(got[k], want[k]) for k in want)
    return got == want


def _cleaner_plain(value):
    try:
        return _json.loads(_json.dumps(value))
    except (TypeError, ValueError):
        return value


_cleaner_stdout = _sys.stdout
_sys.stdout = _io.StringIO()
_cleaner_namespace = {"__name__": "__solution__"}
"""


def _run_solution(solution: str, imports: AutoImports) -> str:
    """Harness lines that give the namespace the auto-imports, then run the solution in it (with postponed
    annotations when the auto-import set asks for them, as a first-line future import would)."""
    flags = "__import__('__future__').annotations.compiler_flag" if imports.postponed_annotations else "0"
    statements = "\n".join(imports.statements([solution]))
    prelude = f"exec({statements!r}, _cleaner_namespace)\n" if statements else ""
    return prelude + f"exec(compile({solution!r}, '<solution>', 'exec', {flags}), _cleaner_namespace)\n"


def call_program(
    solution: str, fn_name: str, args: list[Any], expected: Any, token: str, imports: AutoImports = NO_AUTO_IMPORTS
) -> str:
    """Call `fn_name(*args)` (a function or a `Solution` method) and print `token` if it returns `expected`."""
    return (
        _HARNESS_HEAD
        + f"exec({CALL_PRELUDE!r}, _cleaner_namespace)\n"
        + _run_solution(solution, imports)
        + f"_cleaner_name = {fn_name!r}\n"
        + "_cleaner_class = _cleaner_namespace.get('Solution')\n"
        + "if isinstance(_cleaner_class, type) and hasattr(_cleaner_class, _cleaner_name):\n"
        + "    _cleaner_fn = getattr(_cleaner_class(), _cleaner_name)\n"
        + "else:\n"
        + "    _cleaner_fn = _cleaner_namespace[_cleaner_name]\n"
        + f"_cleaner_got = _cleaner_plain(_cleaner_fn(*_json.loads({json.dumps(args)!r})))\n"
        + f"_cleaner_want = _json.loads({json.dumps(expected)!r})\n"
        + "_sys.stdout = _cleaner_stdout\n"
        + "_cleaner_unwrapped = _cleaner_want[0] if isinstance(_cleaner_want, list) and len(_cleaner_want) == 1 else None\n"
        + "if _cleaner_same(_cleaner_got, _cleaner_want) or (\n"
        + "    _cleaner_unwrapped is not None and _cleaner_same(_cleaner_got, _cleaner_unwrapped)\n"
        + "):\n"
        + f"    print({token!r})\n"
    )


def assertion_program(
    solution: str,
    import_prefix: str,
    test_code: str,
    entry_point: str,
    token: str,
    imports: AutoImports = NO_AUTO_IMPORTS,
) -> str:
    """Run `import_prefix`, the solution, `test_code` and `check(<entry_point>)`; print `token` if nothing failed."""
    return (
        _HARNESS_HEAD
        + f"exec({import_prefix!r}, _cleaner_namespace)\n"
        + _run_solution(solution, imports)
        + f"exec(compile({test_code!r}, '<test>', 'exec'), _cleaner_namespace)\n"
        + f"_cleaner_namespace['check'](eval({entry_point!r}, _cleaner_namespace))\n"
        + "_sys.stdout = _cleaner_stdout\n"
        + f"print({token!r})\n"
    )
