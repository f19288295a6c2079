"""Segmentation losses against NumPy references on tiny inputs: OHEM's kept pixels enumerated,
Dice class by class, and Lovász-softmax by the definition of the Lovász extension (the Jaccard
loss of each prefix of the sorted errors, built as sets) and by its integral over thresholds.
"""
import json
import textwrap

import numpy as np
import pytest
import tensorflow as tf

from common.contract.errors import ConfigError
from helpers import make_config
from helpers import run_python
from segmentation import losses
from segmentation import task

IGNORE = 255
NUM_CLASSES = 4
CLASS_WEIGHTS = (0.5, 1.0, 2.0, 1.5)


def tiny_batch(seed, shape=(2, 3, 4)):
  """Labels, about a fifth ignored, and logits; the last class is in no label (an absent class,
  which the class terms leave out) but has logits."""
  rng = np.random.default_rng(seed)
  labels = rng.integers(0, NUM_CLASSES - 1, size=shape)
  labels[rng.random(shape) < 0.2] = IGNORE
  logits = rng.normal(scale=2.0, size=shape + (NUM_CLASSES,)).astype(np.float32)
  return labels.astype(np.int32), logits


def valid_pixels(labels, logits):
  """-> (labels, softmax probabilities [n, classes]) of the valid pixels, in float64."""
  valid = labels.reshape(-1) != IGNORE
  logits = logits.reshape(-1, logits.shape[-1]).astype(np.float64)[valid]
  exp = np.exp(logits - logits.max(axis=1, keepdims=True))
  return labels.reshape(-1)[valid], exp / exp.sum(axis=1, keepdims=True)


def class_mean(per_class, class_weights):
  """The mean over the present classes, {class: loss}, weighted by class_weights (None: all 1)."""
  weights = {c: 1.0 if class_weights is None else class_weights[c] for c in per_class}
  return sum(weights[c] * per_class[c] for c in per_class) / sum(weights.values())


def reference_ohem(labels, logits, threshold, min_kept, class_weights=None):
  truth, probabilities = valid_pixels(labels, logits)
  true_probability = probabilities[np.arange(len(truth)), truth]
  hardest_first = sorted(range(len(truth)), key=lambda i: true_probability[i])
  kept = {i for i in range(len(truth)) if true_probability[i] < threshold}
  kept |= set(hardest_first[:min_kept * labels.shape[0]])
  weights = {i: 1.0 if class_weights is None else class_weights[truth[i]] for i in kept}
  return sum(-np.log(true_probability[i]) * weights[i] for i in kept) / sum(weights.values())


def reference_dice(labels, logits, class_weights=None):
  truth, probabilities = valid_pixels(labels, logits)
  per_class = {}
  for c in sorted(set(truth)):
    p, y = probabilities[:, c], (truth == c).astype(np.float64)
    per_class[c] = 1.0 - 2.0 * np.sum(p * y) / (np.sum(p) + np.sum(y))
  return class_mean(per_class, class_weights)


def jaccard_loss(mispredicted, foreground):
  """Berman et al.'s set function: |M| / |foreground u M|, M the set of mispredicted pixels."""
  union = foreground | mispredicted
  return len(mispredicted) / len(union) if union else 0.0


def lovasz_by_prefixes(errors, foreground):
  """sum_i e_(i) (J(S_i) - J(S_(i-1))), S_i the pixels of the i largest errors."""
  order = sorted(range(len(errors)), key=lambda i: -errors[i])
  total, previous = 0.0, 0.0
  for i in range(1, len(order) + 1):
    value = jaccard_loss(set(order[:i]), foreground)
    total += errors[order[i - 1]] * (value - previous)
    previous = value
  return total


def lovasz_by_thresholds(errors, foreground):
  """The integral over t in [0, 1] of J({i: e_i > t}): constant between two consecutive errors."""
  levels = sorted(set(errors) | {0.0}, reverse=True)
  return sum((high - low) * jaccard_loss({i for i, e in enumerate(errors) if e >= high}, foreground)
             for high, low in zip(levels, levels[1:]))


def reference_lovasz(labels, logits, extension, class_weights=None):
  truth, probabilities = valid_pixels(labels, logits)
  per_class = {}
  for c in sorted(set(truth)):
    foreground = set(np.flatnonzero(truth == c))
    errors = np.abs((truth == c) - probabilities[:, c])
    per_class[c] = extension(list(errors), foreground)
  return class_mean(per_class, class_weights)


