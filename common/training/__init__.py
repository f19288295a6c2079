"""The training loop and what it runs: the compiled step, the run's state, checkpoints, distribution,
summaries, diagnostics, plots. Imports the packages below it (contract, runtime, data, nn)."""
