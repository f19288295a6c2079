"""data.source='tfds' in the three trainers (common/data/tfds_sets.py): each trains on a prepared TFDS
data set (tests/tfds_data.py's tiny copies, made by TFDS's own builders), resumes after SIGTERM as a
straight run goes, and evaluates; bad data sets, splits, features and set-ups are one line each."""
import contextlib
import importlib
import os
import re
import runpy
import signal
import subprocess
import sys

from absl import flags
import numpy as np
import pytest
import tensorflow as tf

from common.runtime import signals
from common.data import tfds_sets
from helpers import REPO_ROOT
from helpers import make_config
from test_bad_inputs import run_like_the_cli
from test_segmentation_train import checkpoint_values

# trainer: (config file, train module, the data set it reads here, its overrides)
TRAINERS = {
    "segmentation": ("segmentation", "segmentation.train", "oxford_iiit_pet", {"data.num_classes": 2}),
    "inception_v4": ("inception_v4", "inception_finetune.train", "stanford_dogs", {"data.num_classes": 0}),
    # 10 identities: 3 held out (by name hash), so that verification pairs have two of them.
    "triplet": ("triplet", "triplet.train", "lfw", {"data.tfds_eval_fraction": 0.3}),
}


def tfds_overrides(trainer, data_dir, **more):
  _, _, name, own = TRAINERS[trainer]
  return {"data.source": "tfds", "data.tfds_name": name, "data.tfds_data_dir": str(data_dir), **own, **more}


def flags_of(overrides):
  return [f"--config.{key}={value}" for key, value in overrides.items()]


# Bad inputs: (trainer, case, overrides beyond tfds_overrides, the words of the one line).
BAD = [
    ("segmentation", "unknown name", {"data.tfds_name": "no_such_data_set"},
     "data.tfds_name='no_such_data_set' is not a TensorFlow Datasets data set"),
    ("triplet", "empty name", {"data.tfds_name": ""}, "data.tfds_name must be set for data.source='tfds'"),
    ("inception_v4", "not prepared", {"data.tfds_name": "mnist"},
     "data.tfds_name='mnist' is not prepared in {data_dir}/mnist/3.0.1: run `tfds build mnist "
     "--data_dir={data_dir}`"),
    ("segmentation", "missing split", {"data.tfds_train_split": "validation"},
     "data.tfds_train_split='validation' of 'oxford_iiit_pet': Unknown split 'validation'"),
    ("inception_v4", "malformed split", {"data.tfds_eval_split": "test[:50"},
     "data.tfds_eval_split='test[:50' of 'stanford_dogs'"),
    ("triplet", "empty split", {"data.tfds_train_split": "train[:0]"},
     "data.tfds_train_split='train[:0]' of 'lfw' holds no examples"),
    ("segmentation", "no segmentation mask", {"data.tfds_name": "stanford_dogs"},
     "the trainer reads the masks from a feature 'segmentation_mask' (Image); the data set has image (Image)"),
    ("inception_v4", "label of the wrong kind", {"data.tfds_name": "lfw"},
     "the trainer reads the class ids from a feature 'label' (ClassLabel); the data set has image (Image), "
     "label (Text)"),
    ("segmentation", "trimaps with other classes", {"data.num_classes": 3},
     "data.num_classes=3: oxford_iiit_pet's trimaps are 2 classes"),
]


@pytest.mark.parametrize("trainer, case, overrides, words", BAD, ids=[f"{t}: {c}" for t, c, _, _ in BAD])
def test_a_bad_data_set_split_or_feature_is_one_line(trainer, case, overrides, words, tfds_data_dir, tmp_path,
                                                     capsys):
  del case
  config = make_config(TRAINERS[trainer][0], "smoke", **tfds_overrides(trainer, tfds_data_dir, **overrides))
  code, lines = run_like_the_cli(trainer, config, str(tmp_path / "run"), capsys)
  words = words.format(data_dir=tfds_data_dir)
  assert code == 2 and lines[-1].startswith("error: ") and words in lines[-1], lines[-3:]
  assert sum(line.startswith("error: ") for line in lines) == 1, lines


def test_without_the_extra_a_tfds_run_says_how_to_install_it(tmp_path, capsys, monkeypatch):
  monkeypatch.setitem(sys.modules, "tensorflow_datasets", None)  # an import of it fails
  config = make_config("segmentation", "smoke", **{"data.source": "tfds", "data.tfds_name": "oxford_iiit_pet"})
  code, lines = run_like_the_cli("segmentation", config, str(tmp_path / "run"), capsys)
  assert code == 2 and lines[-1] == f"error: {tfds_sets.MISSING}", lines[-3:]
  assert "pip install -r requirements-tfds.txt" in tfds_sets.MISSING


