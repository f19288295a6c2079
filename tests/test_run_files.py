"""The files of a run that evaluate and predict read back (config.json, Inception's labels.txt and
class_balance.csv, the checkpoints): a broken one is one line naming it, and a checkpoint rotated
away while it is read is retried on the next newest. In one interpreter, on runs the tests write
(config.json and the trainer's model in CheckpointManager checkpoints), without training."""
import glob
import json
import os
import pathlib
import shutil
import sys
import types

from absl import logging
import numpy as np
from PIL import Image
import pytest
import tensorflow as tf

from common.app import cli
from common.app import commands
from common.app import run_export
from common.contract import config as config_lib
from common.data import class_labels
from common.runtime import workdir as workdir_lib
from common.training import checkpoints
import helpers
from inception_finetune import task as inception_task
from segmentation import data as segmentation_data
from segmentation import predict as predict_lib
from segmentation import task as segmentation_task
from triplet import data as triplet_data
from triplet import evaluate as triplet_evaluate
from triplet import task as triplet_task

MAKE_TASK = {"segmentation": segmentation_task.make_task, "triplet": triplet_evaluate.make_task,
             "inception_v4": inception_task.make_task}
# The trainers whose models are small enough to checkpoint here (Inception's run is
# tests/test_inception_train.py's).
BUILD_MODEL = {"segmentation": lambda config: segmentation_task.build_model(
                   config, segmentation_data.read_settings(config.data)),
               "triplet": lambda config: triplet_task.build_model(
                   config, triplet_data.read_settings(config.data), 0)}
ANOTHER_TRAINER = {"segmentation": "triplet", "triplet": "inception_v4", "inception_v4": "segmentation"}


@pytest.fixture(autouse=True)
def command_line(monkeypatch):
  """The command line of `evaluate --workdir=W` (run_config reads --config arguments from it)."""
  monkeypatch.setattr(sys, "argv", ["evaluate"])


def config_flag(trainer):
  """What cli.define_flags gives a command: the config file's smoke preset."""
  return types.SimpleNamespace(value=helpers.make_config(trainer, "smoke"))


def evaluate(trainer, workdir):
  return commands.evaluate_run(config_flag(trainer), str(workdir), MAKE_TASK[trainer])


def predict(workdir, tmp_path):
  """segmentation.predict --workdir=W photo.png, as its main runs it."""
  image = tmp_path / "photo.png"
  Image.fromarray(np.zeros((12, 16, 3), np.uint8)).save(image)
  config = cli.run_config(config_flag("segmentation"), str(workdir))
  return predict_lib.predict_files([str(image)], str(tmp_path / "masks"), config, workdir=str(workdir))


def commands_reading(trainer, workdir, tmp_path):
  """{command: run it} of the trainer's commands that read a run: evaluate, and segmentation's predict."""
  found = {"evaluate": lambda: evaluate(trainer, workdir)}
  if trainer == "segmentation":
    found["predict"] = lambda: predict(workdir, tmp_path)
  return found


def error_line(capsys, function, *args):
  """The one `error:` line (the last of stderr) of function(*args) behind the commands' guard, exit 2."""
  capsys.readouterr()
  with pytest.raises(SystemExit) as exit_info:
    cli.run_guarded(function, *args)
  lines = capsys.readouterr().err.strip().splitlines()
  assert exit_info.value.code == 2, lines
  assert [line for line in lines if line.startswith("error: ")] == lines[-1:], lines
  return lines[-1]


def write_run(trainer, workdir, steps=(10, 20)):
  """config.json and a checkpoint of the trainer's model at each step, as a run leaves them; returns
  the checkpoints' paths, oldest first."""
  config = helpers.make_config(trainer, "smoke")
  config_lib.write_config(config, str(workdir))
  manager = tf.train.CheckpointManager(tf.train.Checkpoint(model=BUILD_MODEL[trainer](config)),
                                       checkpoints.checkpoint_dir(str(workdir)), max_to_keep=3)
  return [manager.save(checkpoint_number=step) for step in steps]


def corrupt(path):
  """Flips a byte in every 512 of a checkpoint's data file (so that every tensor the model restores,
  and the object graph, is hit); returns the file."""
  data = glob.glob(path + ".data-*")[0]
  contents = bytearray(open(data, "rb").read())
  for i in range(0, len(contents), 512):
    contents[i] ^= 0xFF
  with open(data, "wb") as f:
    f.write(contents)
  return data


