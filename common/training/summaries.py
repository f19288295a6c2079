"""TensorBoard summaries under a budget.

The failure this guards against: 1,000-image summaries and histograms of every
variable on every step, until one event protobuf passed 2 GB. Here scalars,
images and histograms each have a cadence, images are capped at max_outputs,
histograms are opt-in, one summary estimated above max_summary_bytes is refused
with a warning, and the bytes on disk are counted. RunSummaries writes a training
run's: scalars on every worker, the rest on the chief alone.

Each evaluation can add a few images drawn from what it predicted
(common.training.evaluation.EvalSampler keeps them as the evaluation passes by),
and each run its resolved config as text and its hyperparameters for TensorBoard's
HParams plugin. An evaluation of embeddings can put them in TensorBoard's Projector
(write_embeddings).
"""
import io
import json
import math
import os
import re

from absl import logging
import numpy as np
from PIL import Image
import tensorflow as tf
from tensorboard.plugins import projector
from tensorboard.plugins.hparams import api as hp
from tensorboard.plugins.hparams import plugin_data_pb2 as hparams_plugin_data

from common.training import diagnostics
from common.training.actions import Action
from common.training import plots

# A histogram summary stores its buckets, not the tensor: 30 buckets of 3 doubles plus framing.
_HISTOGRAM_BYTES = 1024
_SCALAR_BYTES = 64

