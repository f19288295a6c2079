"""The hostile table (tests/hostile_table.py) checked against the repository and the tests that
are its rows; then the rows of the commands beside the trainers (launch_workers, make_real_sets,
benchmark, convert_to_tfrecord, check_gpu, export, fetch) and of the run files that no other test
file held: one `error:` line naming the flag or path, exit code 2 (128 + N for a signal), nothing
written; in this interpreter where no subprocess is what is being tested."""
import ast
import collections
import contextlib
import functools
import glob
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time

from absl import app as absl_app
from absl import flags as absl_flags
from absl import logging
import numpy as np
from PIL import Image
import pytest
import tensorflow as tf

from common.app import cli
from common.app import commands
from common.app import conversion
from common.app import export as export_lib
from common.app import run_export
from common.app.trainers import find_trainers
from common.contract import config as config_lib
from common.contract import task as task_lib
from common.runtime import run_log
from common.runtime import signals
from common.runtime import workdir as workdir_lib
from common.training import evaluation as evaluation_lib
import helpers
from helpers import REPO_ROOT
from helpers import run_python
import hostile_table as table
from inception_finetune import predict as inception_predict
from inception_finetune import train as inception_train
from scripts import benchmark
from scripts import check_gpu
from scripts import convert_to_tfrecord
from scripts import fetch_slim_checkpoint as fetch_lib
from scripts import launch_workers
from scripts import make_real_sets
from scripts.benchmarking import estimates as benchmark_estimates
from segmentation import predict as segmentation_predict
from segmentation import train as segmentation_train
import test_run_files
from triplet import predict as triplet_predict
from triplet import task as triplet_task
from triplet import train as triplet_train

# The folders of the trainers' commands, beside scripts/*.py (one new_trainer.py made included).
TRAINER_FOLDERS = tuple(trainer.package for trainer in find_trainers(REPO_ROOT))
# What a test's source shows of the exit code it asserts: the code itself, a helper that asserts
# it, or the exception the commands' guard turns into it (a UserError: 2; Interrupted: 128 + N).
CODE_EVIDENCE = {
    0: r"caplog|== 0\b|== \[|assert not \[|assert_fetched",
    1: r"== 1\b",
    2: r"== 2\b|raises\((\w+\.)*\w*Error|raises\(SystemExit\)",  # argparse's exits are 2
    3: r"== 3\b",
    130: r"128 \+ (signal\.)?SIG|128 \+ signum|Interrupted",
    137: r"128 \+ signal\.SIGKILL",
    142: r"\b142\b",
    143: r"128 \+ (signal\.)?SIG|128 \+ signum|Interrupted",
}


def command_modules():
  """Every command of the repository: a module with `if __name__ == "__main__":` among the trainers'
  train, evaluate and predict and scripts/*.py, as a dotted name."""
  paths = [f"{folder}/{name}.py" for folder in TRAINER_FOLDERS for name in ("train", "evaluate", "predict")]
  paths += sorted(os.path.relpath(path, REPO_ROOT) for path in glob.glob(os.path.join(REPO_ROOT, "scripts", "*.py")))
  found = []
  for path in paths:
    full = os.path.join(REPO_ROOT, path)
    if os.path.isfile(full) and any(
        isinstance(node, ast.If) and "__main__" in ast.unparse(node.test) for node in ast.parse(open(full).read()).body):
      found.append(path[:-3].replace("/", "."))
  return found


def _as_tuple(value):
  return value if isinstance(value, tuple) else (value,)


def declared_kinds(command, surface):
  category, *extra = table.SURFACES[command][surface]
  return (*table.KINDS.get(category, ()), *extra)


def cells():
  """[((command, surface, kind), row)] of every row, its tuples of commands, surfaces and kinds
  expanded; a surface a command does not have is skipped (a row may span commands of different
  surfaces), but every command of a row has one of the row's surfaces."""
  found = []
  for row in table.ROWS:
    commands, surfaces, kinds = (_as_tuple(value) for value in row[:3])
    for command in commands:
      own = [surface for surface in surfaces if surface in table.SURFACES.get(command, {})]
      assert own, f"{command} has none of the surfaces {surfaces} of the row {row[:4]}"
      for surface in own:
        for kind in kinds:
          found.append(((command, surface, kind), row))
  return found


def test_every_command_of_the_repository_is_in_the_table():
  """A trainer new_trainer.py added is found (TRAINER_FOLDERS) and asked for its rows: skipped, naming
  them, while it has none (the copy leaves the suite green), held once it has one."""
  found, listed = set(command_modules()), set(table.SURFACES)
  new = {command for command in found - listed if not any(row.startswith(command.split(".")[0] + ".")
                                                          for row in listed)}
  assert not found - listed - new, ("commands without rows in tests/hostile_table.py: "
                                    f"{', '.join(sorted(found - listed - new))}")
  assert not listed - found, f"rows of no command of the repository: {', '.join(sorted(listed - found))}"
  if new:
    pytest.skip(f"new trainers' commands without rows in tests/hostile_table.py yet: {', '.join(sorted(new))}")


def test_every_cell_of_the_table_is_one_row():
  """Each (command, surface, kind) that SURFACES declares is a row once, and a row names no other."""
  declared = {(command, surface, kind) for command, surfaces in table.SURFACES.items() for surface in surfaces
              for kind in declared_kinds(command, surface)}
  counts = collections.Counter(cell for cell, _ in cells())
  assert sorted(declared - set(counts)) == [], "cells without a row"
  assert sorted(set(counts) - declared) == [], "rows of no declared cell"
  assert sorted(cell for cell, count in counts.items() if count > 1) == [], "cells of two rows"
  for _, row in cells():
    if row[3] in (table.NA, table.OPEN):
      assert len(row) == 5 and len(row[4]) > 12, row  # the reason, said
    else:
      assert len(row) == 6 and isinstance(row[4], int) and row[5].startswith("tests/test_"), row


@functools.cache
def read_test_module(name):
  """(source, {top-level name: its definition's source}, {name imported from another test module:
  (that module, the name there)}) of tests/<name>.py; conftest.py's fixtures are names too."""
  path = os.path.join(REPO_ROOT, "tests", f"{name}.py")
  source = open(path).read()
  lines = source.splitlines()
  defined, imported = {}, {}
  for node in ast.parse(source).body:
    first = min([node.lineno] + [part.lineno for part in getattr(node, "decorator_list", [])])
    segment = "\n".join(lines[first - 1:node.end_lineno])  # with its decorators (parametrize's cases)
    if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
      defined[node.name] = segment
    elif isinstance(node, (ast.Assign, ast.AnnAssign)):
      for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
        for leaf in ast.walk(target):
          if isinstance(leaf, ast.Name):
            defined[leaf.id] = segment
    elif isinstance(node, (ast.Import, ast.ImportFrom)):
      for alias in node.names:
        module = node.module if isinstance(node, ast.ImportFrom) else alias.name
        if module and os.path.isfile(os.path.join(REPO_ROOT, "tests", f"{module}.py")):
          imported[alias.asname or alias.name] = (module, alias.name if isinstance(node, ast.ImportFrom) else None)
  return source, defined, imported


