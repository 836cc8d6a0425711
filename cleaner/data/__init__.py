"""Dataset preparation (published parquet -> verl RLHF parquet), success-rate filtering, and the check of a run's
inputs before it starts (`run_inputs`: the model, the data files, the judge, the files its config names)."""