@contextlib.contextmanager
def fresh_flags():
  """The flags a command line defines, removed after it, so that another runs in this interpreter."""
  before = set(flags.FLAGS)
  try:
    yield
  finally:
    for name in set(flags.FLAGS) - before:
      delattr(flags.FLAGS, name)


def run_module(module, args):
  """(exit code, stderr lines) of `python -m module args...` run in this interpreter (runpy). The
  module's process.start() installs the signal handlers for good, as a command does: they are taken
  down after it, or a later test's own SIGTERM would be recorded and never forgotten (every training
  after it would stop "before training started")."""
  try:
    with fresh_flags(), contextlib.redirect_stderr(captured := _Lines()), pytest.raises(SystemExit) as exit_info:
      runpy.run_module(module, run_name="__main__", alter_sys=True)
  finally:
    signals.uninstall()
  return exit_info.value.code, captured.lines()


class _Lines(list):
  def write(self, text):
    self.append(text)

  def flush(self):
    pass

  def lines(self):
    return "".join(self).strip().splitlines()


@pytest.mark.parametrize("trainer", TRAINERS)
def test_inside_mock_data_a_command_line_says_a_run_needs_a_prepared_data_set(trainer, tmp_path, monkeypatch):
  """tfds.testing.mock_data's examples come from a Python generator: no checkpoint can hold their
  position, so a run under it stops at once, one line saying so, rather than fail at its first save."""
  tfds = pytest.importorskip("tensorflow_datasets", reason="the tfds extra is not installed")
  config_file, module, name, own = TRAINERS[trainer]
  monkeypatch.setattr(sys, "argv", [module, f"--config=configs/{config_file}.py:smoke",
                                    f"--workdir={tmp_path / 'run'}",
                                    *flags_of({"data.source": "tfds", "data.tfds_name": name, **own})])
  monkeypatch.chdir(REPO_ROOT)
  monkeypatch.delitem(sys.modules, module, raising=False)  # run as __main__ afresh, as `python -m` does
  with tfds.testing.mock_data(num_examples=4):
    code, lines = run_module(module, sys.argv[1:])
  assert code == 2 and lines[-1].startswith("error: data.source='tfds' cannot train inside "
                                            "tfds.testing.mock_data"), lines[-3:]
  assert not os.path.exists(tmp_path / "run" / "checkpoints")


def take(iterator, count):
  return [tf.nest.map_structure(lambda tensor: tensor.numpy(), next(iterator)) for _ in range(count)]


@pytest.mark.parametrize("trainer", TRAINERS)
def test_the_input_position_saved_in_a_checkpoint_gives_the_same_batches_after_a_restore(
    trainer, tfds_data_dir, tmp_path):
  """What a resume rests on, for each trainer's pipeline of a TFDS split: its iterator, saved after a
  few batches and restored into a new pipeline, goes on with the batches the first went on with."""
  config = make_config(TRAINERS[trainer][0], "smoke", **tfds_overrides(trainer, tfds_data_dir))
  task_lib = importlib.import_module(TRAINERS[trainer][1].replace(".train", ".task"))
  iterator = iter(task_lib.make_task(config, str(tmp_path / "run")).train_dataset)
  first = take(iterator, 2)
  saved = tf.train.Checkpoint(iterator=iterator).write(str(tmp_path / "position" / "ckpt"))
  expected = take(iterator, 3)
  restored = iter(task_lib.make_task(config, str(tmp_path / "run")).train_dataset)
  tf.train.Checkpoint(iterator=restored).read(saved).assert_consumed()
  for batch, again in zip(expected, take(restored, 3)):
    tf.nest.map_structure(np.testing.assert_array_equal, batch, again)
  # The stream moves on: the batches after the save are not the first ones again.
  assert any(not np.array_equal(a[0], b[0]) for a, b in zip(first, expected))


def test_lfw_people_are_held_out_by_name_and_the_pairs_drawn_from_the_seed_over_them(tfds_data_dir, tmp_path):
  import tfds_data  # pylint: disable=import-outside-toplevel
  from triplet import data as data_lib  # pylint: disable=import-outside-toplevel
  from triplet import lfw_pairs  # pylint: disable=import-outside-toplevel
  from triplet import tfds_identities  # pylint: disable=import-outside-toplevel
  written = {}
  for seed in (0, 1):
    config = make_config("triplet", "smoke", seed=seed, **tfds_overrides("triplet", tfds_data_dir))
    written[seed] = tfds_identities.prepare(data_lib.read_settings(config.data).source, seed, str(tmp_path))
  train, held_out = (sorted(os.listdir(getattr(written[0], folder))) for folder in ("train_dir", "eval_dir"))
  assert sorted(train + held_out) == sorted(tfds_data.LFW_PEOPLE) and len(held_out) == 3
  assert sorted(os.listdir(written[1].eval_dir)) == held_out  # by name, whatever the seed
  pairs = {seed: lfw_pairs.read_pairs(w.pairs_path, w.eval_dir)[0] for seed, w in written.items()}
  assert {os.path.basename(os.path.dirname(path)) for pair in pairs[0] for path in pair[:2]} <= set(held_out)
  assert pairs[0] != pairs[1]  # drawn from the seed


