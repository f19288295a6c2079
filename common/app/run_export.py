"""A training run exported (scripts/export.py is its command line): the run's trainer and weights
read from its workdir, its SavedModel or a conversion (common.app.conversion) written beside it,
checked (common.app.export_check) before it is kept.

--workdir names the run: its config.json names the trainer (`trainer`: the package whose code wrote
it and runs here) and gives the evaluation set; its weights (best/, else the newest checkpoint) go
through the trainer's serving signature (Task.export), or --saved_model's (an export of the same
trainer) is converted instead. Beside an ONNX or LiteRT model, <output>.json says whose export it is
and the constants its SavedModel carries (triplet: the verification threshold and its step).

The check: the export and the SavedModel score the evaluation set (the run's own saved_model/ where
it has one, so that the export is held to the run's answers; else --saved_model, or one made of the
weights); the largest output difference, the share of equal class ids and both headline metrics are
described. A float export that fails its check is removed, in one line; a quantized one is reported,
its differences being the point. The description ends with each written file's size and the
export's wall time.
"""
import contextlib
import importlib
import json
import os
import re
import shutil
import tempfile
import time
import types

from absl import logging
import tensorflow as tf

from common.app import cli
from common.app import export as export_lib
from common.app import conversion
from common.app import export_check
from common.contract import config as config_lib
from common.contract.errors import ConfigError
from common.contract.errors import first_line
from common.runtime import signals
from common.runtime import workdir as workdir_lib
from common.training import checkpoints

FORMATS = ("saved_model", "onnx", "litert")
# The only existing file an export replaces: an earlier export of its format (saved_model: none).
SUFFIX = {"onnx": ".onnx", "litert": ".tflite"}
# int8's representative images: the first ones of the evaluation set (a subset, said in the log).
REPRESENTATIVE_IMAGES = 64
# --image_size's largest side: a float32 image of 8192^2 pixels is 0.8 GB before any activation.
MAX_IMAGE_SIDE = 8192



def trainer_of(workdir):
  """The task module (<trainer>.task) of the trainer that <workdir>/config.json names, and the run's
  config: that trainer's config with the file applied. A trainer whose code is not importable here
  is one line naming it."""
  path = os.path.join(workdir, "config.json")
  if not os.path.isfile(path):
    raise ConfigError(f"{path} does not exist: give the --workdir of a training run")
  trainer = config_lib.read_json_object(path, "give the --workdir of a training run").get("trainer")
  try:  # a package's dotted name, nothing else (a relative or empty name would import something else)
    module = importlib.import_module(f"{trainer}.task") if isinstance(trainer, str) and re.fullmatch(
        r"\w+(\.\w+)*", trainer) else None
  except ModuleNotFoundError as e:
    raise ConfigError(f"{path} is a run of the trainer {trainer!r}, whose code is not importable here "
                      f"({e}): run the scripts/export.py of its repository, or pip install -e . there") from None
  if not all(hasattr(module, name) for name in ("NAME", "CONFIG_MODULE", "make_task")):
    raise ConfigError(f"{path} names no trainer (trainer {trainer!r}); give the --workdir of a training run")
  config = importlib.import_module(module.CONFIG_MODULE).get_config()
  return module, cli.run_config(types.SimpleNamespace(value=config), workdir)


def load_run(workdir, saved_model=None):
  """(the trainer's task module, config, task, the Keras model with the run's best weights, else its
  newest); a --saved_model of another trainer is refused before the weights are read."""
  module, config = trainer_of(workdir)
  if saved_model:
    workdir_lib.check_saved_model(saved_model, module.NAME)
  task = module.make_task(config, workdir, for_training=True)
  model = task.build_model()
  logging.info("exporting %s", checkpoints.restore_served(model, workdir))
  return module, config, task, model


