"""TF-Slim checkpoints: round trip under slim names, exclusions, scopes, bad checkpoints."""
import os
import re
import shutil

import keras
import numpy as np
import pytest
import tensorflow as tf

from common.contract.errors import CheckpointError
from inception_finetune import inception_v4 as iv
from inception_finetune import slim_checkpoint

# The smallest input with the aux head, so that every head is exercised quickly.
SIZE = 107
HEAD_SCOPES = ("InceptionV4/Logits", "InceptionV4/AuxLogits")


def build(seed, **kwargs):
  keras.utils.set_random_seed(seed)
  kwargs.setdefault("input_shape", (SIZE, SIZE, 3))
  return iv.inception_v4(**kwargs)


def perturb_batch_norm(model, rng):
  """Random beta and moving statistics, so that a restore that skips them shows."""
  for name, variable in slim_checkpoint.slim_variables(model).items():
    if name.endswith("/beta") or name.endswith("/moving_mean"):
      variable.assign(rng.normal(0.0, 0.1, variable.shape).astype(np.float32))
    elif name.endswith("/moving_variance"):
      variable.assign(rng.uniform(0.5, 1.5, variable.shape).astype(np.float32))


def values_by_name(model):
  return {name: v.numpy() for name, v in slim_checkpoint.slim_variables(model).items()}


@pytest.fixture(scope="module")
def source(module_tmp):
  """A randomly initialized 1001-class model with its slim-named checkpoint."""
  model = build(seed=1)
  perturb_batch_norm(model, np.random.default_rng(1))
  directory = module_tmp("slim")
  path = slim_checkpoint.write_slim_checkpoint(model, str(directory / "model.ckpt-7"), 7)
  return model, path


def test_written_checkpoint_has_exact_slim_names(source):
  model, path = source
  reader = tf.train.load_checkpoint(path)
  shapes = reader.get_variable_to_shape_map()
  assert set(shapes) == set(slim_checkpoint.slim_variables(model)) | {"global_step"}
  assert reader.get_tensor("global_step") == 7
  assert reader.get_variable_to_dtype_map()["global_step"] == tf.int64


def test_restore_reproduces_outputs_exactly(source):
  model, path = source
  restored = build(seed=2)
  directory = path.rsplit("/", 1)[0]
  report = slim_checkpoint.restore(restored, directory)  # a directory means its latest checkpoint
  assert report.checkpoint == path
  assert len(report.loaded) == len(model.weights) == 608
  assert report.excluded == report.missing == report.mismatched == report.unexpected == []
  images = np.random.default_rng(0).uniform(-1, 1, (2, SIZE, SIZE, 3)).astype(np.float32)
  for expected, actual in zip(model(images, training=False), restored(images, training=False)):
    np.testing.assert_array_equal(actual.numpy(), expected.numpy())


def test_excluded_heads_keep_their_fresh_initialization(source):
  model, path = source
  new = build(seed=3, num_classes=120, hidden_units=512, logits_stddev=0.01)
  before = values_by_name(new)
  report = slim_checkpoint.restore(new, path, exclude_scopes="InceptionV4/Logits, InceptionV4/AuxLogits")
  after = values_by_name(new)
  source_values = values_by_name(model)
  heads = sorted(name for name in after if name.startswith(HEAD_SCOPES))
  assert report.excluded == heads
  assert "InceptionV4/Logits/Hidden/weights" in heads
  assert report.missing == report.unexpected == []  # the checkpoint's heads are excluded, not unexpected
  for name, value in after.items():
    expected = before[name] if name in heads else source_values[name]
    np.testing.assert_array_equal(value, expected, err_msg=name)
  summary = report.format()
  assert summary.splitlines()[0].endswith(
      f"loaded {len(after) - len(heads)}, excluded {len(heads)}, missing 0, mismatched 0, unexpected 0")
  assert "  excluded: InceptionV4/AuxLogits/Aux_logits/weights" in summary.splitlines()


def test_checkpoint_heads_absent_from_model_are_unexpected(source):
  _, path = source
  base = build(seed=4, include_top=False)
  report = slim_checkpoint.restore(base, path)
  assert report.unexpected == sorted(
      name for name in tf.train.load_checkpoint(path).get_variable_to_shape_map()
      if name.startswith(HEAD_SCOPES))
  assert "InceptionV4/Logits/Logits/weights" in report.format()


def test_missing_and_mismatched_variables(tmp_path):
  base = build(seed=5, input_shape=(75, 75, 3), include_top=False)
  kernel = base.get_layer("Conv2d_1a_3x3").kernel
  partial = slim_checkpoint.write_checkpoint(str(tmp_path / "partial.ckpt"), {
      "InceptionV4/Conv2d_1a_3x3/weights": np.ones((3, 3, 3, 32), np.float32),
      "InceptionV4/Conv2d_2a_3x3/weights": np.ones((3, 3, 32, 16), np.float32),
  })
  with pytest.raises(CheckpointError, match=r"has no variable InceptionV4/Conv2d_1a_3x3/BatchNorm/beta \(nor \d+ other"):
    slim_checkpoint.restore(base, partial)
  everything_but_kernels = [iv.SCOPE + "/" + name for name in iv.BLOCK_NAMES[2:]] + [
      "InceptionV4/Conv2d_1a_3x3/BatchNorm", "InceptionV4/Conv2d_2a_3x3/BatchNorm"]
  with pytest.raises(CheckpointError, match=r"InceptionV4/Conv2d_2a_3x3/weights has shape \[3, 3, 32, 16\], "
                                            r"the model expects \[3, 3, 32, 32\]$"):
    slim_checkpoint.restore(base, partial, exclude_scopes=everything_but_kernels)
  assert not np.all(kernel.numpy() == 1.0)  # a failed restore assigns nothing

  report = slim_checkpoint.restore(base, partial, ignore_missing_vars=True)
  assert report.loaded == ["InceptionV4/Conv2d_1a_3x3/weights"]
  assert report.mismatched == ["InceptionV4/Conv2d_2a_3x3/weights"]
  assert len(report.missing) == len(base.weights) - 2
  assert np.all(kernel.numpy() == 1.0)


