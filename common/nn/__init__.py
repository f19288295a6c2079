"""Network pieces a trainer builds its model and phases from: layers and optimizers. Imports
common.contract and common.runtime."""
