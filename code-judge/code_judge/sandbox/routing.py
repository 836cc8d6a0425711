"""Which warm zygote runs a program: a cheap look at its source, where a wrong guess costs only speed.

A program that never names a module only the heavy zygote has loaded (numpy, sympy, mpmath, ...) runs in the
light zygote, whose forks are cheaper. A program that imports such a module anyway, say with a computed name,
still runs correctly there: it pays for the import itself, within the same limits as in the heavy zygote.
"""

from __future__ import annotations

import re
from collections.abc import Iterable


class Router:
    def __init__(self, heavy_names: Iterable[str]):
        names = sorted(set(heavy_names))
        # Whole identifiers only: `sympy`, `sympy.solve` and "sympy" match, `mysympy` does not.
        self._pattern = re.compile(r"\b(?:" + "|".join(map(re.escape, names)) + r")\b") if names else None

    def needs_heavy(self, source: str) -> bool:
        return self._pattern is not None and self._pattern.search(source) is not None