@functools.cache
def names_used(module, name):
  """[(module, name)] that the top-level definition `name` of tests/<module>.py refers to."""
  _, defined, imported = read_test_module(module)
  found = []
  for node in ast.walk(ast.parse(defined[name])):
    if isinstance(node, ast.Name):
      found.append((module, node.id))
    elif isinstance(node, ast.arg):
      found.append((module, node.arg))  # a fixture
    elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and (
        imported.get(node.value.id, (None, "x"))[1] is None):
      found.append((imported[node.value.id][0], node.attr))  # test_run_files.error_line
  return found


@functools.cache
def source_of_test(module, function):
  """The source of test `function` in tests/<module>.py and of every name it uses, transitively: the
  module's constants, helpers and fixtures (conftest.py's too), and names of other test modules."""
  seen, sources, pending = set(), [], [(module, function)]
  while pending:
    key = pending.pop()
    if key in seen:
      continue
    seen.add(key)
    name_module, name = key
    _, defined, imported = read_test_module(name_module)
    if name not in defined:
      if name in imported:
        other, attribute = imported[name]
        pending.append((other, attribute) if attribute else (other, None))
      elif name_module != "conftest" and name in read_test_module("conftest")[1]:
        pending.append(("conftest", name))
      continue
    sources.append(defined[name])
    pending += names_used(name_module, name)
  return "\n".join(sources)


def test_every_row_names_a_test_that_asserts_its_words_and_exit_code():
  problems = []
  for row in table.ROWS:
    if row[3] in (table.NA, table.OPEN):
      continue
    words, code, test = row[3:]
    path, _, function = test.partition("::")
    module = os.path.basename(path)[:-3]
    if not os.path.isfile(os.path.join(REPO_ROOT, path)) or function not in read_test_module(module)[1]:
      problems.append(f"{test}: no such test")
      continue
    source = source_of_test(module, function)
    problems += [f"{test}: does not hold {word!r}" for word in _as_tuple(words) if word not in source]
    if not re.search(CODE_EVIDENCE[code], source):
      problems.append(f"{test}: shows no exit code {code}")
  assert not problems, "\n".join(problems)


def table_size():
  """The figures of the table: commands, (command, surface) pairs, cells with a test, n/a and open."""
  kinds = collections.Counter("test" if row[3] not in (table.NA, table.OPEN) else row[3] for _, row in cells())
  tests = {row[5] for row in table.ROWS if row[3] not in (table.NA, table.OPEN)}
  return {"commands": len(table.SURFACES), "surfaces": sum(map(len, table.SURFACES.values())),
          "cells": sum(kinds.values()), "with a test": kinds["test"], "n/a": kinds[table.NA],
          "open": kinds[table.OPEN], "tests named": len(tests)}


def test_the_table_says_its_size():
  size = table_size()
  print("hostile table:", ", ".join(f"{value} {name}" for name, value in size.items()))
  assert size["cells"] == size["with a test"] + size["n/a"] + size["open"]
  assert size["open"] <= size["cells"] // 20, size  # a gap is the exception: few, each said in its row


def test_launch_workers_refuses_a_program_that_does_not_exist(capsys):
  assert launch_workers.main(["--num_workers", "2", "--", "nosuchcommand", "--flag"]) == 2
  captured = capsys.readouterr()
  assert captured.err.strip() == "error: cannot run nosuchcommand: no such program (on PATH or as a path)"
  assert "[launcher]" not in captured.out  # no worker was started


def test_benchmark_json_that_cannot_be_written_is_one_line_before_the_run(tmp_path, read_only_dir, capsys):
  folder, reason = read_only_dir
  for path, said in ((str(tmp_path), f"error: --json={tmp_path} is a folder; name the file to write"),
                     (os.path.join(folder, "r.json"), f"error: cannot write {folder}/.write-test-")):
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_info:
      benchmark.main(["segmentation", "--preset", "smoke", "--json", path])
    lines = capsys.readouterr().err.strip().splitlines()
    assert exit_info.value.code == 2 and len(lines) == 1 and lines[0].startswith(said), lines
  assert reason in lines[0] and lines[0].endswith("choose another --json"), lines
  assert os.listdir(folder) == [] and os.listdir(tmp_path) == [os.path.basename(folder)]
  benchmark.check_json_path(str(tmp_path / "new" / "r.json"))  # a missing folder is made
  assert os.listdir(tmp_path / "new") == []


def test_make_real_sets_bad_sets_and_a_read_only_folder_are_one_line(tmp_path, read_only_dir):
  folder, reason = read_only_dir
  for args, said in ((["--sets=bogus,npy", f"--output_dir={tmp_path / 'out'}"],
                      "error: --sets: unknown bogus; valid: "),
                     (["--train_identities=1", f"--output_dir={tmp_path / 'out'}"],
                      "error: --train_identities=1: must be in 2..70"),
                     (["--sets=npy", f"--output_dir={folder}"], f"error: cannot write {folder}")):
    result = run_python(["scripts/make_real_sets.py", *args])
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines) == 1 and lines[0].startswith(said), (args, lines)
  assert reason in lines[0] and "choose another --output_dir" in lines[0], lines
  assert not (tmp_path / "out").exists() and os.listdir(folder) == []


def test_make_real_sets_keeps_a_whole_set_and_writes_again_one_changed_since(tmp_path):
  """A rerun keeps a set still as the same code and arguments wrote it (the README's second line keeps
  what its first wrote) and has it written again when its record is missing, empty, cut short, of the
  wrong type or another set's, when a file of it changed since, or with other arguments; a user's own
  file in its folder stays. A folder in the record's place is one line."""
  out = tmp_path / "sets"
  folder, args = out / "identities", ["scripts/make_real_sets.py", "--sets=identities", f"--output_dir={out}"]
  first = run_python(args)
  image = next(folder.glob("train/*/*.png"))
  before = image.stat().st_mtime_ns
  second = run_python(args)
  assert first.returncode == second.returncode == 0, second.stderr
  assert (first.stdout.strip(), second.stdout.strip(), image.stat().st_mtime_ns) == (
      f"identities: {folder}", f"identities: {folder} (kept: written whole before, by the same code and arguments)",
      before)
  stamp = folder / make_real_sets.STAMP
  record = stamp.read_text()
  (folder / "mine.txt").write_text("the user's")
  other_set = json.dumps(dict(json.loads(record), set="npy"))
  changes = {"missing": stamp.unlink, "empty": lambda: stamp.write_text(""),
             "cut short": lambda: stamp.write_text(record[:40]), "wrong type": lambda: stamp.write_text("[]"),
             "another set's": lambda: stamp.write_text(other_set),
             "a file changed since": lambda: image.write_bytes(b"")}
  written_again = []
  for change in changes.values():
    stamp.write_text(record)
    change()
    written_again.append(not make_real_sets.write_all(str(out), ("identities",))["identities"][1])
    record = stamp.read_text()  # the rewrite's record (it lists mine.txt too)
  with_8 = [make_real_sets.write_all(str(out), ("identities",), train_identities=8)["identities"][1]
            for _ in range(2)]
  stamp.unlink()
  stamp.mkdir()
  result = run_python(args)
  lines = result.stderr.strip().splitlines()
  assert (written_again, with_8, (folder / "mine.txt").read_text()) == ([True] * len(changes), [False, True], "the user's")
  assert result.returncode == 2 and len(lines) == 1 and lines[0].startswith(
      f"error: cannot write {stamp} (Is a directory); choose another --output_dir"), lines


