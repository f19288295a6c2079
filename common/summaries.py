"""TensorBoard summaries under a budget.

The failure this guards against: 1,000-image summaries and histograms of every
variable on every step, until one event protobuf passed 2 GB. Here scalars,
images and histograms each have a cadence, images are capped at max_outputs,
histograms are opt-in, one summary estimated above max_summary_bytes is refused
with a warning, and the bytes on disk are counted.
"""
import os

from absl import logging
import numpy as np
import tensorflow as tf

# A histogram summary stores its buckets, not the tensor: 30 buckets of 3 doubles plus framing.
_HISTOGRAM_BYTES = 1024
_SCALAR_BYTES = 64


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

  def cadences(self, with_images):
    """The step intervals of the summaries that are on (images only where there are some)."""
    everys = [self.cfg.scalars_every]
    if with_images and self.cfg.max_outputs > 0:
      everys.append(self.cfg.images_every)
    if self._histograms_wanted():
      everys.append(self.cfg.histograms_every)
    return everys

  def _histograms_wanted(self):
    return self.cfg.histograms or self.cfg.bias_histograms or self.cfg.activation_histograms

  def scalars_due(self, step):
    return step % self.cfg.scalars_every == 0

  def images_due(self, step):
    return self.cfg.max_outputs > 0 and step % self.cfg.images_every == 0

  def histograms_due(self, step):
    return self._histograms_wanted() and step % self.cfg.histograms_every == 0

  def write_scalars(self, step, values):
    with self._writer.as_default(step=step):
      for name, value in values.items():
        tf.summary.scalar(name, float(value))

  def write_images(self, step, images):
    """images: {name: [N, H, W, C] uint8 or float in [0, 1]}; at most max_outputs of each are written."""
    with self._writer.as_default(step=step):
      for name, batch in images.items():
        batch = batch[:self.cfg.max_outputs]
        if self._within_budget(name, int(np.prod(batch.shape))):
          tf.summary.image(name, batch, max_outputs=self.cfg.max_outputs)

  def write_histograms(self, step, tensors):
    with self._writer.as_default(step=step):
      for name, value in tensors.items():
        if self._within_budget(name, _HISTOGRAM_BYTES):
          tf.summary.histogram(name, value)

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
