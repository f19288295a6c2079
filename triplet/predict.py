"""Uses a triplet run's embeddings: embeds photos to a .npy, compares two photos, or searches a
gallery folder for the photos nearest to each query.

python -m triplet.predict --workdir=runs/triplet --embed_to=runs/embeddings.npy photos/   # + embeddings.tsv
python -m triplet.predict --workdir=runs/triplet --compare a.jpg b.jpg
python -m triplet.predict --saved_model=runs/triplet/saved_model --gallery=photos/ --top_k=3 query.jpg

One mode a command: --embed_to writes the L2-normalized embeddings [N, D] (float32, one row per
photo, in order; a folder stands for its photos, sorted) and beside it a TSV of row and file;
--compare prints the distance of two photos and whether they are the same identity: closer than
the verification threshold the run chose on its verification pairs (metrics.json's eval with
--workdir, carried by the SavedModel with --saved_model; --threshold to give one, or
--threshold_from=model.onnx.json for the one an ONNX or LiteRT export carries), which is
printed with where it came from (without one the verdict is "?"); --gallery prints, per query
photo, the --top_k nearest gallery photos with their distances and verdicts (--output=FILE writes
that table as CSV too).

--workdir reads a training run: its own config.json (--config.key=value on top) and the weights of
its best evaluation (best/) or else of its newest checkpoint; --saved_model reads an export. Photos
get the evaluation's preprocessing (resized to data.load_size, the central data.crop_size crop) and
are read as a photo viewer shows them (their EXIF orientation applied); one over --max_pixels is
refused before the model loads; one that does not read is named and left out (of the .npy, of the
gallery), and the command ends with exit code 2 once the others' results are given.
"""
from common.runtime import process

if __name__ == "__main__":
  process.start()  # before TensorFlow's import: signals recorded, its C++ start-up lines held back

import contextlib
import json
import os

from absl import flags
from absl import logging
import numpy as np
import tensorflow as tf

from common.app import cli
from common.app import export as export_lib
from common.app import predict as predict_lib
from common.contract import config as config_lib
from common.contract.errors import ConfigError
from common.contract.errors import DataError
from common.contract.errors import UserError
from common.data import normalization
from common.runtime import workdir as workdir_lib
from triplet import data as data_lib
from triplet import input_pipeline
from triplet import sources as sources_lib
from triplet import task as task_lib


class Embedder:
  """embed(uint8 [h, w, 3]) -> L2-normalized [D], and the verification threshold with its source
  (None when the run has none)."""

  def __init__(self, embed, threshold, source):
    self.embed, self.threshold, self.source = embed, threshold, source


def load_saved_model(saved_model):
  loaded = predict_lib.load_saved_model(saved_model, ("embeddings",), task_lib.NAME)
  serve = loaded.signatures["serving_default"]
  constants = loaded.signatures.get(export_lib.CONSTANTS_SIGNATURE)
  threshold, source = None, "the SavedModel carries none (an export without verification pairs, or older)"
  if constants is not None:
    values = constants()
    threshold = float(values["threshold"])
    source = f"from the SavedModel, the run's verification pairs at step {int(values['step'])}"
    why = export_lib.threshold_problem(threshold)
    if why:
      threshold, source = None, f"the SavedModel's threshold {why}; pass --threshold"
  return Embedder(lambda image: serve(images=tf.constant(image[None]))["embeddings"][0].numpy(),
                  threshold, source)


def load_workdir(workdir, config):
  """The run's weights with the evaluation's preprocessing, and metrics.json's threshold."""
  settings = data_lib.read_settings(config.data)
  softmax = config.loss.name == task_lib.SOFTMAX  # its classifier head is in the checkpoint
  identities = sources_lib.load_train_identities(settings, config.seed, workdir) if softmax else ()
  model = task_lib.build_model(config, settings, len(identities))
  step = predict_lib.checkpoint_step(predict_lib.restore_weights(model, workdir))
  predict = task_lib.make_predict_fn(model)
  normalizer = normalization.get_normalizer(settings.images.normalization)
  size, crop = settings.images.load_size, settings.images.crop_size

  def embed(image):
    resized = tf.image.resize(image, [size, size])  # as input_pipeline.load_image
    return predict(input_pipeline.preprocess_for_eval(resized, crop, normalizer)[None])[0].numpy()

  threshold, source = metrics_threshold(workdir, step)
  return Embedder(embed, threshold, source)


