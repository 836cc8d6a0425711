"""Light and heavy zygotes: a program naming numpy/sympy gets them preloaded, any other runs in the cheaper light
zygote, and a wrong guess (a hidden import) changes only speed, never the result or the limits."""

from __future__ import annotations

import textwrap

import pytest

from code_judge.execution import LimitHit, Limits
from code_judge.sandbox import Sandbox, SandboxConfig
from code_judge.sandbox.routing import Router

LIMITS = Limits(wall_time_s=20, cpu_time_s=20, memory_bytes=256 * 1024**2)
# Printed before the program imports anything: which heavy modules its interpreter had already loaded (names
# spelled so that this probe itself does not send the program to the heavy interpreter).
PRELOADED = "import sys\nprint([name for name in ('num' + 'py', 'sym' + 'py') if name in sys.modules])\n"


def run(sandbox: Sandbox, source: str):
    return sandbox.run(PRELOADED + textwrap.dedent(source), "", LIMITS)


def test_router_matches_whole_identifiers_only():
    router = Router(["numpy", "sympy"])
    assert router.needs_heavy("import sympy as sp")
    assert router.needs_heavy("from numpy.linalg import inv")
    assert router.needs_heavy("__import__('sympy')")
    assert not router.needs_heavy("mysympy = 1\nnumpy_like = [1]\nprint('no heavy module here')")
    assert not Router([]).needs_heavy("import sympy")


def test_a_sympy_program_gets_the_heavy_interpreter_with_sympy_preloaded(sandbox):
    result = run(sandbox, "import sympy\nprint(sympy.factorint(360))")
    assert result.stdout == "['numpy', 'sympy']\n{2: 3, 3: 2, 5: 1}\n"


def test_a_program_naming_no_heavy_module_runs_in_the_light_interpreter(sandbox):
    result = run(sandbox, "import math, collections\nprint(math.comb(5, 2), collections.Counter('aab')['a'])")
    assert result.stdout == "[]\n10 2\n"


@pytest.mark.parametrize(
    "hidden_import",
    ["importlib.import_module('sym' + 'py')", "__import__(''.join(reversed('ypmys')))"],
    ids=["importlib", "__import__"],
)
def test_a_hidden_sympy_import_still_runs_correctly_with_the_same_memory_budget(sandbox, hidden_import):
    result = run(
        sandbox,
        f"""
        import importlib
        sp = {hidden_import}
        x = sp.Symbol("x")
        print(sp.solve(x**2 - 5*x + 6, x))
        block = bytearray(200 * 1024**2)  # fits the 256 MiB budget here exactly as in the heavy interpreter
        print(len(block))
        """,
    )
    assert result.stdout == f"[]\n[2, 3]\n{200 * 1024**2}\n"
    assert result.run_success


def test_the_light_interpreter_gets_the_same_address_space_limit_not_more(sandbox):
    result = run(sandbox, "block = bytearray(400 * 1024**2)")
    assert result.stdout == "[]\n"
    assert result.exception_type == "MemoryError"
    assert result.limit_hit is LimitHit.MEMORY


def test_one_zygote_when_no_heavy_module_is_preloaded():
    assert SandboxConfig(preload=("math",)).light_preload is None
    assert SandboxConfig(heavy_modules=()).light_preload is None
    assert SandboxConfig().light_preload == ("math",)


def test_warm_zygotes_of_the_plain_flavour_start_with_the_sandbox():
    preloads = []
    with Sandbox(SandboxConfig(preload=("math", "numpy"), warm_up=False, warm_zygotes=3)) as box:
        preloads = sorted(z.config.preload for zygotes in box._idle.values() for z in zygotes)
        assert box.run("print('warm')", "", LIMITS).stdout == "warm\n"
    assert preloads == [("math",)] * 3 + [("math", "numpy")]
    with Sandbox(SandboxConfig(preload=("math",), warm_up=False, warm_zygotes=2)) as box:
        assert [len(zygotes) for zygotes in box._idle.values()] == [2]  # one flavour: every warm zygote is it
    with pytest.raises(ValueError, match="warm_zygotes"):
        SandboxConfig(warm_zygotes=0)
