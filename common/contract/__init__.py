"""The contract between a trainer and the core: the Task it fills (Phase, Evaluation), the config keys
every trainer shares and their checks, and the errors that become one line. Imports nothing of
common/."""
