"""Classifies photos with a fine-tuned Inception V4: the --top_k classes of each photo, with their
names and probabilities, printed as a table and with --output written as CSV.

python -m inception_finetune.predict --workdir=runs/dogs photo.jpg
python -m inception_finetune.predict --saved_model=runs/dogs/saved_model --top_k=3 --output=runs/dogs_top3.csv photos/

Photos of any format and colour mode (a folder stands for its photos, sorted) get the evaluation's
preprocessing (central crop data.central_fraction, TF-Slim's bilinear resize to data.image_size,
[-1, 1]) and are read as a photo viewer shows them (their EXIF orientation applied); one over
--max_pixels is refused before the model loads; one that does not read is named and left out, and the
command ends with exit code 2 once the others' classes are shown.

--workdir reads a training run: its own config.json (--config.key=value on top), its classes
(labels.txt) and the weights of its best evaluation (best/) or else of its newest checkpoint, with the
BatchNorm statistics the run recalibrated when it wrote them (those of its SavedModel).
--saved_model reads an export (class names from its assets/class_names.txt).
"""
from common.runtime import process

if __name__ == "__main__":
  process.start()  # before TensorFlow's import: signals recorded, its C++ start-up lines held back

import os

from absl import flags
import numpy as np
import tensorflow as tf

from common.app import cli
from common.app import export as export_lib
from common.app import predict as predict_lib
from common.contract.errors import ConfigError
from common.contract.errors import DataError
from inception_finetune import data as data_lib
from inception_finetune import preprocessing
from inception_finetune import task as task_lib


def load_saved_model(saved_model):
  """(image -> class probabilities, class names) of an export (ids for an export without names)."""
  serve = predict_lib.load_saved_model(saved_model, ("probabilities",), task_lib.NAME).signatures["serving_default"]
  names_path = os.path.join(saved_model, "assets", export_lib.CLASS_NAMES_ASSET)
  names = None
  num_classes = serve.structured_outputs["probabilities"].shape[-1]
  if os.path.isfile(names_path):
    try:
      with open(names_path, encoding="utf-8") as f:
        names = f.read().splitlines()
    except (OSError, UnicodeDecodeError) as e:
      raise DataError(f"{names_path} cannot be read ({getattr(e, 'strerror', None) or e}); export the "
                      "run again") from None
    if len(names) != num_classes:
      raise DataError(f"{names_path} names {len(names)} classes, the model gives {num_classes}; export "
                      "the run again")
  return (lambda image: serve(images=tf.constant(image[None]))["probabilities"][0].numpy(),
          names or [str(i) for i in range(num_classes)])


def load_workdir(workdir, config):
  """(image -> class probabilities, class names) of a run's weights, as evaluate reads them."""
  settings = data_lib.read_settings(config.data)
  names, _ = data_lib.read_run_classes(workdir)
  if names is None:
    raise DataError(f"{os.path.join(workdir, data_lib.LABELS_FILENAME)} does not exist: give the "
                    "--workdir of an inception_finetune training run, or pass --saved_model")
  model = task_lib.build_model(config, settings, len(names))
  predict_lib.restore_weights(model, workdir)
  logits = task_lib.make_predict_fn(model)
  size, fraction = settings.image_size, settings.eval.central_fraction

  def probabilities(image):
    prepared = preprocessing.preprocess_for_eval(tf.constant(image), size, size, fraction)
    return tf.nn.softmax(logits(prepared[None]))[0].numpy()

  return probabilities, names


def classify(paths, config, *, workdir=None, saved_model=None, top_k=5, output=None, max_pixels=None):
  """Prints (and with output writes as CSV) the top_k classes of each photo; returns the rows
  [photo, rank, class id, class name, probability]. Photos over max_pixels (default
  photos.MAX_PIXELS) are refused."""
  if top_k < 1:
    raise ConfigError(f"--top_k={top_k} must be 1 or more")
  photos = predict_lib.Photos(predict_lib.photo_paths(paths, max_pixels), max_pixels)
  predict_lib.check_new([output], "--output")
  with predict_lib.checked_paths(saved_model, {"--output": predict_lib.folder_of(output)}):
    probabilities, names = load_saved_model(saved_model) if saved_model else load_workdir(workdir, config)
    rows = []
    for path, image in photos:
      scores = probabilities(image)
      for rank, class_id in enumerate(np.argsort(-scores, kind="stable")[:top_k], 1):
        rows.append([path, rank, int(class_id), names[class_id], float(scores[class_id])])
    predict_lib.show_table(["image", "rank", "class_id", "class_name", "probability"], rows, output)
    photos.finish(f"the classes of the other {len(photos.read)} are above{f' and in {output}' if output else ''}")
  return rows


def main(argv):
  if len(argv) < 2:
    raise ConfigError("no photo given: name one or more photos or folders after the flags")
  workdir = _WORKDIR.value
  classify(argv[1:], cli.run_config(_CONFIG, workdir, _SAVED_MODEL.value), workdir=workdir,
           saved_model=_SAVED_MODEL.value, top_k=_TOP_K.value, output=_OUTPUT.value,
           max_pixels=_MAX_PIXELS.value)


if __name__ == "__main__":
  _CONFIG, _WORKDIR, _SAVED_MODEL, _MAX_PIXELS = predict_lib.define_flags(
      "inception_finetune", "configs/inception_v4.py", "runs/inception_v4")
  _TOP_K = flags.DEFINE_integer("top_k", 5, "How many classes to show per photo.")
  _OUTPUT = flags.DEFINE_string("output", None, "Also write the table as CSV here (a new file).")
  cli.run(main)