def config_json_cases(trainer):
  """{case: (write(path) the broken config.json, what the line says)}."""
  def cut_short(path):
    config_lib.write_config(helpers.make_config(trainer, "smoke"), os.path.dirname(path))
    text = open(path).read()
    open(path, "w").write(text[:len(text) * 6 // 10])

  def another_trainer(path):
    config_lib.write_config(helpers.make_config(ANOTHER_TRAINER[trainer], "smoke"), os.path.dirname(path))

  return {
      "missing": (lambda path: None, "config.json does not exist: give the --workdir of a training run"),
      "empty": (lambda path: open(path, "w").close(), "config.json is empty; copy the run's config back from"),
      "cut short": (cut_short, "config.json is not valid JSON ("),
      "a list": (lambda path: open(path, "w").write("[1, 2]\n"), "config.json holds no keys (a JSON list"),
      "another trainer's": (another_trainer, "config.json is another trainer's config ("),
  }


@pytest.mark.parametrize("trainer", sorted(MAKE_TASK))
def test_a_broken_or_missing_config_json_is_one_line_for_evaluate_and_predict(trainer, tmp_path, capsys):
  for case, (write, said) in config_json_cases(trainer).items():
    workdir = tmp_path / case.replace(" ", "_").replace("'", "")
    workdir.mkdir()
    write(str(workdir / "config.json"))
    for command, run in commands_reading(trainer, workdir, tmp_path).items():
      line = error_line(capsys, run)
      assert line.startswith(f"error: {workdir / 'config.json'}") and said in line, (case, command, line)


def test_with_config_on_the_command_line_a_broken_config_json_is_a_warning(tmp_path, monkeypatch, caplog):
  (tmp_path / "config.json").write_text('{"seed": ')
  monkeypatch.setattr(sys, "argv", ["evaluate", "--config=configs/segmentation.py:smoke"])
  flag = config_flag("segmentation")
  with caplog.at_level(logging.WARNING):
    assert cli.run_config(flag, str(tmp_path)) is flag.value
  assert f"{tmp_path / 'config.json'} is not valid JSON" in caplog.text
  assert "(not compared with --config)" in caplog.text



def test_a_training_rerun_over_a_broken_config_json_warns_and_rewrites_it_whole(tmp_path, caplog):
  config = helpers.make_config("segmentation")
  (tmp_path / "config.json").write_text('{"seed": ')
  with caplog.at_level(logging.WARNING):
    workdir_lib.write_run_config(config, str(tmp_path))
  assert f"{tmp_path / 'config.json'} is not valid JSON" in caplog.text
  assert "it is rewritten by this run" in caplog.text
  assert config_lib.read_saved_config(str(tmp_path / "config.json"), config, "") == config_lib.resolved(config)
  assert not list(tmp_path.glob("*.tmp"))

INCEPTION_CLASSES = [f"class_{i}" for i in range(10)]  # the smoke preset's synthetic classes
BALANCE_HEADER = "id,name,train_images,under_min_count\n"
INCEPTION_FILES = {  # case: ({run file: contents}, the file named, what the line says)
    "class_balance.csv with a header only": (
        {"class_balance.csv": BALANCE_HEADER}, "class_balance.csv", "a header and no classes"),
    "class_balance.csv cut short": (
        {"class_balance.csv": BALANCE_HEADER + "0,class_0,20,0\n1,cla"}, "class_balance.csv:3",
        "expected '1,<name>,<images>,<0 or 1>', got '1,cla'"),
    "class_balance.csv empty": ({"class_balance.csv": ""}, "class_balance.csv", "is not the header"),
    "empty labels.txt": ({"labels.txt": ""}, "labels.txt", "no '<id>:<name>' lines"),
    "labels.txt cut short": ({"labels.txt": "0:class_0\n1"}, "labels.txt:2", "expected '<id>:<name>'"),
    "class_balance.csv of fewer classes than labels.txt": (
        {"labels.txt": class_labels.labels_file_text(INCEPTION_CLASSES),
         "class_balance.csv": class_labels.class_balance_csv([20, 20], INCEPTION_CLASSES[:2], 5)},
        "class_balance.csv", "2 classes, but"),
}


def test_inception_run_files_are_one_line_for_evaluate(tmp_path, capsys):
  for case, (files, named, said) in INCEPTION_FILES.items():
    workdir = tmp_path / case.replace(" ", "_")
    config_lib.write_config(helpers.make_config("inception_v4", "smoke"), str(workdir))
    for name, text in files.items():
      (workdir / name).write_text(text)
    line = error_line(capsys, evaluate, "inception_v4", workdir)
    assert line.startswith(f"error: {workdir / named}") and said in line, (case, line)
    assert line.endswith("; run the training command of this workdir again, which writes it anew"), (case, line)
    assert not (workdir / "data").exists(), case  # refused before the evaluation images are written


@pytest.mark.parametrize("trainer", sorted(BUILD_MODEL))
def test_a_corrupt_checkpoint_is_one_line_naming_its_file_not_a_mismatch(trainer, tmp_path, capsys):
  workdir = tmp_path / "run"
  _, newest = write_run(trainer, workdir)
  data = corrupt(newest)
  for command, run in commands_reading(trainer, workdir, tmp_path).items():
    line = error_line(capsys, run)
    assert line == (f"error: {data} is corrupt (checksum does not match); copy the checkpoint back from a "
                    "backup, or use the run's export (saved_model/)"), (command, line)
  # A checkpoint of another model is still said to be one.
  other = tmp_path / "other"
  write_run(trainer, other)
  config = helpers.make_config(trainer, "smoke", **{"model.widths": (4, 4, 4) if trainer == "segmentation"
                                                     else (4, 8, 8)})
  config_lib.write_config(config, str(other))
  line = error_line(capsys, evaluate, trainer, other)
  assert "does not match this model and config" in line, line


def rotate_away_when_read(monkeypatch, doomed):
  """checkpoints.restore deletes the files of the checkpoints in `doomed` just before reading them, as
  a training run's rotation does between a command's pick and its load."""
  restore = checkpoints.restore

  def rotated(checkpoint, path, partial):
    if path in doomed:
      for name in glob.glob(path + ".*"):
        os.remove(name)
    return restore(checkpoint, path, partial)

  monkeypatch.setattr(checkpoints, "restore", rotated)


def test_a_checkpoint_rotated_away_while_read_is_retried_on_the_next_newest(tmp_path, monkeypatch, caplog, capsys):
  for command in ("evaluate", "predict"):
    workdir = tmp_path / command
    older, newest = write_run("segmentation", workdir)
    rotate_away_when_read(monkeypatch, {newest})
    caplog.clear()
    with caplog.at_level(logging.WARNING):
      if command == "evaluate":
        evaluation, _, _ = evaluate("segmentation", workdir)
        assert 0 <= evaluation.metrics["miou"] <= 1
      else:
        assert predict(workdir, tmp_path) == [str(tmp_path / "masks" / "photo_mask.png")]
    assert (f"checkpoint {newest} vanished while it was read (the run rotated it away); reading {older}, "
            "the newest one left, instead") in caplog.text, command
  # Once only: when the next newest vanishes too, one line names it.
  workdir = tmp_path / "both"
  older, newest = write_run("segmentation", workdir)
  rotate_away_when_read(monkeypatch, {older, newest})
  line = error_line(capsys, evaluate, "segmentation", workdir)
  assert line == (f"error: {older}.index vanished while it was read (the run rotated it away); run the "
                  "command again"), line


def test_triplet_json_files_read_back_broken_are_one_line_naming_them(tmp_path, caplog):
  """initial_eval.json (the closing line's baselines) and metrics.json (predict's threshold)."""
  from triplet import predict as triplet_predict  # pylint: disable=g-import-not-at-top
  from triplet import train as triplet_train  # pylint: disable=g-import-not-at-top
  (tmp_path / "initial_eval.json").write_text('{"recall_at_1": 0.2')
  with caplog.at_level(logging.WARNING):
    assert triplet_train.evaluate_before_training(None, None, str(tmp_path)) == {}
  assert f"{tmp_path / 'initial_eval.json'} is not valid JSON" in caplog.text
  for text, said in (("", "is empty"), ("[]", "holds no keys"), ('{"eval": {"st', "is not valid JSON")):
    (tmp_path / "metrics.json").write_text(text)
    threshold, why = triplet_predict.metrics_threshold(str(tmp_path), 20)
    assert threshold is None and why.startswith(f"{tmp_path / 'metrics.json'} {said}"), why


def state_file_cases(older, newest):
  """{case: write(path) of a broken checkpoint state file (`checkpoints/checkpoint`)} whose
  checkpoint files are sound: the newest must still be found."""
  def dangling(path):
    os.remove(path)
    for name in glob.glob(newest + ".*"):
      os.remove(name)
    checkpoints.write_state(os.path.dirname(path), ["ckpt-98", "ckpt-99"])

  return {
      "garbage": lambda path: open(path, "w").write("model_checkpoint_path: ckpt-20\n{{{ garbage\n"),
      "empty": lambda path: open(path, "w").close(),
      "not UTF-8": lambda path: open(path, "wb").write(b"\xff\xfe\x00model"),
      "missing": os.remove,
      "dangling": dangling,  # names checkpoints that are gone (the newest gone too: `older` is found)
      "a folder": lambda path: (os.remove(path), os.mkdir(path)),  # last: its error line silences the log
  }


def test_a_broken_checkpoint_state_file_is_never_trusted_alone(tmp_path, caplog, capsys):
  """evaluate, predict and export find the newest complete checkpoint from the files; the chief of a
  training run rewrites the state file so that its CheckpointManager goes on from them."""
  for case in state_file_cases("", ""):
    workdir = tmp_path / case.replace(" ", "_")
    older, newest = write_run("segmentation", workdir)
    state_file = os.path.join(checkpoints.checkpoint_dir(str(workdir)), "checkpoint")
    state_file_cases(older, newest)[case](state_file)
    expected = older if case == "dangling" else newest
    caplog.clear()
    with caplog.at_level(logging.WARNING):
      assert checkpoints.newest(checkpoints.checkpoint_dir(str(workdir))) == expected, case
      evaluate("segmentation", workdir)
    assert f"{state_file} (TensorFlow's list of checkpoints)" in caplog.text, case
    assert f"evaluating {expected}\n" in caplog.text, case
    if case == "a folder":  # never replaced: one line says what to do
      line = error_line(capsys, checkpoints.repair_state, checkpoints.checkpoint_dir(str(workdir)))
      assert line.startswith(f"error: cannot rewrite {state_file} (") and line.endswith(
          "remove it (the checkpoints are found from their files) and run the same command again"), line
      continue
    checkpoints.repair_state(checkpoints.checkpoint_dir(str(workdir)))
    assert tf.train.latest_checkpoint(checkpoints.checkpoint_dir(str(workdir))) == expected, case


def cut(path, keep):
  contents = open(path, "rb").read()
  open(path, "wb").write(contents[:int(len(contents) * keep)])


def test_a_damaged_or_another_trainers_saved_model_is_one_line(tmp_path, capsys):
  """evaluate --saved_model and every predict read a SavedModel through one reader: saved_model.pb
  cut short or empty, variables/ missing or cut, and another trainer's export are one line each."""
  from inception_finetune import predict as inception_predict  # pylint: disable=g-import-not-at-top
  from triplet import predict as triplet_predict  # pylint: disable=g-import-not-at-top
  exports = {}
  for trainer in ("segmentation", "triplet"):
    config = helpers.make_config(trainer, "smoke")
    task = MAKE_TASK[trainer](config, str(tmp_path / f"{trainer}_run"), True)
    exports[trainer] = task.export(BUILD_MODEL[trainer](config), str(tmp_path / f"{trainer}_export"))
  damages = {
      "saved_model.pb cut short": lambda path: cut(os.path.join(path, "saved_model.pb"), 0.5),
      "saved_model.pb empty": lambda path: cut(os.path.join(path, "saved_model.pb"), 0),
      "variables/ missing": lambda path: shutil.rmtree(os.path.join(path, "variables")),
      "variables cut short": lambda path: cut(glob.glob(os.path.join(path, "variables", "*.data-*"))[0], 0.5),
      "variables index cut": lambda path: cut(os.path.join(path, "variables", "variables.index"), 0.5),
  }
  image = tmp_path / "photo.png"
  Image.fromarray(np.zeros((12, 16, 3), np.uint8)).save(image)
  config = helpers.make_config("segmentation", "smoke")
  for case, damage in damages.items():
    damaged = str(tmp_path / case.replace(" ", "_").replace("/", ""))
    shutil.copytree(exports["segmentation"], damaged)
    damage(damaged)
    for command, run in (
        ("predict", lambda: predict_lib.predict_files([str(image)], str(tmp_path / "masks"), config,
                                                      saved_model=damaged)),
        ("evaluate", lambda: commands.evaluate_run(config_flag("segmentation"), str(tmp_path / "eval"),
                                                   MAKE_TASK["segmentation"], damaged, ""))):
      line = error_line(capsys, run)
      assert line.startswith(f"error: SavedModel {damaged} is damaged (") and line.endswith(
          "export the run again (scripts/export.py --format=saved_model, or its training command)"), (case, command, line)
  for trainer, other in (("segmentation", "triplet"), ("triplet", "segmentation")):
    assert (pathlib.Path(exports[trainer]) / "assets" / "trainer.txt").read_text() == f"{trainer}\n"
    said = (f"error: SavedModel {exports[other]} is the export of the {other} trainer, not of {trainer}: "
            f"give the saved_model/ of a {trainer} run, or use {other}'s commands")
    line = error_line(capsys, commands.evaluate_run, config_flag(trainer), str(tmp_path / "eval"),
                      MAKE_TASK[trainer], exports[other], "")
    assert line == said, line
    run = tmp_path / f"{trainer}_run"
    config_lib.write_config(helpers.make_config(trainer, "smoke"), str(run))  # read before any weights
    line = error_line(capsys, run_export.export, str(run), "saved_model", str(tmp_path / "out"), exports[other])
    assert line == said, line
  assert not (tmp_path / "out").exists()
  # Every predict: another trainer's export says whose it is; one that names no trainer (another
  # program's, or made before exports named theirs) is refused by the outputs it gives.
  unnamed = {}
  for trainer in exports:
    unnamed[trainer] = shutil.copytree(exports[trainer], tmp_path / f"{trainer}_unnamed")
    os.remove(unnamed[trainer] / "assets" / "trainer.txt")
  for load, trainer, other, wanted in ((predict_lib.load_saved_model, "segmentation", "triplet", "class_ids"),
                                       (triplet_predict.load_saved_model, "triplet", "segmentation", "embeddings"),
                                       (inception_predict.load_saved_model, "inception_v4", "triplet", "probabilities")):
    line = error_line(capsys, load, exports[other])
    assert line == (f"error: SavedModel {exports[other]} is the export of the {other} trainer, not of {trainer}: "
                    f"give the saved_model/ of a {trainer} run, or use {other}'s commands"), line
    line = error_line(capsys, load, str(unnamed[other]))
    assert line.startswith(f"error: SavedModel {unnamed[other]} gives ") and line.endswith(
        f"not {wanted}: the export of another trainer or program"), line
  assert not (tmp_path / "masks").exists()  # made (and checked writable) before the model loads, then removed


def test_triplet_baselines_of_the_wrong_types_are_set_aside_with_a_warning(tmp_path, caplog):
  """initial_eval.json with a string value (the closing line formats each as a number) and
  initial_roc.json with curves of unequal length (matplotlib could not draw them): warnings naming
  them, and the run's outputs (its closing line, its roc.png) without those baselines."""
  from triplet import train as triplet_train  # pylint: disable=g-import-not-at-top
  (tmp_path / "initial_eval.json").write_text('{"recall_at_1": "0.2", "raw_pixels/recall_at_1": 0.5}')
  with caplog.at_level(logging.WARNING):
    assert triplet_train.evaluate_before_training(None, None, str(tmp_path)) == {}
  assert f'{tmp_path / "initial_eval.json"}: recall_at_1 is "0.2", not a number' in caplog.text
  config = helpers.make_config("triplet", "smoke")
  task = triplet_evaluate.make_task(config, str(tmp_path), False)
  evaluation = task.evaluate(task.make_predict_fn(BUILD_MODEL["triplet"](config)), False)
  (tmp_path / triplet_task.INITIAL_ROC).write_text(json.dumps(
      {"untrained": {"far": [0.0, 0.5, 1.0], "tar": [0.0, 1.0]}}))
  caplog.clear()
  with caplog.at_level(logging.WARNING):
    evaluation.write(str(tmp_path / "report"))
  assert os.path.isfile(tmp_path / "report" / "roc.png")
  assert (f"{tmp_path / triplet_task.INITIAL_ROC} is not the run's baselines (keys far, tar of equal "
          "length per curve)") in caplog.text


def test_config_json_values_of_the_wrong_type_are_left_out_with_a_warning(tmp_path, caplog):
  """A string where a number is, or null (which ml_collections would take for any type and a reader
  would fail on later): the value is not taken, a warning names the key, evaluate runs."""
  for key, value in (("train.num_steps", "ten"), ("data.patch_size", None)):
    workdir = tmp_path / key
    write_run("segmentation", workdir)
    saved = json.loads((workdir / "config.json").read_text())
    section, name = key.split(".")
    saved[section][name] = value
    (workdir / "config.json").write_text(json.dumps(saved))
    caplog.clear()
    with caplog.at_level(logging.WARNING):
      evaluation, _, _ = evaluate("segmentation", workdir)
    assert 0 <= evaluation.metrics["miou"] <= 1
    assert f"{workdir / 'config.json'}: {key} not taken (keys this version does not have, or of another type)" \
        in caplog.text, key