# The Projector's web page takes a square sprite of at most 8192 x 8192 pixels (one WebGL texture):
# thumbnails of THUMBNAIL_SIZE pixels bound the points that can show their images.
THUMBNAIL_SIZE = 48
MAX_PROJECTOR_POINTS = (8192 // THUMBNAIL_SIZE) ** 2
PROJECTOR_CHECKPOINT = "embeddings"
PROJECTOR_METADATA = "metadata.tsv"
# JPEG: a fifth of PNG's size for photos (2000 thumbnails of 48 px: 1.7 MB, PNG 8 MB).
PROJECTOR_SPRITE = "sprite.jpg"


class SummaryBudget:
  """Writes summaries for one run directory at the cadences of a `summaries` config section."""

  def __init__(self, logdir, cfg):
    self.logdir = logdir
    self.cfg = cfg
    self.refused = 0
    self._file_writer = None

  @property
  def _writer(self):
    # Created at the first summary: a run refused at its checks (changed input, another model)
    # leaves no event file behind.
    if self._file_writer is None:
      self._file_writer = tf.summary.create_file_writer(self.logdir)
    return self._file_writer

  def write_scalars(self, step, values):
    with self._writer.as_default(step=step):
      for name, value in values.items():
        tf.summary.scalar(name, float(value))

  def write_images(self, step, images):
    """images: {name: [N, H, W, C] uint8 or float in [0, 1]}; at most max_outputs of each are written,
    within the budget as the PNGs the event file stores (an upscaled patch compresses a hundredfold)."""
    with self._writer.as_default(step=step):
      for name, batch in images.items():
        batch = plots.to_uint8(batch[:self.cfg.max_outputs])
        if self._within_budget(name, sum(_png_bytes(image) for image in batch)):
          tf.summary.image(name, batch, max_outputs=self.cfg.max_outputs)

  def write_text(self, step, name, text):
    with self._writer.as_default(step=step):
      if self._within_budget(name, len(text.encode())):
        tf.summary.text(name, text)

  def write_config(self, step, config):
    """The resolved config as text (a Markdown code block, as config.json holds it)."""
    text = json.dumps(config.to_dict(), indent=2, sort_keys=True, default=str)
    self.write_text(step, "config", "\n".join("    " + line for line in text.splitlines()))

  def write_hparams(self, hparams, metric_names, group, trial_id, shown_first):
    """{name: value} as the HParams plugin's hyperparameters (in that order), metric_names (in that
    order), the scalars of the run directory `group` (its last values are the run's final metrics),
    as its metrics, and trial_id as the run's name there. Write into the run's root directory.

    The plugin shows five hyperparameter columns by default: those marked `differs` first, each
    lot by name. The hyperparameters named in shown_first are marked so."""
    config = hp.hparams_config_pb(hparams=[hp.HParam(name) for name in hparams],
                                  metrics=[hp.Metric(name, group=group) for name in metric_names])
    (value,) = config.value
    content = hparams_plugin_data.HParamsPluginData.FromString(value.metadata.plugin_data.content)
    for info in content.experiment.hparam_infos:
      info.differs = info.name in shown_first
    value.metadata.plugin_data.content = content.SerializeToString()
    with self._writer.as_default(step=0):
      tf.summary.experimental.write_raw_pb(config.SerializeToString(), step=0)
      hp.hparams(hparams, trial_id=trial_id)

  def write_histograms(self, step, tensors):
    with self._writer.as_default(step=step):
      for name, value in tensors.items():
        if self._within_budget(name, _HISTOGRAM_BYTES):
          tf.summary.histogram(name, value)

  def write_embeddings(self, step, vectors, metadata, thumbnails=None):
    """vectors [N, D] for TensorBoard's Projector, with metadata {column: N values} and optional
    uint8 thumbnails [N, S, S, 3] (S <= THUMBNAIL_SIZE, N <= MAX_PROJECTOR_POINTS): a checkpoint of
    one variable, metadata.tsv, sprite.jpg and projector_config.pbtxt in this run directory.

    The plugin reads projector_config.pbtxt from the run directory and, as the config names no
    checkpoint, the one that the directory's `checkpoint` file names (tf.train.latest_checkpoint):
    each call replaces the previous one's files, so only the newest evaluation's are kept. The
    tensor is named by its step, embeddings_step_<step>/.ATTRIBUTES/VARIABLE_VALUE (the name
    tf.train.Checkpoint gives the variable): the plugin caches the last tensor it served by run and
    name, and would go on serving the previous evaluation's points beside the new metadata.
    """
    os.makedirs(self.logdir, exist_ok=True)
    variable_name = f"{PROJECTOR_CHECKPOINT}_step_{step}"
    config = projector.ProjectorConfig()
    embedding = config.embeddings.add(tensor_name=f"{variable_name}/.ATTRIBUTES/VARIABLE_VALUE",
                                      metadata_path=PROJECTOR_METADATA)
    columns = list(metadata)
    # One column has no header line: the plugin takes a first line with a tab for the header.
    rows = [columns] if len(columns) > 1 else []
    rows += [[_tsv_field(metadata[column][i]) for column in columns] for i in range(len(vectors))]
    with open(os.path.join(self.logdir, PROJECTOR_METADATA), "w") as f:
      f.writelines("\t".join(row) + "\n" for row in rows)
    if thumbnails is not None:
      Image.fromarray(_sprite(thumbnails)).save(os.path.join(self.logdir, PROJECTOR_SPRITE), quality=90)
      embedding.sprite.image_path = PROJECTOR_SPRITE
      embedding.sprite.single_image_dim.extend([thumbnails.shape[2], thumbnails.shape[1]])
    checkpoint = tf.train.Checkpoint(**{variable_name: tf.Variable(np.asarray(vectors, np.float32),
                                                                   trainable=False)})
    tf.train.CheckpointManager(checkpoint, self.logdir, max_to_keep=1,
                               checkpoint_name=PROJECTOR_CHECKPOINT).save(checkpoint_number=step)
    projector.visualize_embeddings(self.logdir, config)

  def _within_budget(self, name, estimated_bytes):
    if estimated_bytes <= self.cfg.max_summary_bytes:
      return True
    self.refused += 1
    logging.warning("summary '%s' would take about %d bytes, over summaries.max_summary_bytes=%d; "
                    "not written", name, estimated_bytes, self.cfg.max_summary_bytes)
    return False

  def flush(self):
    if self._file_writer:
      self._file_writer.flush()

  def bytes_written(self):
    """Size of this run directory's event files on disk."""
    if not self._file_writer:
      return 0
    self.flush()
    return sum(entry.stat().st_size for entry in os.scandir(self.logdir)
               if entry.name.startswith("events.out.tfevents"))

  def close(self):
    if self._file_writer:
      self._file_writer.close()


def select_histogram_variables(variables, kernels, biases):
  """{name: variable} for the kernel and/or bias histograms the config asked for."""
  chosen = {}
  for variable in variables:
    leaf = variable.path.rsplit("/", 1)[-1]
    if (kernels and leaf in ("kernel", "depthwise_kernel", "embeddings")) or (biases and leaf == "bias"):
      chosen[variable.path] = variable
  return chosen


class RunSummaries:
  """The summaries of one training run, written into the cluster's `out`: train/ and eval/
  scalars on every worker; on the chief alone the heavy ones (images, histograms, activation
  statistics, embeddings) and the run's own event file in `out` itself, beside train/ and eval/,
  which says what the run is (the config as text, the HParams)."""

  def __init__(self, out, cfg, chief, model, image_summaries_fn):
    self._cfg = cfg
    self._chief = chief
    self._model = model
    self._image_summaries_fn = image_summaries_fn
    self.train = SummaryBudget(os.path.join(out, "train"), cfg)
    self._eval = SummaryBudget(os.path.join(out, "eval"), cfg)
    self._chance = {}  # {run: SummaryBudget} of the chance levels (chance_runs), under eval/
    self._run = SummaryBudget(out, cfg)
    self._probe = None
    self._activation_statistics = None

  def write_config(self, step, config):
    """The resolved config as text, on disk at once (even if the run is stopped before it closes
    the writer)."""
    if self._chief:
      self._run.write_config(step, config)
      self._run.flush()

  def write_hparams(self, config, metric_names, headline, command_line, workdir):
    """The HParams that tell runs apart (hparams_of: the preset, HPARAM_KEYS and the keys set on
    the command line; SHOWN_FIRST and those keys first in the columns shown by default) and the scalars
    of eval/, metric_names but the chance levels, as the run's final metrics, the headline ones
    first. The run is named by its workdir's folder (the table's first column shows about 15
    characters; the preset is a column): runs of one folder name would be one trial there."""
    if self._chief:
      chance = chance_runs(metric_names)
      names = [name for name in metric_names if name not in chance]
      first = [name for name in headline if name in names]
      self._run.write_hparams(hparams_of(config, command_line), first + sorted(set(names) - set(first)),
                              group="eval", trial_id=os.path.basename(os.path.abspath(workdir)),
                              shown_first=SHOWN_FIRST + tuple(command_line["keys"] if command_line else ()))

  def write_train_scalars(self, step, metrics, learning_rate, nonfinite_steps):
    """A step's metrics (but "finite"), the learning rate and the counts the run keeps."""
    scalars = {name: value for name, value in metrics.items() if name != "finite"}
    scalars["learning_rate"] = learning_rate
    scalars["nonfinite_steps"] = nonfinite_steps
    scalars["summary_bytes"] = float(self.train.bytes_written())
    self.train.write_scalars(step, scalars)

  def heavy_actions(self, eval_every, run_end):
    """The actions (common.training.actions) that write the heavy summaries of training batches
    that are on, on the chief alone, each at its cadence and never in the step: images (also at
    each evaluation, `eval_every`, and at the run's end, so that every run has some), activation
    statistics, histograms. Every worker gets the same actions (chief_only): calls end alike on all of them."""
    cfg = self._cfg
    actions = []
    if self._image_summaries_fn and cfg.max_outputs > 0:
      actions.append(Action(self._write_images, every=(cfg.images_every, eval_every), at=(run_end,),
                            chief_only=True))
    if cfg.activation_stats:
      actions.append(Action(self._write_activation_statistics, every=(cfg.scalars_every,), chief_only=True))
    if cfg.histograms or cfg.bias_histograms or cfg.activation_histograms:
      actions.append(Action(self._write_histograms, every=(cfg.histograms_every,), chief_only=True))
    return actions

  def _write_images(self, call):
    images = self._image_summaries_fn(self._model, call.batch, self._cfg.max_outputs)
    self.train.write_images(call.step, images)

  def _write_activation_statistics(self, call):
    stats = self._statistics_fn()(call.batch[0])
    self.train.write_scalars(call.step, {f"activations/{name}/{kind}": value
                                         for name, (mean, var) in stats.items()
                                         for kind, value in (("mean", mean), ("variance", var))})

  def _write_histograms(self, call):
    cfg = self._cfg
    tensors = select_histogram_variables(self._model.variables, cfg.histograms, cfg.bias_histograms)
    if cfg.activation_histograms:
      outputs = self._probe_fn()(call.batch[0], training=False)
      tensors.update({f"activations/{name}": value for name, value in outputs.items()})
    self.train.write_histograms(call.step, tensors)

  def _probe_fn(self):
    if self._probe is None:
      self._probe = diagnostics.activation_model(self._model)
    return self._probe

  def _statistics_fn(self):
    if self._activation_statistics is None:
      self._activation_statistics = diagnostics.make_activation_statistics(self._probe_fn())
    return self._activation_statistics

  def write_eval(self, step, figures, evaluation):
    """An evaluation's metrics (`figures`), each chance level in its run (chance_runs), and on the
    chief its images and embeddings."""
    chance = chance_runs(figures)
    self._eval.write_scalars(step, {name: value for name, value in figures.items() if name not in chance})
    for name, (run, metric) in chance.items():
      if run not in self._chance:
        self._chance[run] = SummaryBudget(os.path.join(self._eval.logdir, run), self._cfg)
      self._chance[run].write_scalars(step, {metric: figures[name]})
    if self._chief:
      if evaluation.summary_images:
        self._eval.write_images(step, evaluation.summary_images())
      if evaluation.embeddings:
        self._eval.write_embeddings(step, *evaluation.embeddings())
    for budget in (self._eval, *self._chance.values()):
      budget.flush()

  def bytes_written(self):
    """The size of the event files of train/ and eval/ (with its chance levels)."""
    return sum(budget.bytes_written() for budget in (self.train, self._eval, *self._chance.values()))

  def refused(self):
    """How many summaries of train/ and eval/ were over summaries.max_summary_bytes."""
    return self.train.refused + self._eval.refused

  def close(self):
    for budget in (self._run, self.train, self._eval, *self._chance.values()):
      budget.close()


def _tsv_field(value):
  """A metadata value on one line of one column (a file name may hold a tab or a line break)."""
  return re.sub(r"[\t\r\n]", " ", str(value))


def _sprite(thumbnails):
  """uint8 [N, S, S, C] -> one square image of ceil(sqrt(N)) x ceil(sqrt(N)) cells, row by row from
  the top left, as the Projector reads it (black cells after the last)."""
  count, height, width, channels = thumbnails.shape
  side = math.ceil(math.sqrt(count))
  cells = np.zeros([side * side, height, width, channels], np.uint8)
  cells[:count] = thumbnails
  return cells.reshape(side, side, height, width, channels).swapaxes(1, 2).reshape(
      side * height, side * width, channels)


# The config keys a person varies between runs (those the trainer's config has; TensorBoard 2.21
# orders the columns by name); the others (paths, cadences, data checks) stay in the config text.
HPARAM_KEYS = ("optimizer.name", "optimizer.learning_rate", "optimizer.schedule", "optimizer.warmup_steps",
               "optimizer.decay_steps", "optimizer.decay_rate", "train.batch_size", "train.num_steps",
               "finetune.head_steps", "finetune.unfreeze_last_blocks", "model.widths",
               "model.embedding_size", "model.hidden_units", "loss.name", "mixed_precision")


# The HParams table shows five hyperparameter columns by default, those marked as differing first:
# these and the keys set on the command line (the plugin takes the marks from one run, which
# cannot know the others').
SHOWN_FIRST = ("preset", "optimizer.name", "optimizer.learning_rate", "train.batch_size", "train.num_steps")


def hparams_of(config, command_line):
  """{name: value} of a run's HParams: "preset", then HPARAM_KEYS, then the other keys set on the
  command line (--config.key=value), named as in the config (sequences as strings).

  command_line: {"preset": name, "keys": [dotted keys]}, what the trainer's command line chose;
  None for a run without one (a test's, the benchmark's)."""
  values = _flat_values(config.to_dict())
  chosen = {"preset": command_line["preset"]} if command_line else {}
  for key in HPARAM_KEYS + tuple(command_line["keys"] if command_line else ()):
    if key in values:
      chosen[key] = values[key]
  return chosen


def chance_runs(metric_names):
  """{name: (run, metric)} of the chance levels among an evaluation's metric names: chance_<metric>
  in run "chance", chance_<metric>_<kind> in run "chance_<kind>" (the longest metric named so).
  TensorBoard draws a tag's runs on one chart: a chance level written under its metric's tag in a
  run of its own (under eval/) is a line on the metric's chart, not a flat chart of its own."""
  found = {}
  for name in metric_names:
    metrics = [m for m in metric_names if name == f"chance_{m}" or name.startswith(f"chance_{m}_")]
    if metrics:
      metric = max(metrics, key=len)
      found[name] = ("chance" + name[len(f"chance_{metric}"):], metric)
  return found


def _flat_values(tree, prefix=""):
  """{dotted key: value} of a nested dict's bool, int, float and str leaves; sequences as strings."""
  values = {}
  for key, value in tree.items():
    name = f"{prefix}{key}"
    if isinstance(value, dict):
      values.update(_flat_values(value, name + "."))
    elif isinstance(value, (bool, int, float, str)):
      values[name] = value
    elif isinstance(value, (list, tuple)):
      values[name] = str(tuple(value))
  return values


def _png_bytes(image):
  """The size of a uint8 [H, W, C] image as a PNG."""
  buffer = io.BytesIO()
  Image.fromarray(image[..., 0] if image.shape[-1] == 1 else image).save(buffer, "PNG")
  return buffer.tell()