def test_a_predict_command_without_a_photo_is_one_line_and_exit_code_2(tmp_path):
  result = run_python(["-m", "triplet.predict", f"--workdir={tmp_path}", "--compare"])
  lines = result.stderr.strip().splitlines()
  assert result.returncode == 2 and lines[-1] == (
      "error: no photo given: name one or more photos or folders after the flags"), lines[-5:]


# The gaps the table found: the commands' rows that no other test file held.


def guarded(capsys, function, *args, **kwargs):
  """(exit code, stderr lines) of function(*args, **kwargs) behind the commands' guard."""
  capsys.readouterr()
  with pytest.raises(SystemExit) as exit_info:
    cli.run_guarded(lambda: function(*args, **kwargs))
  logging.set_verbosity(logging.INFO)  # cli.fail silenced the log: the next case's warnings are read
  return exit_info.value.code, capsys.readouterr().err.strip().splitlines()


def error_line(capsys, function, *args, **kwargs):
  """The one `error:` line of function(*args, **kwargs) behind the commands' guard, exit 2."""
  code, lines = guarded(capsys, function, *args, **kwargs)
  assert code == 2 and [line for line in lines if line.startswith("error: ")] == lines[-1:], lines
  return lines[-1]


@contextlib.contextmanager
def nearly_full_disk(path, pages=16):
  """A tmpfs of `pages` pages at path, filled but for one page: the commands' write checks pass (their
  probe takes the page and gives it back), the write of a second file fails (root mounts it; skips
  where mounting is not allowed)."""
  os.makedirs(path)
  if subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={pages * 4096}", "none", str(path)],
                    capture_output=True).returncode:
    pytest.skip("no tmpfs can be mounted here (root can; CI runs as root)")
  try:
    with open(os.path.join(path, ".filler"), "wb") as f:
      f.write(b"x" * (pages - 1) * 4096)
    yield str(path)
  finally:
    subprocess.run(["umount", "-l", str(path)], check=False)


def photo(path, size=(48, 64)):
  Image.fromarray(np.random.default_rng(0).integers(0, 255, (*size, 3), np.uint8)).save(path)
  return str(path)


def test_a_report_or_an_output_on_a_full_disk_is_one_line(tmp_path, capsys, monkeypatch):
  """evaluate's report, segmentation's masks and triplet's embeddings onto a disk that fills up after the
  write check passed: one line naming the file, and triplet's .npy and .tsv are both gone."""
  monkeypatch.setattr(sys, "argv", ["evaluate"])  # run_config reads --config arguments from it
  run = tmp_path / "run"
  test_run_files.write_run("segmentation", run)
  image = photo(tmp_path / "photo.png", (200, 300))  # its three PNGs do not fit one page
  config = cli.run_config(test_run_files.config_flag("segmentation"), str(run))
  for name, command, flag in (
      ("report", lambda disk: commands.evaluate_run(test_run_files.config_flag("segmentation"), str(run),
                                                    test_run_files.MAKE_TASK["segmentation"], None, disk),
       "--report_dir"),
      ("masks", lambda disk: segmentation_predict.predict_files([image], f"{disk}/masks", config, workdir=str(run)),
       "--output_dir")):
    with nearly_full_disk(tmp_path / name) as disk:
      line = error_line(capsys, command, disk)
      assert line.startswith(f"error: cannot write {disk}") and line.endswith(
          f"(No space left on device); the disk is full: free some space or choose another {flag}"), line
  triplet_run = tmp_path / "triplet_run"
  test_run_files.write_run("triplet", triplet_run)
  triplet_config = helpers.make_config("triplet", "smoke")
  with nearly_full_disk(tmp_path / "embeddings") as disk:
    line = error_line(capsys, triplet_predict.run, [image], triplet_config, workdir=str(triplet_run),
                      embed_path=f"{disk}/e.npy")
    assert line.endswith("the disk is full: free some space or choose another --embed_to"), line
    assert sorted(os.listdir(disk)) == [".filler"]  # neither the .npy nor the .tsv is left


