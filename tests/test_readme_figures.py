"""The documentation's figures that code prints, against that code, wherever they appear (every
table and quote of helpers.DOC_FILES that holds them, not only the first): the benchmark table's estimate MiB and
GFLOP/step, the 4 GB table's estimates, and the last line of the triplet smoke command.

The tables are parsed row by row and each figure recomputed in process with the functions
scripts/benchmark.py uses (its config and task loading, scripts/benchmarking/memory_estimate.py
and flops.py), not by running the benchmark. A deterministic figure matches when the computed
value rounds to it at the digits the README shows (313 MiB: within 0.5; 0.453 GFLOP: within
0.0005), so that changing either the README or the code behind a figure fails here. Timings are
one machine's measurements and are not checked.
"""
import os
import re

import keras
import pytest

import helpers
from scripts.benchmarking import flops
from scripts.benchmarking import memory_estimate
from scripts.benchmarking import trainers

NUMBER = re.compile(r"\d[\d,]*(?:\.\d+)?")
# The triplet smoke run is not bitwise reproducible (config.deterministic is off): one of its 12
# evaluation images is 0.083 of recall, one of its 16 pairs 0.0625 of verification accuracy.
SMOKE_TOLERANCE = 0.1
# The benchmark's gtx960m estimate writes the preset's synthetic data; fewer identities suffice
# (the model and batch stay the preset's), as in tests/test_benchmark.py.
GTX960M_OVERRIDES = {
    "triplet": ["data.num_train_identities=32", "data.num_eval_identities=4",
                "data.images_per_synthetic_identity=4", "data.num_pair_folds=1"],
}


def tables(header_start):
  """[(doc, rows)] of every documentation table whose header line starts with header_start, each
  row a dict by title; at least one."""
  found = []
  for doc in helpers.DOC_FILES:
    lines = helpers.read_doc(doc).splitlines()
    for start in (i for i, line in enumerate(lines) if line.startswith(header_start)):
      titles = _cells(lines[start])
      rows = []
      for line in lines[start + 2:]:
        if not line.startswith("|"):
          break
        rows.append(dict(zip(titles, _cells(line))))
      found.append((doc, rows))
  assert found, f"{helpers.DOC_FILES}: no table starts with {header_start!r}"
  return found


def _cells(line):
  return [cell.strip() for cell in line.strip().strip("|").split("|")]


def assert_shown(text, value, what):
  """The first number of `text` is `value` rounded to the digits it shows."""
  shown = NUMBER.search(text).group().replace(",", "")
  decimals = len(shown.partition(".")[2])
  assert abs(value - float(shown)) <= 0.5 * 10 ** -decimals + 1e-9, (
      f"{what}: shows {text!r}, the code gives {value:.4g}")


def phase_figures(trainer, preset, tmp_path, mixed=None, overrides=()):
  """As scripts/benchmark.py computes them: the config, the per-example input shape and
  {phase: (estimate MiB, GFLOP per step)}, in the preset's precision unless `mixed` says."""
  config = trainers.load_config(trainer, preset, list(overrides), batch_size=0)
  task = trainers.make_task(trainer, config, str(tmp_path / f"{trainer}-{preset}-{mixed}"))
  input_shapes = [tuple(next(iter(task.train_dataset))[0].shape[1:])]
  mixed = config.mixed_precision if mixed is None else mixed
  keras.mixed_precision.set_global_policy("mixed_float16" if mixed else "float32")
  model = task.build_model()
  batch_size = config.train.batch_size
  micro_batch = batch_size // config.train.accumulate_steps  # whose activations are held at a time
  figures = {}
  for phase in task.make_phases(model, mixed):
    if phase.prepare:
      phase.prepare()
    estimate = memory_estimate.estimate(model, micro_batch, mixed, input_shapes=input_shapes)
    figures[phase.name] = (estimate.total / memory_estimate.MIB,
                           flops.count_training_flops(model, batch_size, input_shapes) / 1e9)
  keras.mixed_precision.set_global_policy("float32")
  return config, input_shapes[0], figures