def call(loss_fn, labels, logits, **kwargs):
  return float(loss_fn(tf.constant(labels), tf.constant(logits), IGNORE, **kwargs))


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("threshold,min_kept", [(0.7, 0), (0.0, 3), (0.3, 5), (0.7, 100), (1.0, 0)])
@pytest.mark.parametrize("class_weights", [None, CLASS_WEIGHTS])
def test_ohem_is_the_mean_cross_entropy_of_the_kept_pixels(seed, threshold, min_kept, class_weights):
  labels, logits = tiny_batch(seed)
  expected = reference_ohem(labels, logits, threshold, min_kept, class_weights)
  got = call(losses.ohem_cross_entropy, labels, logits, threshold=threshold, min_kept=min_kept,
             class_weights=class_weights)
  assert got == pytest.approx(expected, rel=1e-5)


def test_ohem_keeps_every_pixel_tied_with_the_last_kept():
  labels, _ = tiny_batch(0)
  logits = np.zeros(labels.shape + (NUM_CLASSES,), np.float32)  # every probability 1/4
  got = call(losses.ohem_cross_entropy, labels, logits, threshold=0.1, min_kept=1)
  assert got == pytest.approx(np.log(NUM_CLASSES), rel=1e-6)


def test_ohem_keeping_everything_is_the_cross_entropy():
  labels, logits = tiny_batch(1)
  everything = call(losses.ohem_cross_entropy, labels, logits, threshold=0.0, min_kept=labels[0].size)
  assert everything == pytest.approx(call(losses.pixel_cross_entropy, labels, logits), rel=1e-6)


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("class_weights", [None, CLASS_WEIGHTS])
def test_dice_against_numpy(seed, class_weights):
  labels, logits = tiny_batch(seed)
  expected = reference_dice(labels, logits, class_weights)
  assert call(losses.dice_loss, labels, logits, class_weights=class_weights) == pytest.approx(expected, rel=1e-5)


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("class_weights", [None, CLASS_WEIGHTS])
def test_lovasz_against_the_lovasz_extension_brute_force(seed, class_weights):
  labels, logits = tiny_batch(seed, shape=(2, 3, 3))
  by_prefixes = reference_lovasz(labels, logits, lovasz_by_prefixes, class_weights)
  by_thresholds = reference_lovasz(labels, logits, lovasz_by_thresholds, class_weights)
  assert by_prefixes == pytest.approx(by_thresholds, rel=1e-9)  # two definitions, one value
  got = call(losses.lovasz_softmax, labels, logits, class_weights=class_weights)
  assert got == pytest.approx(by_prefixes, rel=1e-5)


@pytest.mark.parametrize("seed", range(3))
def test_one_hot_predictions_give_one_minus_iou_and_one_minus_f1(seed):
  """At the vertices the Lovász extension is the Jaccard loss itself, and soft Dice is hard Dice."""
  labels, _ = tiny_batch(seed)
  rng = np.random.default_rng(seed + 10)
  guesses = rng.integers(0, NUM_CLASSES, labels.shape)
  predicted = np.where((rng.random(labels.shape) < 0.6) & (labels != IGNORE), labels, guesses)
  logits = (60.0 * np.eye(NUM_CLASSES)[predicted]).astype(np.float32)
  valid = labels != IGNORE
  iou, f1 = {}, {}
  for c in sorted(set(labels[valid])):
    truth, guess = set(np.flatnonzero((labels == c) & valid)), set(np.flatnonzero((predicted == c) & valid))
    iou[c] = len(truth & guess) / len(truth | guess)
    f1[c] = 2 * len(truth & guess) / (len(truth) + len(guess))
  assert call(losses.lovasz_softmax, labels, logits) == pytest.approx(1 - np.mean(list(iou.values())), abs=1e-6)
  assert call(losses.dice_loss, labels, logits) == pytest.approx(1 - np.mean(list(f1.values())), abs=1e-6)


LOSSES = {
    "cross_entropy": losses.pixel_cross_entropy,
    "ohem": lambda labels, logits, ignore: losses.ohem_cross_entropy(labels, logits, ignore, 0.7, 2),
    "dice": losses.dice_loss,
    "lovasz": losses.lovasz_softmax,
}


@pytest.mark.parametrize("name", LOSSES)
def test_ignored_pixels_count_for_nothing(name):
  labels, logits = tiny_batch(2)
  other = logits.copy()
  other[labels == IGNORE] = np.random.default_rng(0).normal(scale=5.0, size=other[labels == IGNORE].shape)
  assert call(LOSSES[name], labels, other) == call(LOSSES[name], labels, logits)
  all_ignored = np.full_like(labels, IGNORE)
  logits = tf.Variable(logits)
  with tf.GradientTape() as tape:
    loss = LOSSES[name](tf.constant(all_ignored), logits, IGNORE)
  assert float(loss) == 0.0
  assert np.all(np.isfinite(tape.gradient(loss, logits).numpy()))


