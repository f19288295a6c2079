"""A refused Inception run (the workdir locked, the input changed, a checkpoint of another model)
leaves every file of the workdir byte-identical: labels.txt and class_balance.csv are written with
config.json, once the run's checks pass."""
import json
import os

import pytest
import tensorflow as tf

from common.app import cli
from common.runtime import workdir as workdir_lib
from helpers import make_config
from inception_finetune import train

PREVIOUS_RUN = {  # what an earlier run on other classes left
    "labels.txt": "0:old_cat\n1:old_dog\n",
    "class_balance.csv": "id,name,train_images,under_min_count\r\n0,old_cat,9,0\r\n1,old_dog,9,0\r\n",
    "config.json": "{}\n",
}  # and no LOCK: a run removes it when it ends


def snapshot(root):
  """{path relative to root: bytes} of every file under root."""
  files = {}
  for directory, _, names in os.walk(root):
    for name in names:
      path = os.path.join(directory, name)
      with open(path, "rb") as f:
        files[os.path.relpath(path, root)] = f.read()
  return files


def save_checkpoint(workdir, **variables):
  checkpoint = tf.train.Checkpoint(**variables)
  tf.train.CheckpointManager(checkpoint, os.path.join(workdir, "checkpoints"), max_to_keep=1).save()


@pytest.mark.parametrize("refusal, named", [
    ("locked", "is in use by another run"),
    ("input changed", "train.batch_size: 99 -> 16"),
    ("another model", "does not match this model"),
])
def test_a_refused_inception_rerun_leaves_the_workdir_byte_identical(refusal, named, tmp_path, capsys):
  workdir = str(tmp_path / "run")
  os.makedirs(workdir)
  for name, text in PREVIOUS_RUN.items():
    with open(os.path.join(workdir, name), "w", newline="") as f:
      f.write(text)
  if refusal == "input changed":
    save_checkpoint(workdir, input_fingerprint=tf.Variable(json.dumps({"train.batch_size": 99})))
  if refusal == "another model":
    save_checkpoint(workdir, step=tf.Variable(3, dtype=tf.int64))
  # Three classes of synthetic images, cached outside the workdir.
  config = make_config("inception_v4", "smoke", **{"data.num_classes": 3,
                                                   "data.synthetic_images_per_class": 4,
                                                   "data.cache_dir": str(tmp_path / "cache")})
  before = snapshot(workdir)
  capsys.readouterr()
  with pytest.raises(SystemExit) as exit_info:
    if refusal == "locked":
      with workdir_lib.locked(workdir):  # released and removed at the end, as a finished run leaves it
        cli.run_guarded(train.train_and_evaluate, config, workdir)
    else:
      cli.run_guarded(train.train_and_evaluate, config, workdir)
  errors = capsys.readouterr().err.strip().splitlines()
  assert exit_info.value.code == 2 and len(errors) == 1 and named in errors[0], errors
  assert snapshot(workdir) == before
