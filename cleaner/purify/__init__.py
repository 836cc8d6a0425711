"""Pure purification rules (no verl, no torch): the per-turn record of a trajectory and the record of every failed
call it generated, the modes behind `multi_turn.purification` and their masks, RoC's group selection, and the audit
figures that measure how much advantage lands on failed tool calls. docs/purification.md explains each mode."""
