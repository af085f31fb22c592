"""Readers of shuffle files and datasets: planning, fetching and decoding."""