def export(workdir, fmt, output, saved_model=None, image_size=None, quantize=None):
  """Exports, checks, and moves the export to `output` once its check holds (returns its figures);
  a signal stops it between its stages (and the trainer's SavedModel export), nothing written."""
  started = time.monotonic()
  try:
    return {**_export(workdir, fmt, output, saved_model, image_size, quantize),
            "seconds": time.monotonic() - started}
  except signals.Interrupted as e:  # the trainer's export says it of a training run: reworded
    raise signals.Interrupted(e.signum, f"during the export to {output}; nothing was written: run the "
                              "command again") from None


def _export(workdir, fmt, output, saved_model, image_size, quantize):
  if quantize and fmt != "litert":
    raise conversion.ExportError(f"--quantize={quantize} is for --format=litert (LiteRT's converter quantizes)")
  check_image_size(image_size)
  written = [output] + ([output + ".json"] if fmt in SUFFIX else [])  # as named, for the closing line
  output = check_output(output, fmt, workdir)
  conversion.require(fmt)
  workdir_lib.check_writable(os.path.dirname(output), flag="--output")
  _, config, task, model = load_run(workdir, saved_model)
  # Beside an ONNX or LiteRT model: its trainer and constants (a SavedModel carries its own).
  described = output + ".json" if fmt in SUFFIX else None
  signals.check("")
  with tempfile.TemporaryDirectory() as scratch:
    converted_path = saved_model or task.export(model, os.path.join(scratch, "saved_model"))
    converted = conversion.load("saved_model", converted_path)
    reference_path = reference_of(workdir, saved_model, task.name) or converted_path
    reference = converted if reference_path == converted_path else conversion.load("saved_model", reference_path)
    compared_with = (reference_path if saved_model or reference_path != converted_path
                     else "a SavedModel of the same weights, made for the check")
    about = {"trainer": task.name, "format": fmt, **converted.constants}
    export_lib.warn_of_constants(converted.constants, output)
    before = export_check.Comparison(reference, None, image_size,
                        keep_images=REPRESENTATIVE_IMAGES if quantize == "int8" else 0)
    with export_lib.reading_outputs(converted_path, converted.outputs):
      metrics_before = export_check.evaluate(task, before)
    signals.check("")
    # Written whole into a folder of its own beside the output, then renamed: a failed export leaves
    # nothing, and what is removed is only ever this command's own folder.
    staging = tempfile.mkdtemp(prefix=f".{os.path.basename(output)}.", suffix=".tmp",
                               dir=os.path.dirname(output))
    try:
      partial = os.path.join(staging, os.path.basename(output))
      with _writing(output):
        if fmt == "saved_model":
          task.export(model, partial)
        else:
          if quantize == "int8":
            logging.info("int8: calibrated on the first %d evaluation images", len(before.images))
          conversion.convert(converted, fmt, partial, image_size, quantize, before.images,
                  {name: str(value) for name, value in about.items()})
          with open(partial + ".json", "w", encoding="utf-8") as f:
            f.write(json.dumps(about, indent=2) + "\n")
      signals.check("")
      try:
        check = export_check.Comparison(reference, conversion.load(fmt, partial), image_size)
        metrics_after = export_check.evaluate(task, check)
      except Exception as e:  # a converter's model its own runtime cannot run
        raise conversion.ExportError(f"the {fmt} export of {workdir} does not run in its runtime "
                                     f"({first_line(e)[:300]}); nothing was written") from None
      failures = check.failures()
      if failures and not quantize:
        raise conversion.ExportError(f"the {fmt} export of {workdir} failed its check ({'; '.join(failures)} on "
                                     f"the evaluation images, tolerance {export_check.TOLERANCE:g} x the output's scale; "
                                     f"compared with {compared_with}); nothing was written")
      with _writing(output):
        os.replace(partial, output)
        if described:
          os.replace(partial + ".json", described)
    finally:
      shutil.rmtree(staging, ignore_errors=True)
  metric = task.headline_metrics[0]
  return {"max_difference": check.max_difference, "same_class_ids": check.same / check.compared
          if check.compared else None, "metric": metric, "before": metrics_before[metric],
          "after": metrics_after[metric], "image_size": image_size and tuple(image_size),
          "config": config, "files": {path: _size(path) for path in written},
          "reference": compared_with}