def test_export_reads_the_run_as_evaluate_does(tmp_path, capsys, caplog, monkeypatch, read_only_dir):
  """scripts/export.py's run files: config.json, the checkpoints and their state file, a --saved_model
  and a triplet run's metrics.json (the step its threshold carries), each bad one a line or a warning;
  a read-only --output is refused before anything is read."""
  monkeypatch.setattr(sys, "argv", ["export"])  # run_config reads --config arguments from it

  def run(name, write_files=True):
    workdir = tmp_path / name
    if write_files:
      test_run_files.write_run("segmentation", workdir)
    else:
      workdir.mkdir()
    return workdir

  for case, (write, said) in {  # config.json: the trainer is read from it first
      "empty": (lambda path: path.write_text(""), "config.json is empty"),
      "cut short": (lambda path: path.write_text('{"seed": '), "config.json is not valid JSON"),
      "a list": (lambda path: path.write_text("[1]"), "config.json holds no keys (a JSON list)"),
      "a folder": (lambda path: path.mkdir(), "config.json does not exist"),
  }.items():
    workdir = run(case.replace(" ", "_"), False)
    write(workdir / "config.json")
    assert said in error_line(capsys, run_export.trainer_of, str(workdir)), case

  empty = run("no_checkpoint", False)
  config_lib.write_config(helpers.make_config("segmentation", "smoke"), str(empty))
  assert "no checkpoint in" in error_line(capsys, run_export.load_run, str(empty))
  corrupt = run("corrupt")
  data = test_run_files.corrupt(tf.train.latest_checkpoint(str(corrupt / "checkpoints")))
  assert error_line(capsys, run_export.load_run, str(corrupt)).startswith(
      f"error: {data} is corrupt (checksum does not match)")
  other = run("other_model")
  config_lib.write_config(helpers.make_config("segmentation", "smoke", **{"model.widths": (4, 4, 4)}), str(other))
  assert "does not match this model" in error_line(capsys, run_export.load_run, str(other))
  for case, write in {"empty": lambda path: path.write_text(""),
                      "garbage": lambda path: path.write_text("model_checkpoint_path: {{{"),
                      "a folder": lambda path: (path.unlink(), path.mkdir())}.items():
    workdir = run(f"state_{case.replace(' ', '_')}")
    write(workdir / "checkpoints" / "checkpoint")
    caplog.clear()
    assert run_export.load_run(str(workdir))[0].NAME == "segmentation", case  # the newest, found from the files
    assert "(TensorFlow's list of checkpoints)" in caplog.text, case

  good = run("good")
  config = helpers.make_config("segmentation", "smoke")
  saved_model = test_run_files.MAKE_TASK["segmentation"](config, str(good), True).export(
      test_run_files.BUILD_MODEL["segmentation"](config), str(tmp_path / "saved_model"))
  (tmp_path / "a_file").write_text("not a SavedModel")
  (tmp_path / "no_pb").mkdir()
  for path, said in ((tmp_path / "nothing", "does not exist"), (tmp_path / "a_file", "is a file, not a SavedModel"),
                     (tmp_path / "no_pb", "is a folder without saved_model.pb")):
    assert said in error_line(capsys, run_export.load_run, str(good), str(path)), path
  for case, damage in {"empty": lambda path: test_run_files.cut(path / "saved_model.pb", 0),
                       "cut short": lambda path: test_run_files.cut(path / "saved_model.pb", 0.5)}.items():
    damaged = tmp_path / f"saved_model_{case.replace(' ', '_')}"
    shutil.copytree(saved_model, damaged)
    damage(damaged)
    assert f"SavedModel {damaged} is damaged (" in error_line(capsys, conversion.load, "saved_model", str(damaged))

  folder, _ = read_only_dir
  line = error_line(capsys, run_export.export, str(good), "saved_model", f"{folder}/exported")
  assert line.startswith(f"error: cannot write {folder}") and line.endswith(
      "it is not writable: make it writable or choose another --output"), line

  # The run's own saved_model/, which the export is checked against, read as a --saved_model is.
  own = good / "saved_model"
  assert run_export.reference_of(str(good), None, "segmentation") is None  # none: one made of the weights
  own.write_text("not a SavedModel")
  assert "is a file, not a SavedModel" in error_line(capsys, run_export.reference_of, str(good), None, "segmentation")
  own.unlink()
  own.mkdir()
  assert "is a folder without saved_model.pb" in error_line(capsys, run_export.reference_of, str(good), None,
                                                            "segmentation")
  own.rmdir()
  shutil.copytree(saved_model, own)
  assert run_export.reference_of(str(good), None, "segmentation") == str(own)
  assert "is the export of the segmentation trainer" in error_line(capsys, run_export.reference_of, str(good),
                                                                   None, "triplet")
  for fraction in (0.5, 0):  # cut short, then empty
    test_run_files.cut(own / "saved_model.pb", fraction)
    assert f"SavedModel {own} is damaged (" in error_line(capsys, conversion.load, "saved_model", str(own))
  shutil.rmtree(own)

  # A triplet run's metrics.json: the step of the threshold its export carries (-1: none said).
  monkeypatch.setattr(triplet_task, "make_predict_fn", lambda model: model)  # no model: the scores below
  scores = lambda predict, from_saved_model: task_lib.Evaluation({triplet_task.VERIFICATION_THRESHOLD: 0.5})
  metrics = tmp_path / "triplet" / "metrics.json"
  metrics.parent.mkdir()
  for case, (text, step, warned) in {
      "missing": (None, -1, None), "empty": ("", -1, "is empty"), "cut short": ('{"step": ', -1, "is not valid JSON"),
      "a list": ("[3]", -1, "holds no keys"), "a string": ('{"step": "ten"}', -1, 'step is "ten", not a step'),
      "best of another type": ('{"best": {"step": [1]}, "step": 3}', -1, "best.step is [1], not a step"),
      "another trainer's": ('{"step": 30, "eval": {"miou": 0.5}}', 30, None), "sound": ('{"best": {"step": 20}}', 20, None),
      "a folder": ("folder", -1, "cannot be read (Is a directory)"),
  }.items():
    if text == "folder":
      metrics.mkdir()
    elif text is not None:
      metrics.write_text(text)
    caplog.clear()
    assert triplet_task.export_threshold(None, scores, str(metrics.parent)) == {"threshold": 0.5, "step": step}, case
    warnings = [record.getMessage() for record in caplog.records if record.levelname == "WARNING"]
    assert len(warnings) == bool(warned), (case, warnings)
    assert not warned or (warnings[0].startswith(str(metrics)) and warned in warnings[0] and warnings[0].endswith(
        "; the export's threshold carries no step (-1)")), (case, warnings)
    shutil.rmtree(metrics) if metrics.is_dir() else metrics.unlink(missing_ok=True)


def test_predict_reads_its_run_files_in_one_line(tmp_path, capsys, monkeypatch, read_only_dir):
  """What the predict commands read of a run (config.json, Inception's labels.txt, triplet's
  metrics.json) and where triplet and Inception write, checked before any model loads."""
  monkeypatch.setattr(sys, "argv", ["predict"])  # run_config reads --config arguments from it
  flag = test_run_files.config_flag("segmentation")
  (tmp_path / "a_file").write_text("not a folder")
  (tmp_path / "run" / "config.json").mkdir(parents=True)
  for workdir in (tmp_path / "a_file", tmp_path / "run"):  # --workdir a file; its config.json a folder
    assert f"{workdir / 'config.json'} does not exist" in error_line(capsys, cli.run_config, flag, str(workdir))

  inception = helpers.make_config("inception_v4", "smoke")
  labels = tmp_path / "inception" / "labels.txt"
  labels.parent.mkdir()
  for case, (write, said) in {
      "missing": (lambda: None, "labels.txt does not exist: give the --workdir of an inception_finetune"),
      "empty": (lambda: labels.write_text(""), "labels.txt: no '<id>:<name>' lines"),
      "cut short": (lambda: labels.write_text("0:pug\n1"), "labels.txt:2: expected '<id>:<name>'"),
      "a folder": (labels.mkdir, "labels.txt does not exist: give the --workdir of an inception_finetune"),
  }.items():
    write()
    assert said in error_line(capsys, inception_predict.load_workdir, str(labels.parent), inception), case
    shutil.rmtree(labels) if labels.is_dir() else labels.unlink(missing_ok=True)

  metrics = tmp_path / "triplet" / "metrics.json"
  metrics.parent.mkdir()
  for make, reason in ((lambda: None, "No such file or directory"), (metrics.mkdir, "Is a directory")):
    make()
    assert triplet_predict.metrics_threshold(str(metrics.parent), 3) == (
        None, f"{metrics} cannot be read ({reason}); pass --threshold or --saved_model")

  image = photo(tmp_path / "photo.png")
  saved_model = tmp_path / "stand_in"  # passes the checks before a load, which would fail
  saved_model.mkdir()
  (saved_model / "saved_model.pb").write_bytes(b"")
  triplet = helpers.make_config("triplet", "smoke")
  folder, reason = read_only_dir
  for where, said in ((tmp_path / "a_file", "(File exists); a file stands where a folder is needed"),
                      (folder, f"({reason}); it is not writable")):
    for command, flag_name in (
        (lambda: triplet_predict.run([image], triplet, saved_model=str(saved_model), embed_path=f"{where}/e.npy"),
         "--embed_to"),
        (lambda: triplet_predict.run([image], triplet, saved_model=str(saved_model), gallery=str(tmp_path),
                                     output=f"{where}/found.csv"), "--output"),
        (lambda: inception_predict.classify([image], inception, saved_model=str(saved_model),
                                            output=f"{where}/top.csv"), "--output")):
      line = error_line(capsys, command)
      assert line.startswith(f"error: cannot write {where}") and said in line and line.endswith(flag_name), line
  assert error_line(capsys, inception_predict.classify, [image], inception, saved_model=str(saved_model),
                    top_k=0) == "error: --top_k=0 must be 1 or more"
  assert os.listdir(folder) == []

  # An Inception export's assets/class_names.txt (a model of 3 classes): ids without it, a line when empty.
  module = tf.Module()
  module.serve = tf.function(lambda images: {"probabilities": tf.ones([tf.shape(images)[0], 3]) / 3},
                             input_signature=[tf.TensorSpec([None, None, None, 3], tf.uint8, name="images")])
  export = tmp_path / "export"
  tf.saved_model.save(module, str(export), signatures={"serving_default": module.serve})
  names = export / "assets" / export_lib.CLASS_NAMES_ASSET
  names.parent.mkdir(exist_ok=True)
  assert inception_predict.load_saved_model(str(export))[1] == ["0", "1", "2"]  # missing: the ids
  names.mkdir()
  assert inception_predict.load_saved_model(str(export))[1] == ["0", "1", "2"]  # a folder: no names, as missing
  names.rmdir()
  names.write_text("")
  assert error_line(capsys, inception_predict.load_saved_model, str(export)) == (
      f"error: {names} names 0 classes, the model gives 3; export the run again")


