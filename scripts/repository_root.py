"""`python scripts/x.py` puts scripts/ first on sys.path, not the repository root. A script run as a
file imports this module first (`if not __package__: import repository_root`), which puts the root
before it: the script then runs this repository's packages (its common/, a trainer new_trainer.py
added), never those of another repository installed in the environment with `pip install -e .`."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