@pytest.mark.parametrize("name", LOSSES)
def test_float16_logits_and_xla_give_the_float32_value(name):
  labels, logits = tiny_batch(3)
  logits = logits.astype(np.float16)
  eager = LOSSES[name](tf.constant(labels), tf.constant(logits.astype(np.float32)), IGNORE)
  half = LOSSES[name](tf.constant(labels), tf.constant(logits), IGNORE)
  compiled = tf.function(lambda l, x: LOSSES[name](l, x, IGNORE), jit_compile=True)(
      tf.constant(labels), tf.constant(logits))
  assert half.dtype == compiled.dtype == tf.float32
  assert float(half) == pytest.approx(float(eager), rel=1e-6)
  assert float(compiled) == pytest.approx(float(eager), rel=1e-5)


@pytest.mark.parametrize("name", LOSSES)
def test_gradient_descent_on_the_logits_fits_the_labels(name):
  labels, logits = tiny_batch(4)
  logits = tf.Variable(logits)
  optimizer = tf.keras.optimizers.Adam(learning_rate=0.1)
  first = None
  for _ in range(100):
    with tf.GradientTape() as tape:
      loss = LOSSES[name](tf.constant(labels), logits, IGNORE)
    first = float(loss) if first is None else first
    optimizer.apply_gradients([(tape.gradient(loss, logits), logits)])
  valid = labels != IGNORE
  assert float(loss) < 0.5 * first
  assert np.all(np.argmax(logits.numpy(), axis=-1)[valid] == labels[valid])


def test_ohem_that_keeps_no_pixel_is_one_line_naming_both_keys():
  config = make_config("segmentation", "smoke", **{"loss.ohem": True, "loss.ohem_threshold": 0.0,
                                                   "loss.ohem_min_kept": 0})
  with pytest.raises(ConfigError, match=r"^loss\.ohem_threshold=0 and loss\.ohem_min_kept=0 keep no pixel[^\n]*$"):
    task.validate_config(config)


# Logical devices must be configured before TensorFlow initializes, hence a fresh process.
TWO_REPLICAS = textwrap.dedent("""
    import json
    import os
    import sys
    import tensorflow as tf
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
    import keras
    from common.training import train_loop
    from segmentation import task as task_lib
    from tests.helpers import make_config, read_scalars

    workdir = sys.argv[1]
    config = make_config("segmentation", "smoke", **json.loads(sys.argv[2]))
    keras.mixed_precision.set_global_policy("mixed_float16")
    keras.utils.set_random_seed(config.seed)
    task = task_lib.make_task(config, workdir)
    strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    with strategy.scope():
      model = task.build_model()
      phases = task.make_phases(model, True)
    metrics = train_loop.train(config, workdir, strategy=strategy, model=model, phases=phases, task=task)
    train = os.path.join(workdir, "train")
    print("RESULT", json.dumps({tag: list(read_scalars(train, tag).values())
                                for tag in ("loss", "loss_cross_entropy", "loss_dice", "loss_lovasz")}))
""")


def test_every_term_trains_on_two_replicas_in_float16(tmp_path):
  """The terms inside the compiled step as a run uses them: two replicas, float16 logits (XLA on
  two logical CPUs fails in the loop whatever the loss: a replica's BatchNorm variable read from the
  other device)."""
  overrides = {"loss.ohem": True, "loss.dice_weight": 0.5, "loss.lovasz_weight": 0.5, "train.num_steps": 3,
               "train.log_every": 1, "summaries.scalars_every": 1, "train.eval_every": 3,
               "train.checkpoint_every": 3, "mixed_precision": True}
  result = run_python(["-c", TWO_REPLICAS, str(tmp_path), json.dumps(overrides)], timeout=600)
  lines = [line for line in result.stdout.splitlines() if line.startswith("RESULT ")]
  assert lines, result.stderr[-3000:]
  scalars = json.loads(lines[0][len("RESULT "):])
  assert all(len(values) == 3 and np.all(np.isfinite(values)) for values in scalars.values()), scalars
  terms = np.array(scalars["loss_cross_entropy"]) + 0.5 * np.array(scalars["loss_dice"]) + 0.5 * np.array(
      scalars["loss_lovasz"])
  np.testing.assert_allclose(scalars["loss"], terms, rtol=1e-5)