@pytest.mark.parametrize("kind", ["missing_file", "empty_directory", "other_network",
                                  "keras_checkpoint", "corrupt"])
def test_bad_checkpoints_are_one_line_errors(tmp_path, kind):
  path = str(tmp_path / "model.ckpt")
  if kind == "missing_file":
    expected = f"checkpoint {path} does not exist"
  elif kind == "empty_directory":
    path, expected = str(tmp_path), f"directory {tmp_path} holds no checkpoint"
  elif kind == "other_network":
    slim_checkpoint.write_checkpoint(path, {"resnet_v1_50/conv1/weights": np.zeros((7, 7, 3, 64), np.float32),
                                            "global_step": np.int64(0)})
    expected = "not a TF-Slim InceptionV4 checkpoint.*first variable: resnet_v1_50/conv1/weights"
  elif kind == "keras_checkpoint":
    tf.train.Checkpoint(model=keras.Sequential([keras.Input((2,)), keras.layers.Dense(3)])).write(path)
    expected = "not a TF-Slim InceptionV4 checkpoint"
  else:
    (tmp_path / "model.ckpt.index").write_bytes(b"not a checkpoint")
    expected = f"checkpoint {path} is unreadable"
  model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(3)])  # never reached
  with pytest.raises(CheckpointError, match=expected) as error:
    slim_checkpoint.restore(model, path)
  assert "\n" not in str(error.value)


@pytest.mark.parametrize("damage", ["flipped_byte", "vanished_data"])
def test_a_corrupt_checkpoint_is_one_line_naming_it_and_assigns_nothing(source, tmp_path, damage):
  _, original = source
  path = str(tmp_path / "inception_v4.ckpt")
  for suffix in (".index", ".data-00000-of-00001"):
    shutil.copy(original + suffix, path + suffix)
  data = path + ".data-00000-of-00001"
  if damage == "flipped_byte":
    with open(data, "r+b") as f:
      f.seek(os.path.getsize(data) // 2)
      byte = f.read(1)
      f.seek(-1, os.SEEK_CUR)
      f.write(bytes([byte[0] ^ 1]))
    reason = "Checksum does not match"
  else:
    os.remove(data)
    reason = "No such file or directory"
  model = build(seed=8)
  before = values_by_name(model)
  with pytest.raises(slim_checkpoint.CorruptCheckpointError) as error:
    slim_checkpoint.restore(model, path)  # as inception_finetune/train.py does
  message = str(error.value)
  assert re.fullmatch(
      rf"checkpoint {path} is corrupt or incomplete: InceptionV4/\S+ does not read back \(.*{reason}.*\); "
      rf"fetch it again \(`python scripts/fetch_slim_checkpoint.py --output_dir={tmp_path}` replaces a "
      r"broken one\) or copy it again", message), message
  assert "\n" not in message and "does not match this model" not in message  # not a mismatch
  after = values_by_name(model)
  assert all(np.array_equal(after[name], value) for name, value in before.items())  # nothing assigned


def test_trainable_scopes_freeze_other_layers_and_their_batch_norm():
  base = build(seed=6, input_shape=(75, 75, 3), include_top=False)
  scopes = "InceptionV4/Mixed_7d,InceptionV4/Conv2d_2"  # slim's prefix match: Conv2d_2a and 2b
  expected = sorted(slim_checkpoint.trainable_variables_for_scopes(base, scopes), key=id)
  assert expected and all(
      iv.slim_name(v).startswith(("InceptionV4/Mixed_7d/", "InceptionV4/Conv2d_2a_3x3/",
                                  "InceptionV4/Conv2d_2b_3x3/")) for v in expected)
  assert len(slim_checkpoint.trainable_variables_for_scopes(base, "")) == len(base.trainable_variables)

  trainable = slim_checkpoint.set_trainable_scopes(base, scopes)
  assert sorted(trainable, key=id) == expected
  frozen_mean = base.get_layer("Mixed_7c.Branch_0.Conv2d_0a_1x1.BatchNorm").moving_mean
  free_mean = base.get_layer("Mixed_7d.Branch_0.Conv2d_0a_1x1.BatchNorm").moving_mean
  frozen_before, free_before = frozen_mean.numpy(), free_mean.numpy()
  base(np.random.default_rng(0).uniform(-1, 1, (2, 75, 75, 3)).astype(np.float32), training=True)
  np.testing.assert_array_equal(frozen_mean.numpy(), frozen_before)  # inference mode
  assert not np.array_equal(free_mean.numpy(), free_before)

  assert len(slim_checkpoint.set_trainable_scopes(base, [])) == len(base.weights) - 2 * 149
