"""Command-line tools: benchmarks, data conversion, checkpoint fetching, GPU checks."""
