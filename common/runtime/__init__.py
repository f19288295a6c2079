"""The process and its files: signals, the workdir (lock, writes, leftovers), devices and strategy,
logs. Imports common.contract only."""
