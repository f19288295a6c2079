"""The training loop and what it runs: the compiled step, the actions between its calls, the run's
state, checkpoints, distribution, summaries, diagnostics, plots. Imports contract and runtime.

A trainer uses the modules in FOR_TRAINERS (what its evaluation draws and plots with, a run's
checkpoints read back, the actions it adds to the loop); the rest is the engine's own, reached through common.app
(tests/test_layout.py checks it)."""
FOR_TRAINERS = ("actions", "calibration", "checkpoints", "evaluation", "plots", "summaries")
