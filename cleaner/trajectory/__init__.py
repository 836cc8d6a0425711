"""The trajectory record (one JSONL line per finished trajectory) and its reading and writing."""
