"""The analysis of rollout records, pure: paired SAAR on/off differences, the bootstrap over prompts, the
purification table and the off-policy measures of spliced tokens, shared by `cleaner rollout`, `cleaner report`
and the benchmarks."""