def image_and_mask_folders(root, count=3):
  """images/ and masks/ of `count` 16x16 pairs (classes 0 and 1)."""
  for i in range(count):
    for folder, array in (("images", np.full((16, 16, 3), 40 * i, np.uint8)), ("masks", np.eye(16, dtype=np.uint8))):
      os.makedirs(root / folder, exist_ok=True)
      Image.fromarray(array).save(root / folder / f"im{i}.png")
  return str(root / "images"), str(root / "masks")


def test_convert_to_tfrecord_reads_and_writes_in_one_line(tmp_path, capsys, monkeypatch, read_only_dir):
  """scripts/convert_to_tfrecord.py's images, masks and split file (segmentation's readers) and its
  shards: each bad one a line; the shards are written all whole or none (a signal between images,
  a folder in the way, a read-only folder or a full disk leaves none)."""
  def convert(root, **flags):
    images, masks = image_and_mask_folders(root) if not (root / "images").exists() else (
        str(root / "images"), str(root / "masks"))
    return convert_to_tfrecord.run(2, flags.pop("output_prefix", str(root / "out" / "train")), images_dir=images,
                                   masks_dir=masks, num_shards=2, **flags)

  cases = {  # name: (what it does to the folders of 3 pairs, extra flags, what the line says)
      "an image without its mask": (lambda root: os.remove(root / "masks" / "im1.png"), {}, "has no mask"),
      "no images": (lambda root: [os.remove(path) for path in glob.glob(f"{root}/images/*")], {},
                    "no files ending in"),
      "an image cut short": (lambda root: test_run_files.cut(root / "images" / "im2.png", 0.5), {},
                             "does not decode as an image"),
      "text named .png": (lambda root: (root / "images" / "im0.png").write_text("not an image"), {},
                          "does not decode as an image"),
      "a mask that is a folder": (lambda root: (os.remove(root / "masks" / "im0.png"), (root / "masks" / "im0.png").mkdir()),
                                  {}, "a folder, expected"),
      "split file missing": (lambda root: None, {"split_file": "nowhere.txt"}, "no such split file"),
      "split file empty": (lambda root: (root / "ids.txt").write_text("\n"), {"split_file": "ids.txt"},
                           "split file lists no image ids"),
      "split file cut short": (lambda root: (root / "ids.txt").write_text("im0\nim"), {"split_file": "ids.txt"},
                               "has no image in"),
      "split file not UTF-8": (lambda root: (root / "ids.txt").write_bytes(b"im0\nim\xe9\n"), {"split_file": "ids.txt"},
                               "not UTF-8 text"),
      "split file a folder": (lambda root: (root / "ids.txt").mkdir(), {"split_file": "ids.txt"},
                              "a folder, expected a split file"),
  }
  for case, (damage, flags, said) in cases.items():
    root = tmp_path / case.replace(" ", "_")
    image_and_mask_folders(root)
    damage(root)
    flags = {key: str(root / value) for key, value in flags.items()}
    assert said in error_line(capsys, convert, root, **flags), case
    assert not (root / "out").exists(), case

  root = tmp_path / "writes"
  (root / "out" / "train-00001-of-00002.tfrecord").mkdir(parents=True)  # a folder in the way of a shard
  assert "(Is a directory); check the path or choose another --output_prefix; nothing was written" in error_line(
      capsys, convert, root)
  assert os.listdir(root / "out") == ["train-00001-of-00002.tfrecord"]
  folder, _ = read_only_dir
  assert "it is not writable: make it writable or choose another --output_prefix; nothing was written" in error_line(
      capsys, convert, root, output_prefix=f"{folder}/train")
  with nearly_full_disk(tmp_path / "disk", pages=4) as disk:
    assert "the disk is full: free some space or choose another --output_prefix; nothing was written" in error_line(
        capsys, convert, tmp_path / "big", output_prefix=f"{disk}/train")
    assert os.listdir(disk) == [".filler"]

  make_record = convert_to_tfrecord.make_record

  def then_a_signal(*args):  # SIGTERM once the first record is made: honoured before the second
    signals._received.append(signal.SIGTERM)  # pylint: disable=protected-access  # as the handler records it
    return make_record(*args)

  monkeypatch.setattr(convert_to_tfrecord, "make_record", then_a_signal)
  try:
    code, lines = guarded(capsys, convert, tmp_path / "stopped")
  finally:
    signals._received.clear()  # pylint: disable=protected-access
  assert code == 128 + signal.SIGTERM and lines == [
      "interrupted by SIGTERM after 1 of 3 images; nothing was written"], lines
  assert os.listdir(tmp_path / "stopped" / "out") == []
  assert error_line(capsys, convert_to_tfrecord.run, None, None) == (
      "error: --num_classes and --output_prefix are required")


def main_block(command):
  """The source of the command module's last `if __name__ == "__main__":` block."""
  tree = ast.parse(open(os.path.join(REPO_ROOT, *command.split(".")) + ".py").read())
  return ast.unparse([node for node in tree.body if isinstance(node, ast.If) and "__main__" in ast.unparse(node.test)][-1])


def test_every_command_honours_a_signal_at_start_up_and_after_its_end(capsys, monkeypatch):
  """Every command whose table has a signal at start-up runs behind the commands' guard (cli.run,
  directly or through commands.run_training / run_evaluation, or cli.run_guarded), which says at
  start-up that nothing was written and after the end that everything was; check_gpu's end too."""
  guarded_commands = [command for (command, surface, kind), row in cells() if (surface, kind) == (
      "signals", "at start-up") and row[-1].endswith("::test_every_command_honours_a_signal_at_start_up_and_after_its_end")]
  assert len(guarded_commands) >= 13, guarded_commands
  for command in guarded_commands:
    assert re.search(r"\b(cli\.run|commands\.run_training|commands\.run_evaluation|cli\.run_guarded)\(",
                     main_block(command)), command
  monkeypatch.setattr(absl_app, "run", lambda function, flags_parser: function(["command"]))
  monkeypatch.setattr(run_log, "start", lambda record_filter: None)  # no lines held for a train.log
  monkeypatch.setattr(signals, "finish", signals.check)  # keep the test's handlers
  ran = []
  for signum in (signal.SIGINT, signal.SIGTERM):
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_info:
      with signals.recording():
        signals._received.append(signum)  # pylint: disable=protected-access  # as the handler records it
        cli.run(ran.append)
    assert exit_info.value.code == 128 + signum and capsys.readouterr().err.strip().splitlines() == [
        f"interrupted by {signal.Signals(signum).name} during start-up; nothing was written"]
  assert not ran  # main never started

  def check_then_a_signal():
    signals._received.append(signal.SIGINT)  # pylint: disable=protected-access
    return 1

  monkeypatch.setattr(check_gpu, "main", check_then_a_signal)
  code, lines = guarded(capsys, check_gpu.checked_main)
  assert code == 128 + signal.SIGINT and lines == ["interrupted by SIGINT after the check; nothing was written"]