def command(trainer, data_dir, workdir, cache_dir, **overrides):
  """The command line of a short deterministic run on the trainer's prepared data set."""
  config_file, module, _, _ = TRAINERS[trainer]
  steps = {"deterministic": True, "train.num_steps": 4, "train.log_every": 1, "summaries.scalars_every": 1,
           "summaries.images_every": 4, "train.eval_every": 4, "train.checkpoint_every": 4}
  if trainer == "inception_v4":  # the recipe's first phase, the head alone on a TF-Slim checkpoint
    steps.update({"finetune.head_steps": 4, "data.image_size": 75, "data.eval_batch_size": 8})
  if trainer == "triplet":
    steps.update({"data.cache_dir": str(cache_dir), "summaries.histograms_every": 4})
  return ["-m", module, f"--config=configs/{config_file}.py:smoke", f"--workdir={workdir}",
          *flags_of(tfds_overrides(trainer, data_dir, **steps, **overrides))]


def run(args, stop_after_step=None):
  """(exit code, stderr) of `python args`; SIGTERM once it logs step `stop_after_step`."""
  process = subprocess.Popen([sys.executable, *args], cwd=REPO_ROOT, stderr=subprocess.PIPE, text=True,
                             env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
  lines = []
  for line in process.stderr:
    lines.append(line)
    if stop_after_step and re.search(rf"step {stop_after_step}/", line):
      process.send_signal(signal.SIGTERM)
      stop_after_step = None
  return process.wait(timeout=600), "".join(lines)


@pytest.mark.slow
@pytest.mark.parametrize("trainer", TRAINERS)
def test_a_run_resumed_after_sigterm_ends_as_a_straight_run_and_a_changed_split_is_refused(
    trainer, tfds_data_dir, tmp_path):
  """The trainer's command line on its data set: 4 steps stopped by SIGTERM after step 2 (at the end
  of its compiled call) and run again, refused in between with another training split (its input
  position is another's; Inception V4 skips this run, its fingerprint being the others'); then the
  evaluation command on the run. Each ends with a straight run's weights, bit for bit (Inception V4's
  head draws its dropout masks from a random state the checkpoints hold)."""
  def run_of(workdir, **overrides):
    return command(trainer, tfds_data_dir, workdir, tmp_path / "cache", **overrides)

  interrupted, straight = tmp_path / "interrupted", tmp_path / "straight"
  code, log = run(run_of(interrupted), stop_after_step=2)
  assert code == 128 + signal.SIGTERM, log[-3000:]
  stopped_at = tf.train.latest_checkpoint(interrupted / "checkpoints")
  assert 2 <= int(checkpoint_values(stopped_at)["step/.ATTRIBUTES/VARIABLE_VALUE"]) < 4
  if trainer != "inception_v4":  # one fingerprint for all three (common/data/tfds_sets.py)
    code, log = run(run_of(interrupted, **{"data.tfds_train_split": "train[:90%]"}))
    assert code == 2 and "was written with another input pipeline (train" in log.strip().splitlines()[-1], log[-3000:]
  code, log = run(run_of(interrupted))
  assert code == 0 and f"resuming from {stopped_at}" in log, log[-3000:]
  actual = checkpoint_values(tf.train.latest_checkpoint(interrupted / "checkpoints"))
  assert int(actual["step/.ATTRIBUTES/VARIABLE_VALUE"]) == 4
  assert os.path.isfile(interrupted / "metrics.json") and os.path.isdir(interrupted / "saved_model")
  # The evaluation command reads the run's config.json: the data set's evaluation split again.
  code, log = run(["-m", TRAINERS[trainer][1].replace(".train", ".evaluate"), f"--workdir={interrupted}"])
  assert code == 0 and "Traceback" not in log, log[-3000:]
  code, log = run(run_of(straight))
  assert code == 0, log[-3000:]
  expected = checkpoint_values(tf.train.latest_checkpoint(straight / "checkpoints"))
  assert expected.keys() == actual.keys()
  for name, value in expected.items():
    np.testing.assert_array_equal(value, actual[name], err_msg=name)
