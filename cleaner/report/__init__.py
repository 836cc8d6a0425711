"""Static HTML report of rollout trajectories: purified vs raw views, rollback diffs, and plots."""
