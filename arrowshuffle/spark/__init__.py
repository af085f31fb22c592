"""Spark integration: the arrowshuffle Python data source (imports pyspark lazily)."""