def metrics_threshold(workdir, weights_step):
  """(threshold, its source) of metrics.json's eval, the run's last evaluation; (None, why) without."""
  path = os.path.join(workdir, "metrics.json")
  try:
    evaluation = config_lib.read_json_object(path, "pass --threshold or --saved_model").get("eval", {})
  except DataError as e:
    return None, str(e)
  if not isinstance(evaluation, dict):
    return None, f"{path}'s eval is {json.dumps(evaluation)}, not an evaluation's record; pass --threshold"
  if task_lib.VERIFICATION_THRESHOLD not in evaluation:
    return None, f"{path} has none (a run without verification pairs)"
  why = export_lib.threshold_problem(evaluation[task_lib.VERIFICATION_THRESHOLD])
  if why:
    return None, f"{path}'s eval.{task_lib.VERIFICATION_THRESHOLD} {why}; pass --threshold"
  step = evaluation.get("step")
  if step != weights_step:
    logging.warning("the threshold is the evaluation's at step %s, the weights are of step %d (the "
                    "best evaluation's); the run's SavedModel carries the threshold of its weights",
                    step, weights_step)
  return float(evaluation[task_lib.VERIFICATION_THRESHOLD]), \
      f"from {path}, the run's verification pairs at step {step}"


def export_threshold(path):
  """(threshold, its source) of the JSON scripts/export.py writes beside an ONNX or LiteRT export,
  (None, why) when it carries none; one line when it does not read, is another trainer's, or its
  threshold is no distance."""
  fix = "give the .json that scripts/export.py wrote beside a triplet ONNX or LiteRT export"
  about = config_lib.read_json_object(path, fix)
  if about.get("format") not in ("onnx", "litert"):  # e.g. a run's config.json names its trainer too
    raise DataError(f"{path} is no export's JSON (its \"format\" is {json.dumps(about.get('format'))}, "
                    f"not onnx or litert); {fix}")
  if about.get("trainer") != task_lib.NAME:
    raise DataError(f"{path} describes an export of {json.dumps(about.get('trainer'))}, not of "
                    f"{task_lib.NAME}; {fix}")
  if "threshold" not in about:
    return None, f"{path} carries none (an export without verification pairs)"
  why = export_lib.threshold_problem(about["threshold"])
  if why:
    raise DataError(f"{path}: threshold {why}; pass --threshold")
  return float(about["threshold"]), (f"from {path}, the {about.get('format')} export's: the run's "
                                     f"verification pairs at step {about.get('step')}")


def embed_all(embedder, photos):
  """[N, D] float32 embeddings of the photos that read (photos.read: their positions), in order."""
  return np.stack([embedder.embed(image) for _, image in photos]).astype(np.float32)


def verdict(distance, threshold):
  return "?" if threshold is None else "same" if distance < threshold else "different"


def index_path(output):
  """The index beside embed_to's .npy: the same name ending .tsv."""
  return os.path.splitext(output)[0] + ".tsv"


def embed_to(embedder, photos, output):
  """Writes output (.npy) and its index, output with .tsv for .npy: row and file of each embedding."""
  embeddings = embed_all(embedder, photos)
  paths = [photos.paths[i] for i in photos.read]
  index = index_path(output)
  try:
    with workdir_lib.writing(output, flag="--embed_to"):
      np.save(output, embeddings)
      with open(index, "w", encoding="utf-8") as f:
        f.write("row\tfile\n" + "".join(f"{row}\t{path}\n" for row, path in enumerate(paths)))
  except UserError:  # a disk that filled up: no half-written pair is left
    for written in (output, index):
      with contextlib.suppress(OSError):
        os.remove(written)
    raise
  print(f"{len(paths)} embeddings of {embeddings.shape[1]} values in {output}, their files in {index}")
  photos.finish(f"the embeddings of the other {len(paths)} are in {output}, their files in {index}")
  return embeddings


def compare(embedder, photos):
  embeddings = embed_all(embedder, photos)
  photos.finish("nothing was compared")  # a distance needs both photos
  distance = float(np.linalg.norm(embeddings[0] - embeddings[1]))
  predict_lib.show_table(["image_a", "image_b", "distance", "verdict"],
                         [[*photos.paths, distance, verdict(distance, embedder.threshold)]])
  return distance


def search(embedder, photos, num_gallery, top_k, output):
  """Prints (and with output writes as CSV) the top_k gallery photos nearest to each query: photos
  holds the gallery's num_gallery photos, then the queries."""
  embeddings = embed_all(embedder, photos)
  is_gallery = np.array(photos.read) < num_gallery
  gallery_paths = [photos.paths[i] for i in photos.read if i < num_gallery]
  queries = [photos.paths[i] for i in photos.read if i >= num_gallery]
  if not gallery_paths or not queries:
    photos.finish(f"no {'gallery photo' if not gallery_paths else 'query'} read: nothing was searched")
  found = embeddings[is_gallery]
  rows = []
  for query, embedding in zip(queries, embeddings[~is_gallery]):
    distances = np.linalg.norm(found - embedding, axis=1)
    for rank, i in enumerate(np.argsort(distances, kind="stable")[:top_k], 1):
      rows.append([query, rank, gallery_paths[i], float(distances[i]),
                   verdict(distances[i], embedder.threshold)])
  predict_lib.show_table(["query", "rank", "gallery_image", "distance", "verdict"], rows, output)
  photos.finish(f"the table above holds {len(queries)} of the {len(photos.paths) - num_gallery} queries, "
                f"matched among {len(gallery_paths)} of the gallery's {num_gallery} photos")
  return rows


