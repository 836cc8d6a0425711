"""Dataset preparation (published parquet -> verl RLHF parquet) and success-rate filtering."""
