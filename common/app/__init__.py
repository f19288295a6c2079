"""The command lines around a trainer: flags and exit codes, start-up, the shared ends of train.py and
evaluate.py, export. The top layer: imports any package of common/."""