@pytest.mark.parametrize("trainer", [
    "segmentation", "triplet", pytest.param("inception_v4", marks=pytest.mark.slow)])
def test_benchmark_and_4gb_tables_match_the_code(trainer, tmp_path):
  figures_by_precision = {mixed: phase_figures(trainer, "smoke", tmp_path, mixed)[2] for mixed in (False, True)}
  for doc, all_rows in tables("| trainer | variant | phase |"):
    rows = [row for row in all_rows if row["trainer"] == trainer]
    assert rows, f"{doc}'s benchmark table has no {trainer} row"
    for mixed, figures in figures_by_precision.items():
      precision_rows = [row for row in rows if row["variant"].startswith("mixed") == mixed]
      # A one-phase trainer's rows leave the phase empty; every phase of the code has its rows.
      assert {row["phase"] or next(iter(figures)) for row in precision_rows} == set(figures)
      for row in precision_rows:
        estimate, gflop = figures[row["phase"] or next(iter(figures))]
        what = f"{doc} benchmark table, {trainer} {row['variant']} {row['phase']}".rstrip()
        assert_shown(row["estimate MiB"], estimate, what + ", estimate MiB")
        assert_shown(row["GFLOP/step"], gflop, what + ", GFLOP/step")

  config, shape, figures = phase_figures(trainer, "gtx960m", tmp_path,
                                         overrides=GTX960M_OVERRIDES.get(trainer, ()))
  budget_mib = trainers.BUDGET_MB
  for doc, all_rows in tables("| preset | batch | estimate |"):
    rows = {}
    for row in all_rows:
      found = re.fullmatch(r"(\w+) gtx960m(?:, phase (\w+).*)?", row["preset"])
      if found.group(1) == trainer:
        rows[found.group(2) or next(iter(figures))] = row
    assert set(rows) == set(figures), f"{doc}'s 4 GB table: {trainer} phases {sorted(rows)}"
    for phase, row in rows.items():
      what = f"{doc} 4 GB table, {row['preset']}"
      assert_shown(row["batch"], config.train.batch_size, what + ", batch")
      if config.train.accumulate_steps > 1:
        micro = f"{config.train.accumulate_steps} x {config.train.batch_size // config.train.accumulate_steps}"
        assert micro in row["batch"], f"{what}: the batch is computed as {micro}"
      assert f"{shape[0]}x{shape[1]}" in row["batch"], f"{what}: the input is {shape}"
      estimate, _ = figures[phase]
      assert_shown(row["estimate"], estimate, what + ", estimate")
      assert_shown(row[f"of {budget_mib} MiB"], 100 * estimate / budget_mib, what + ", share")


def test_triplet_smoke_line_matches_a_smoke_run(triplet_smoke_run):
  """The docs quote the last figures line of the triplet smoke command; the same config run
  (train_and_evaluate, the session's run in tests/conftest.py) prints a line of the same words
  whose figures are within SMOKE_TOLERANCE, in every quote."""
  quotes = [(doc, " ".join(quote.split())) for doc in helpers.DOC_FILES
            for quote in re.findall(r"`(recall_at_1 [^`]*)`", helpers.read_doc(doc))]
  assert quotes, "the docs quote no `recall_at_1 ...` line of the triplet smoke run"
  printed = [line for line in triplet_smoke_run.printed.splitlines() if line.startswith("recall_at_1 ")]
  assert len(printed) == 1, printed
  for doc, quoted in quotes:
    assert NUMBER.sub("N", quoted) == NUMBER.sub("N", printed[0]), (
        f"{doc} quotes {quoted!r}, the smoke run prints {printed[0]!r}")
    for shown, value in zip(NUMBER.findall(quoted), NUMBER.findall(printed[0])):
      assert abs(float(shown) - float(value)) <= SMOKE_TOLERANCE, (
          f"{doc} quotes {shown} where the smoke run prints {value}: {printed[0]!r}")