def _size(path):
  """Bytes of a file, or of the files in a folder (a SavedModel)."""
  if os.path.isfile(path):
    return os.path.getsize(path)
  return sum(os.path.getsize(os.path.join(folder, name)) for folder, _, names in os.walk(path) for name in names)


def reference_of(workdir, saved_model, trainer):
  """What the export of a run's weights is checked against: the run's own SavedModel (its answer
  to every image) where it has one; None for --saved_model's conversion or a run without one."""
  path = os.path.join(workdir, "saved_model")
  if saved_model or not os.path.lexists(path):
    return None
  workdir_lib.check_saved_model(path, trainer)
  logging.info("the export is checked against the run's own SavedModel %s", path)
  return path


def check_image_size(image_size):
  """One line for an --image_size (height, width) outside 1 to MAX_IMAGE_SIDE (None: any)."""
  if image_size is not None and not all(1 <= side <= MAX_IMAGE_SIDE for side in image_size):
    raise conversion.ExportError(f"--image_size={image_size[0]} is not a side of 1 to {MAX_IMAGE_SIDE} pixels; "
                                 "leave it out for any size")


def check_output(output, fmt, workdir):
  """--output as an absolute path, or one line if writing it would replace what the export did not make:
  an existing folder (above all the workdir), a path in a folder of the run, a file but an earlier export."""
  path = os.path.abspath(output)  # a trailing slash names the same folder
  run = os.path.realpath(workdir)
  parent = os.path.realpath(os.path.dirname(path))
  if os.path.isdir(path):
    what = "the run's --workdir" if os.path.realpath(path) == run else "an existing folder"
    raise conversion.ExportError(f"--output={output} is {what}; an export never replaces a folder: name a new "
                                 f"path, e.g. {os.path.join(workdir, 'model' + SUFFIX.get(fmt, ''))}")
  if parent != run and os.path.commonpath([parent, run]) == run:
    raise conversion.ExportError(f"--output={output} is inside {os.path.relpath(parent, run)}/, a folder of the "
                                 f"run {workdir}; write beside the run's files, e.g. "
                                 f"{os.path.join(workdir, 'model' + SUFFIX.get(fmt, ''))}")
  problem = export_lib.replaced(output, fmt, SUFFIX.get(fmt))
  if problem:
    raise conversion.ExportError(f"--output={output}{problem}")
  return path


@contextlib.contextmanager
def _writing(output):
  """A write that fails (a full disk, a read-only folder) is one line."""
  try:
    yield
  except (OSError, tf.errors.OpError) as e:
    raise conversion.ExportError(f"cannot write --output={output} ({first_line(e)}); free space or choose "
                                 "another folder; nothing was written") from None


def describe(result, fmt, output, quantize):
  fixed = result["image_size"]
  lines = [f"{output}: {fmt}{' ' + quantize if quantize else ''}, "
           + (f"images {fixed[0]}x{fixed[1]}" if fixed else "images of any size") + ", any batch"]
  lines.append(f"  compared with {result['reference']}")
  for name, difference in sorted(result["max_difference"].items()):
    lines.append(f"  max |difference| of {name} from the SavedModel's: {difference:.3g}")
  if result["same_class_ids"] is not None:
    lines.append(f"  same class ids: {result['same_class_ids']:.2%}")
  if result["metric"]:
    lines.append(f"  {result['metric']} on the evaluation set: SavedModel {result['before']:.4f}, "
                 f"export {result['after']:.4f}")
  written = ", ".join(f"{path} ({size / 2**20:.3g} MB)" if size >= 1024 else f"{path} ({size} bytes)"
                      for path, size in result["files"].items())
  lines.append(f"  wrote {written} in {result['seconds']:.1f} s")
  return "\n".join(lines)