def run(args, config, *, workdir=None, saved_model=None, embed_path=None, compare_two=False,
        gallery=None, top_k=5, output=None, threshold=None, threshold_from=None, max_pixels=None):
  """The command: one of embed_path, compare_two, gallery; returns what the mode gives. Photos over
  max_pixels (default photos.MAX_PIXELS) are refused."""
  modes = [name for name, given in (("--embed_to", embed_path), ("--compare", compare_two),
                                    ("--gallery", gallery)) if given]
  if len(modes) != 1:
    raise ConfigError(f"give one of --embed_to=FILE.npy, --compare A B, --gallery=DIR (got "
                      f"{', '.join(modes) or 'none'})")
  paths = predict_lib.photo_paths(args, max_pixels)
  if compare_two and len(paths) != 2:
    raise DataError(f"--compare takes two photos, got {len(paths)}: {' '.join(paths[:4])}")
  if top_k < 1:
    raise ConfigError(f"--top_k={top_k} must be 1 or more")
  if threshold is not None and export_lib.threshold_problem(threshold):
    raise ConfigError(f"--threshold={threshold:g} {export_lib.threshold_problem(threshold)}")
  if threshold is not None and threshold_from:
    raise ConfigError("give --threshold or --threshold_from, not both")
  exported = export_threshold(threshold_from) if threshold_from else None
  if embed_path and not embed_path.endswith(".npy"):  # numpy.save would add .npy to any other name
    raise ConfigError(f"--embed_to={embed_path}: name a .npy file (numpy writes {embed_path}.npy "
                      "for this name)")
  gallery_paths = predict_lib.photo_paths([gallery], max_pixels) if gallery else []
  photos = predict_lib.Photos(gallery_paths + paths, max_pixels)
  predict_lib.check_new([embed_path, embed_path and index_path(embed_path)], "--embed_to")
  predict_lib.check_new([output], "--output")
  with predict_lib.checked_paths(saved_model, {"--embed_to": predict_lib.folder_of(embed_path),
                                               "--output": predict_lib.folder_of(output)}):
    embedder = load_saved_model(saved_model) if saved_model else load_workdir(workdir, config)
    if threshold is not None:
      embedder.threshold, embedder.source = threshold, "from --threshold"
    if exported:
      embedder.threshold, embedder.source = exported
    if not embed_path:
      shown = f"{embedder.threshold:.4f}" if embedder.threshold is not None else "none"
      print(f"threshold {shown} ({embedder.source}): a pair is the same identity below it")
    if embed_path:
      return embed_to(embedder, photos, embed_path)
    if compare_two:
      return compare(embedder, photos)
    return search(embedder, photos, len(gallery_paths), top_k, output)


def main(argv):
  if len(argv) < 2:
    raise ConfigError("no photo given: name one or more photos or folders after the flags")
  workdir = _WORKDIR.value
  run(argv[1:], cli.run_config(_CONFIG, workdir, _SAVED_MODEL.value), workdir=workdir,
      saved_model=_SAVED_MODEL.value, embed_path=_EMBED_TO.value, compare_two=_COMPARE.value,
      gallery=_GALLERY.value, top_k=_TOP_K.value, output=_OUTPUT.value, threshold=_THRESHOLD.value,
      threshold_from=_THRESHOLD_FROM.value, max_pixels=_MAX_PIXELS.value)


if __name__ == "__main__":
  _CONFIG, _WORKDIR, _SAVED_MODEL, _MAX_PIXELS = predict_lib.define_flags("triplet", "configs/triplet.py",
                                                                          "runs/triplet")
  _EMBED_TO = flags.DEFINE_string("embed_to", None, "Write the photos' embeddings to this .npy, their "
                                  "files to the .tsv beside it.")
  _COMPARE = flags.DEFINE_boolean("compare", False, "Compare the two photos given: distance, same or different.")
  _GALLERY = flags.DEFINE_string("gallery", None, "A folder of photos to search for those nearest each query.")
  _TOP_K = flags.DEFINE_integer("top_k", 5, "How many gallery photos to show per query.")
  _OUTPUT = flags.DEFINE_string("output", None, "With --gallery: also write the table as CSV here.")
  _THRESHOLD = flags.DEFINE_float("threshold", None, "The distance below which a pair is the same "
                                  "identity; default the run's (metrics.json, or the SavedModel's).")
  _THRESHOLD_FROM = flags.DEFINE_string("threshold_from", None, "The JSON scripts/export.py wrote "
                                        "beside an ONNX or LiteRT export (model.onnx.json): use the "
                                        "threshold that export carries.")
  cli.run(main)