def test_a_signal_at_the_safe_points_of_evaluate_and_of_the_trainers_export(tmp_path, capsys, monkeypatch):
  """evaluate stops before its next batch and says nothing was written; a training run's export, before
  it starts (nothing exported, the run finished and checkpointed) or once the SavedModel is whole."""
  monkeypatch.setattr(sys, "argv", ["evaluate"])  # run_config reads --config arguments from it
  run = tmp_path / "run"
  test_run_files.write_run("segmentation", run)
  load_predict_fn = evaluation_lib.load_predict_fn

  def loaded_then_a_signal(*args):
    predict = load_predict_fn(*args)
    signals._received.append(signal.SIGTERM)  # pylint: disable=protected-access  # as the handler records it
    return predict

  monkeypatch.setattr(evaluation_lib, "load_predict_fn", loaded_then_a_signal)
  code, lines = guarded(capsys, commands.evaluate_run, test_run_files.config_flag("segmentation"), str(run),
                        test_run_files.MAKE_TASK["segmentation"])
  assert code == 128 + signal.SIGTERM and lines[-1:] == [
      "interrupted by SIGTERM during the evaluation; nothing was written"], lines
  assert os.listdir(run / "eval") == []  # made before the evaluation (its log goes there): no report

  model = tf.keras.Sequential([tf.keras.Input((3,)), tf.keras.layers.Dense(1)])
  path = str(tmp_path / "saved_model")
  save = tf.saved_model.save

  def saved_then_a_signal(*args, **kwargs):
    save(*args, **kwargs)
    signals._received.append(signal.SIGTERM)  # pylint: disable=protected-access

  for when, said, written in (
      ("before", f"before the export of {path}; training is finished and checkpointed: run the same command "
                 "again to export", False),
      ("during", f"during the export; the SavedModel {path} is complete", True)):
    if when == "before":
      signals._received.append(signal.SIGTERM)  # pylint: disable=protected-access
    else:
      monkeypatch.setattr(tf.saved_model, "save", saved_then_a_signal)
    try:
      with pytest.raises(signals.Interrupted) as interrupted:
        export_lib.export_saved_model(model, lambda x: {"y": model(x)}, path, [tf.TensorSpec([None, 3], tf.float32)],
                                      "test")
    finally:
      signals._received.clear()  # pylint: disable=protected-access
    assert str(interrupted.value) == f"interrupted by SIGTERM {said}", when
    assert os.path.isfile(os.path.join(path, "saved_model.pb")) == written, when
    assert sorted(os.listdir(tmp_path)) == ["run"] + ["saved_model"] * written, when


def test_fetch_from_a_file_that_is_not_there_is_one_line(tmp_path, capsys):
  """--from_file missing, empty or a folder, and an --output_dir that is a file: one line each, nothing
  installed (the tarball's other faults: tests/test_fetch_slim_checkpoint.py)."""
  (tmp_path / "empty.tar.gz").write_bytes(b"")
  (tmp_path / "a_file").write_text("not a folder")
  (tmp_path / "a_folder").mkdir()
  for output_dir, tarball, said in (
      ("out", "nothing.tar.gz", "--from_file {tarball} does not exist"),
      ("out", "empty.tar.gz", "{tarball} is truncated or corrupt (empty file); nothing was installed"),
      ("out", "a_folder", "--from_file {tarball} is a folder, not the tarball"),
      ("a_file", "empty.tar.gz", "cannot create --output_dir {output_dir} (File exists)")):
    output_dir, tarball = tmp_path / output_dir, tmp_path / tarball
    line = error_line(capsys, fetch_lib.fetch, str(output_dir), from_file=str(tarball), say=lambda line: None)
    assert line.startswith("error: " + said.format(tarball=tarball, output_dir=output_dir)), line
  assert os.listdir(tmp_path / "out") == []


def test_launch_workers_without_workers_or_a_command_is_one_line(capsys):
  for argv, said in ((["--num_workers", "0", "--", "python", "-c", "pass"], "error: --num_workers=0 must be at least 1"),
                     (["--num_workers", "2"], "error: no command to run: give it after --"),
                     (["--num_workers", "two", "--", "python"], "error: argument --num_workers: invalid int value"),
                     (["--", "python"], "error: the following arguments are required: --num_workers")):
    try:
      code = launch_workers.main(argv)
    except SystemExit as exit_info:  # argparse's errors
      code = exit_info.code
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith(said), (argv, lines)
    assert "[launcher]" not in captured.out  # no worker was started


