"""SAAR (Similarity-Aware Adaptive Rollback): the pure algorithm. Imports neither verl nor torch."""
