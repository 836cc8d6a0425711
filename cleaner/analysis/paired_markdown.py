"""The paired comparison of SAAR on vs off as Markdown: what `make demo` prints and writes to summary.md."""

from __future__ import annotations

from dataclasses import dataclass

from .paired import Pair, PairedDifference, acted_pairs, shares_prefix


def mode_name(saar: bool) -> str:
    return "on" if saar else "off"


def paired_markdown(pairs: list[Pair], differences: list[PairedDifference]) -> str:
    aligned = sum(shares_prefix(pair) for pair in pairs)
    lines = [
        f"Paired by problem, sample and seed: {len(pairs)} pairs, {aligned} of them identical up to SAAR's first "
        "action (the rest diverged earlier and count as independent draws).",
        "",
        "| metric | SAAR on | SAAR off | on − off (95 % interval) |",
        "|---|---:|---:|---:|",
    ]
    for diff in differences:
        interval = diff.interval()
        spread = "n/a" if interval is None else f"[{interval[0]:+.2f}, {interval[1]:+.2f}]"
        lines.append(f"| {diff.metric} | {diff.on:.2f} | {diff.off:.2f} | {diff.difference:+.2f} {spread} |")
    return "\n".join(lines)


def acted_markdown(pairs: list[Pair]) -> str:
    acted = acted_pairs(pairs)
    if not acted:
        return "SAAR did not act: no tool call failed in the SAAR-on pass."
    lines = [
        f"Where SAAR acted ({len(acted)} of {len(pairs)} pairs):",
        "",
        "| trajectory | first error(s) | SAAR | correct on / off | errors kept on / off | same start |",
        "|---|---|---|---|---|---|",
    ]
    for pair in acted:
        lines.append(
            f"| {pair.key} | {', '.join(pair.errors)} | {', '.join(pair.modes)} | "
            f"{'yes' if pair.on_correct else 'no'} / {'yes' if pair.off_correct else 'no'} | "
            f"{pair.on_kept_errors} / {pair.off_kept_errors} | {'yes' if pair.shares_prefix else 'no'} |"
        )
    return "\n".join(lines)


@dataclass(frozen=True)
class PassTiming:
    """One `cleaner rollout` pass of a paired run."""

    saar: bool
    trajectories: int
    wall_s: float
    model_cpu_s: float  # the inference server's CPU time: the model's work, whatever else runs on the machine


def timing_markdown(passes: list[PassTiming], threads: int) -> str:
    lines = [f"Timing (the two passes in parallel, {threads} llama.cpp thread(s) each):"]
    for one in passes:
        lines.append(
            f"- SAAR {mode_name(one.saar)}: {one.trajectories} trajectories, {one.wall_s:.0f} s wall, llama.cpp CPU "
            f"{one.model_cpu_s:.0f} s ({one.model_cpu_s / max(one.trajectories, 1):.1f} s per trajectory)"
        )
    return "\n".join(lines)
