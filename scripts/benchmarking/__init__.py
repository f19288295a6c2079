"""scripts/benchmark.py's pieces, one module a job: trainers (a trainer's timed rows), timing (how
things are timed), tables (the printed tables and --json), estimates (--estimate_only),
memory_estimate and flops (a model's training memory and FLOPs, no GPU needed), exports (--exports)
and peers (--peers; the peers' own processes are scripts/peers/)."""