def test_make_real_sets_in_the_way_full_or_stopped_is_one_line(tmp_path):
  """--output_dir a file, on a full disk, or SIGTERM while writing: one line each (the script imports
  no TensorFlow: a command line each is quick)."""
  (tmp_path / "a_file").write_text("not a folder")
  with nearly_full_disk(tmp_path / "disk") as disk:
    for output_dir, said in ((tmp_path / "a_file", f"error: cannot write {tmp_path / 'a_file'}/voc (Not a "
                                                   "directory); choose another --output_dir"),
                             (disk, f"error: cannot write {disk}")):
      result = run_python(["scripts/make_real_sets.py", "--sets=voc", f"--output_dir={output_dir}"])
      lines = result.stderr.strip().splitlines()
      assert result.returncode == 2 and len(lines) == 1 and lines[0].startswith(said), lines
    assert "(No space left on device); choose another --output_dir or free space" in lines[0], lines
  output_dir = tmp_path / "sets"
  script = subprocess.Popen([sys.executable, "scripts/make_real_sets.py", f"--output_dir={output_dir}"],
                            cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
  deadline = time.monotonic() + 120
  while not (output_dir / "voc").is_dir() and script.poll() is None and time.monotonic() < deadline:
    time.sleep(0.05)  # the first set is being written
  script.send_signal(signal.SIGTERM)
  _, stderr = script.communicate(timeout=60)
  assert script.returncode == 128 + signal.SIGTERM and stderr.strip().splitlines() == [
      f"interrupted by SIGTERM: {output_dir} holds part of the sets; run the command again to write them whole"], stderr


def test_a_config_file_missing_broken_or_of_another_trainer_is_one_line(tmp_path, capsys):
  """--config of every trainer's command (cli.define_flags): a file that is not there, a folder, Python
  that does not run, or another trainer's config file (was: a KeyError traceback once the run began)."""
  (tmp_path / "broken.py").write_text("def get_config(:\n")
  missing = "error: config file {} does not exist (a relative --config is read from the current folder"
  for path, said in ((tmp_path / "nothing.py", missing),
                     (tmp_path, missing),
                     (tmp_path / "broken.py", "error: invalid syntax (broken.py, line 1)"),
                     ("configs/triplet.py:smoke", "error: config file configs/triplet.py is another trainer's config "
                                                  "(trainer 'triplet', not 'segmentation'); "
                                                  "give configs/segmentation.py or a copy of it")):
    code, lines = guarded(capsys, cli._check_config_args, "configs/segmentation.py",  # pylint: disable=protected-access
                          ["train", f"--config={path}"])
    assert code == 2 and len(lines) == 1 and lines[0].startswith(said.format(path)), lines
  # The trainer a run is named after is the config file's, never a flag's.
  code, lines = guarded(capsys, cli._check_config_args, "configs/segmentation.py",  # pylint: disable=protected-access
                        ["train", "--config.trainer=triplet"])
  assert code == 2 and lines == [
      "error: --config.trainer: the config file names its trainer ('segmentation'); leave it out"], lines
  # The trainer's own file, any preset, or a copy of it elsewhere, is its config.
  shutil.copy("configs/inception_v4.py", tmp_path / "mine.py")
  for default, given in (("configs/segmentation.py", "configs/segmentation.py:gtx960m"),
                         ("configs/inception_v4.py", f"{tmp_path / 'mine.py'}:smoke")):
    cli._check_config_args(default, ["train", f"--config={given}", "--config.seed=3"])  # pylint: disable=protected-access


def test_a_bad_flag_of_a_command_is_one_line(capsys, monkeypatch):
  """absl's parse of every command behind cli.run: a value of the wrong type, under its bound or not one
  of an enum's, and a flag no command has, are each one line and exit code 2 (flags as the commands
  define them: predict's --max_pixels, convert_to_tfrecord's --num_classes, export's --format)."""
  defined = absl_flags.FlagValues()
  absl_flags.DEFINE_integer("max_pixels", None, "", lower_bound=1, flag_values=defined)
  absl_flags.DEFINE_integer("num_classes", None, "", lower_bound=2, flag_values=defined)
  absl_flags.DEFINE_enum("format", None, run_export.FORMATS, "", flag_values=defined)
  monkeypatch.setattr(absl_flags, "FLAGS", defined)  # cli._parse_flags parses absl's FLAGS
  for argument, said in (("--max_pixels=many", "error: flag --max_pixels=many: invalid literal for int()"),
                         ("--num_classes=1", "error: flag --num_classes=1: 1 is not integer >= 2"),
                         ("--format=tflite", "error: flag --format=tflite: value should be one of"),
                         ("--max_pixel=10", "error: Unknown command line flag 'max_pixel'. Did you mean: max_pixels")):
    code, lines = guarded(capsys, cli._parse_flags, ["command", argument])  # pylint: disable=protected-access
    assert code == 2 and len(lines) == 1 and lines[0].startswith(said), (argument, lines)


def warnings_of(caplog):
  return [record.getMessage() for record in caplog.records if record.levelname == "WARNING"]


def test_a_rerun_reads_its_broken_run_files_in_one_line(tmp_path, capsys, caplog):
  """What a training run reads back of its workdir: config.json (compared, then rewritten whole), the
  newest checkpoint, triplet's baselines initial_eval.json and initial_roc.json (shown beside the
  figures, never trained on: a warning, and the run goes on without them)."""
  config = helpers.make_config("segmentation", "smoke")
  for case, (write, warned) in {
      "empty": (lambda path: path.write_text(""), "config.json is empty; it is rewritten by this run"),
      "a list": (lambda path: path.write_text("[1]"), "config.json holds no keys (a JSON list); it is rewritten by this run"),
      "another trainer's": (lambda path: config_lib.write_config(helpers.make_config("triplet", "smoke"), str(path.parent)),
                            "config.json is another trainer's config (trainer 'triplet', not 'segmentation')")}.items():
    workdir = tmp_path / case.replace(" ", "_").replace("'", "")
    workdir.mkdir()
    write(workdir / "config.json")
    caplog.clear()
    workdir_lib.write_run_config(config, str(workdir))
    assert [warned in line for line in warnings_of(caplog)] == [True], (case, warnings_of(caplog))
    assert config_lib.read_saved_config(str(workdir / "config.json"), config, "") == config_lib.resolved(config)
  (tmp_path / "folder" / "config.json").mkdir(parents=True)
  line = error_line(capsys, workdir_lib.write_run_config, config, str(tmp_path / "folder"))
  assert line == (f"error: cannot write {tmp_path / 'folder' / 'config.json'} (Is a directory); check the path or "
                  "choose another --workdir"), line
  assert os.listdir(tmp_path / "folder") == ["config.json"]  # no config.json.tmp left

  run = tmp_path / "corrupt"
  data = test_run_files.corrupt(test_run_files.write_run("segmentation", run)[-1])
  line = error_line(capsys, segmentation_train.train_and_evaluate, config, str(run))
  assert line.startswith(f"error: {data} is corrupt (checksum does not match)"), line

  baselines = tmp_path / "triplet" / "initial_eval.json"
  baselines.parent.mkdir()
  for case, (write, kept, warned) in {
      "empty": (lambda: baselines.write_text(""), {}, "initial_eval.json is empty; the closing line leaves out"),
      "a folder": (baselines.mkdir, {}, "initial_eval.json cannot be read (Is a directory)"),
      "another trainer's": (lambda: baselines.write_text('{"miou": 0.5}'), {"miou": 0.5}, None),
  }.items():
    write()
    caplog.clear()
    initial = triplet_train.evaluate_before_training(None, None, str(baselines.parent))
    assert initial == kept and [warned in line for line in warnings_of(caplog)] == [True] * bool(warned), case
    # The closing line shows the baselines it has: none of these.
    assert triplet_train.headline({"eval": {"recall_at_1": 0.9}, "step": 3}, initial) == "recall_at_1 0.9000 at step 3"
    shutil.rmtree(baselines) if baselines.is_dir() else baselines.unlink()

  triplet = helpers.make_config("triplet", "smoke")
  workdir = tmp_path / "triplet"
  task = test_run_files.MAKE_TASK["triplet"](triplet, str(workdir), False)
  evaluation = task.evaluate(task.make_predict_fn(test_run_files.BUILD_MODEL["triplet"](triplet)), False)
  curves = workdir / triplet_task.INITIAL_ROC
  for case, (write, warned) in {
      "empty": (lambda: curves.write_text(""), "is empty; the ROC is drawn without the baselines"),
      "cut short": (lambda: curves.write_text('{"untrained": {"far": [0.0, '), "the ROC is drawn without the baselines"),
      "another trainer's": (lambda: curves.write_text('{"miou": 0.5}'), "the ROC is drawn without them"),
      "a folder": (curves.mkdir, None),  # not a file: no baselines, as without one
  }.items():
    write()
    caplog.clear()
    report = tmp_path / "reports" / case.replace(" ", "_").replace("'", "")
    evaluation.write(str(report))
    assert os.listdir(report) == [triplet_task.ROC_PNG], case
    assert [warned in line for line in warnings_of(caplog)] == [True] * bool(warned), (case, warnings_of(caplog))
    shutil.rmtree(curves) if curves.is_dir() else curves.unlink()


def test_an_empty_class_folder_is_one_line(tmp_path, capsys):
  """Inception's class folders with no image, and a labels.csv of no rows (0 bytes)."""
  (tmp_path / "train" / "pug").mkdir(parents=True)
  (tmp_path / "train" / "beagle").mkdir()
  (tmp_path / "images").mkdir()
  (tmp_path / "labels.csv").write_text("")
  for overrides, said in (
      ({"data.source": "folder", "data.train_dir": str(tmp_path / "train")},
       f"error: {tmp_path / 'train' / 'beagle'}: no files ending in .jpg"),
      ({"data.source": "csv", "data.csv_path": str(tmp_path / "labels.csv"), "data.images_dir": str(tmp_path / "images")},
       f"error: {tmp_path / 'labels.csv'}: no rows")):
    config = helpers.make_config("inception_v4", "smoke", **overrides, **{"data.num_classes": 0})
    line = error_line(capsys, inception_train.train_and_evaluate, config, str(tmp_path / "run"))
    assert line.startswith(said), line


def test_benchmark_honours_a_signal_and_a_full_disk_in_one_line(tmp_path, capsys, monkeypatch):
  """benchmark.py behind the commands' guard: a bad flag is one line (not argparse's usage line first),
  a signal at start-up, between trainers or after the end one line and 128 + N, a --json the disk fills
  up under one line and no file (--estimate_only's figures stood in for: its machinery is not what
  is tested)."""
  for argv, said in ((["segmentation", "--steps", "x"], "error: argument --steps: invalid int value: 'x'"),
                     (["segmentation", "--windows", "0"], "error: --windows, --steps and --batch_size must be positive"),
                     (["segmentation", "--variants", "bfloat16"], "error: --variants bfloat16: choose from ")):
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_info:
      benchmark.main(argv)
    lines = capsys.readouterr().err.strip().splitlines()
    assert exit_info.value.code == 2 and len(lines) == 1 and lines[0].startswith(said), lines

  estimated = []

  def estimate(trainer, args, workdir):  # the figures of one trainer, and a signal while it ran
    estimated.append(trainer)
    signals._received.append(signal.SIGTERM)  # pylint: disable=protected-access  # as the handler records it
    return {"trainer": trainer}, f"== {trainer}"

  monkeypatch.setattr(benchmark_estimates, "estimate_trainer", estimate)
  monkeypatch.setattr(signals, "finish", signals.check)  # keep the test's handlers
  for trainers, said in ((["segmentation", "triplet"], "during the benchmark; nothing was written"),
                         (["segmentation"], "after the benchmark; every figure is printed")):
    estimated.clear()
    with pytest.raises(SystemExit) as exit_info:
      benchmark.main([*trainers, "--preset", "smoke", "--estimate_only"])
    lines = capsys.readouterr().err.strip().splitlines()
    assert exit_info.value.code == 128 + signal.SIGTERM and lines == [f"interrupted by SIGTERM {said}"], lines
    assert estimated == ["segmentation"]  # triplet's not begun
  signals._received.append(signal.SIGINT)  # pylint: disable=protected-access
  with pytest.raises(SystemExit) as exit_info:
    benchmark.main(["segmentation", "--estimate_only"])
  assert exit_info.value.code == 128 + signal.SIGINT and capsys.readouterr().err.strip().splitlines() == [
      "interrupted by SIGINT during start-up; nothing was written"] and estimated == ["segmentation"]

  monkeypatch.setattr(benchmark_estimates, "run_estimates", lambda args: {"trainers": ["figures " * 2000]})
  with nearly_full_disk(tmp_path / "disk") as disk:
    with pytest.raises(SystemExit) as exit_info:
      benchmark.main(["segmentation", "--preset", "smoke", "--estimate_only", "--json", f"{disk}/r.json"])
    lines = capsys.readouterr().err.strip().splitlines()
    assert exit_info.value.code == 2 and lines[-1:] == [
        f"error: cannot write {disk}/r.json (No space left on device); the disk is full: free some space or "
        "choose another --json"], lines
    assert os.listdir(disk) == [".filler"]  # nothing half-written


def test_a_triplet_threshold_that_serves_no_verification_is_said_by_export_and_predict(tmp_path, capsys, caplog):
  """metrics.json's eval of another type is a reason, not a TypeError; a threshold at or below 0 (a
  run that learned nothing: its evaluation called every pair different) is warned of by the export and
  refused by predict saying why (not "export the run again", which writes it again); --threshold_from
  given a file that is no export's JSON (a run's config.json) is one line, exit 2."""
  metrics = tmp_path / "metrics.json"
  for value in ("3", "null", '"x"', "[1]", "true"):
    metrics.write_text(f'{{"eval": {value}, "step": 3}}')
    assert triplet_predict.metrics_threshold(str(tmp_path), 3) == (
        None, f"{metrics}'s eval is {value}, not an evaluation's record; pass --threshold"), value
  caplog.clear()
  export_lib.warn_of_constants({"threshold": -0.9014, "step": 20}, "t.onnx")
  assert "the export t.onnx carries its run's verification threshold, which is -0.9014, below every" in caplog.text
  image = photo(tmp_path / "photo.png")
  config = helpers.make_config("triplet", "smoke")
  config_lib.write_config(config, str(tmp_path))
  described = tmp_path / "t.onnx.json"
  described.write_text('{"trainer": "triplet", "format": "onnx", "threshold": -0.9014, "step": 20}')
  for given, said in ((described, "threshold is -0.9014, below every distance: no pair would be the same"),
                      (tmp_path / "config.json", "is no export's JSON (its " + '"format" is null, not onnx or litert)')):
    line = error_line(capsys, triplet_predict.run, [image, image], config, saved_model=str(tmp_path / "none"),
                      compare_two=True, threshold_from=str(given))
    assert line.startswith(f"error: {given}") and said in line and "export the run again" not in line, line


def test_export_refuses_a_saved_model_of_other_outputs_and_files_it_did_not_make(tmp_path, capsys, monkeypatch):
  """A --saved_model whose assets/trainer.txt names the run's trainer but which gives other outputs
  (embeddings for a segmentation run) was KeyError: 'logits'; a .onnx of another tool, or a file at
  <output>.json that no export wrote, was replaced: each is one line, exit 2, nothing written."""
  monkeypatch.setattr(sys, "argv", ["export"])  # run_config reads --config arguments from it
  run = tmp_path / "run"
  test_run_files.write_run("segmentation", run, steps=(10,))
  module = tf.Module()
  module.serve = tf.function(lambda images: {"embeddings": tf.ones([tf.shape(images)[0], 4])},
                             input_signature=[export_lib.UINT8_IMAGES])
  other = str(tmp_path / "embeddings_model")
  tf.saved_model.save(module, other, signatures={"serving_default": module.serve})
  os.makedirs(os.path.join(other, "assets"), exist_ok=True)
  with open(os.path.join(other, "assets", workdir_lib.TRAINER_ASSET), "w") as f:
    f.write("segmentation\n")
  output = tmp_path / "exported"
  line = error_line(capsys, run_export.export, str(run), "saved_model", str(output), saved_model=other)
  assert line == f"error: SavedModel {other} gives embeddings, not logits: the export of another trainer or program"
  assert not output.exists()
  foreign = tmp_path / "theirs.onnx"
  foreign.write_bytes(b"another tool's model")
  mine = tmp_path / "mine.onnx"
  (tmp_path / "mine.onnx.json").write_text("my notes")
  for output, said in ((foreign, f": {foreign}.json does not say {foreign} is an earlier onnx export"),
                       (mine, f": {mine}.json does not say {mine} is an earlier onnx export")):
    line = error_line(capsys, run_export.check_output, str(output), "onnx", str(run))
    assert line.startswith(f"error: --output={output}{said}"), line
  assert foreign.read_bytes() == b"another tool's model" and (tmp_path / "mine.onnx.json").read_text() == "my notes"
