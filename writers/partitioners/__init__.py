"""Partitioners: assign every row of a batch to a subpartition, vectorized."""
