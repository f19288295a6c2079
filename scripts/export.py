"""Exports a training run as a SavedModel, ONNX or LiteRT model taking uint8 images, checked on the
run's evaluation set before it is kept.

python scripts/export.py --workdir=runs/segmentation --format=onnx --output=runs/segmentation/model.onnx
python scripts/export.py --workdir=runs/dogs --format=litert --quantize=int8 --output=runs/dogs/model.tflite
python scripts/export.py --workdir=runs/triplet --saved_model=runs/triplet/saved_model --format=litert --output=t.tflite

--workdir names the run: its config.json names the trainer (`trainer`: the package whose code wrote it
and runs here) and gives the evaluation set; its
weights (best/, else the newest checkpoint) go through the trainer's serving signature (Task.export),
or --saved_model's (an export of the same trainer) is converted instead.

The SavedModel's serving signature is converted, preprocessing included: the model takes uint8
images and gives the numeric outputs (logits, probabilities, class ids, embeddings; ONNX and LiteRT
give ids, not class names). Keras' model.export(format="onnx"|"litert") would convert the network
alone. Neither converter has kernels for the signatures' uint8 operations (a padding, a resize), so
the frozen signature runs them on float32 copies of the same values behind one cast of the input.
Both formats take what predict takes: uint8 images [batch, height, width, 3] of any batch and size
(--image_size fixes the size), resized inside as the signature does. Beside an ONNX or LiteRT model,
<output>.json says whose export it is and the constants its SavedModel carries (triplet: the
verification threshold and its step), also in the model's own metadata (ONNX's metadata_props,
LiteRT's metadata entries) for runtimes that read it.

The check: the export, run by its own runtime (onnxruntime; LiteRT's interpreter), and the
SavedModel score the evaluation set through Task.evaluate (the run's own saved_model/ where it has
one, so that the export is held to the run's answers; else --saved_model, or one made of the
weights); the largest output difference, the share of equal class ids and both headline metrics
are printed. A float export that differs by more than TOLERANCE is removed, in one line; a quantized
one is reported, its differences being the point. The closing line gives each written file's size
and the export's wall time.
"""
if not __package__:  # run as a file (python scripts/x.py): this repository's packages first
  import repository_root  # pylint: disable=unused-import

from common.runtime import process

if __name__ == "__main__":
  process.start()  # before TensorFlow's import: signals recorded, its C++ start-up lines held back

import contextlib
import importlib
import json
import os
import re
import shutil
import tempfile
import time
import types

from absl import flags
from absl import logging
import numpy as np
import tensorflow as tf
from tensorflow.core.framework import types_pb2
from tensorflow.lite.python import schema_py_generated as schema_fb
from tensorflow.lite.tools import flatbuffer_utils
from tensorflow.python.framework import convert_to_constants

from common.app import cli
from common.app import export as export_lib
from common.contract import config as config_lib
from common.contract.errors import ConfigError
from common.contract.errors import first_line
from common.contract.errors import UserError
from common.runtime import signals
from common.runtime import workdir as workdir_lib
from common.training import checkpoints

FORMATS = ("saved_model", "onnx", "litert")
# The only existing file an export replaces: an earlier export of its format (saved_model: none).
SUFFIX = {"onnx": ".onnx", "litert": ".tflite"}
# What each format needs beyond requirements.txt (requirements-export.txt installs them all).
EXTRA = {"onnx": ("tf2onnx", "onnxruntime"), "litert": ("ai_edge_litert.interpreter",)}
CATCH_ERRORS = "TF2ONNX_CATCH_ERRORS"  # tf2onnx reads "set" as "no copies", whatever the value
INSTALL = 'pip install -r requirements-export.txt (or pip install -e ".[export]")'
# A float export may differ from the SavedModel by this much times max(1, largest |output|).
TOLERANCE = 1e-4
# int8's representative images: the first ones of the evaluation set (a subset, said in the log).
REPRESENTATIVE_IMAGES = 64
# --image_size's largest side: a float32 image of 8192^2 pixels is 0.8 GB before any activation.
MAX_IMAGE_SIDE = 8192


class ExportError(UserError):
  """An export that cannot be made, or whose check failed (the output is not kept)."""


def require(fmt):
  """The modules `fmt` needs, or one line naming the extra that installs them."""
  try:
    return [importlib.import_module(name) for name in EXTRA.get(fmt, ())]
  except ImportError as e:
    raise ExportError(f"--format={fmt} needs {', '.join(EXTRA[fmt])} ({e.name} is not installed): "
                      f"{INSTALL}") from None


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


# The conversion.


# Types neither converter runs arithmetic in (LiteRT has no float64 kernels either: Inception's central
# crop computes its offsets in float64 for images of any size; exact in float32 for its 7/8 fraction).
AS_FLOAT32 = (types_pb2.DT_UINT8, types_pb2.DT_DOUBLE)


def _float_attr(value, renamed):
  """uint8 and float64 types and constants of an op's attribute as float32; function names as renamed."""
  kind = value.WhichOneof("value")
  if kind == "type" and value.type in AS_FLOAT32:
    value.type = types_pb2.DT_FLOAT
  elif kind == "tensor" and value.tensor.dtype in AS_FLOAT32:
    value.tensor.CopyFrom(tf.make_tensor_proto(tf.make_ndarray(value.tensor).astype(np.float32)))
  elif kind == "func":
    value.func.name = renamed.get(value.func.name, value.func.name)
  elif kind == "list":
    value.list.type[:] = [types_pb2.DT_FLOAT if t in AS_FLOAT32 else t for t in value.list.type]
    for function in value.list.func:
      function.name = renamed.get(function.name, function.name)


def _float_nodes(nodes, renamed):
  for node in nodes:
    node.op = renamed.get(node.op, node.op)
    # Keras' XLA-compiled convolutions (unknown channel counts) inlined like any function.
    for key in ("_XlaMustCompile", "_noinline"):
      node.attr.pop(key, None)
    for value in node.attr.values():
      _float_attr(value, renamed)


def _images_spec(image_size):
  return tf.TensorSpec([None, *(image_size or (None, None)), 3], tf.uint8, name="images")


def _float32_graph(serve, image_size):
  """(the frozen graph of the signature `serve` on images [None, H, W, 3] (H, W: image_size or any),
  every uint8 or float64 operation done in float32; its images input; {output name: tensor name} of
  its numeric outputs)."""
  traced = tf.function(lambda images: serve(images=images)).get_concrete_function(_images_spec(image_size))
  frozen = convert_to_constants.convert_variables_to_constants_v2(traced)
  graph_def = frozen.graph.as_graph_def()
  # New names: the frozen (uint8) functions are registered already.
  renamed = {f.signature.name: f.signature.name + "_float32" for f in graph_def.library.function}
  _float_nodes(graph_def.node, renamed)
  for function in graph_def.library.function:
    _float_nodes(function.node_def, renamed)
    function.signature.name = renamed[function.signature.name]
    for arg in [*function.signature.input_arg, *function.signature.output_arg]:
      arg.type = types_pb2.DT_FLOAT if arg.type in AS_FLOAT32 else arg.type
    for key in ("_XlaMustCompile", "_noinline"):
      function.attr.pop(key, None)
  names = {name: tensor.name for name, tensor in zip(sorted(traced.structured_outputs), frozen.outputs)
           if tensor.dtype != tf.string}
  return graph_def, frozen.inputs[0].name, names


def convertible(serve, image_size=None):
  """A tf.function of uint8 images [None, H, W, 3] (H, W: image_size or any) -> the signature's
  numeric outputs, with variables frozen and every uint8 or float64 operation done in float32."""
  graph_def, images, names = _float32_graph(serve, image_size)
  imported = tf.compat.v1.wrap_function(lambda: tf.compat.v1.import_graph_def(graph_def, name=""), [])
  graph = imported.graph
  pruned = imported.prune(graph.get_tensor_by_name(images),
                          {name: graph.get_tensor_by_name(tensor) for name, tensor in names.items()})
  function = tf.function(lambda images: pruned(tf.cast(images, tf.float32)),
                         input_signature=[_images_spec(image_size)])
  function.keep = (imported, pruned)  # the graph the function calls lives as long as it
  return function


def onnx_graph(serve, image_size=None):
  """(graph, its input, {output name: tensor name}) for tf2onnx: _float32_graph's graph taking the uint8
  images, cast to float32 inside. tf2onnx converts the frozen graph as it is: from a tf.function it
  would freeze and inline it again (18 of Inception V4's 41 s)."""
  graph_def, images, names = _float32_graph(serve, image_size)
  placeholder = images.split(":")[0]
  as_float32 = placeholder + "/as_float32"
  for node in graph_def.node:
    node.input[:] = [as_float32 if name in (placeholder, images) else name for name in node.input]
  next(node for node in graph_def.node if node.name == placeholder).attr["dtype"].type = types_pb2.DT_UINT8
  cast = graph_def.node.add(name=as_float32, op="Cast", input=[placeholder])
  cast.attr["SrcT"].type = types_pb2.DT_UINT8
  cast.attr["DstT"].type = types_pb2.DT_FLOAT
  return graph_def, images, names


def _onnx_model(tf2onnx, graph, copies=False):
  """tf2onnx's conversion of onnx_graph's `graph` (its images input named `images`, its outputs by
  their names). tf2onnx deep-copies the whole graph before each pass of its optimizer, so that a pass
  that raises can be skipped: 38 of Inception V4's 110 s. Without the copies (its TF2ONNX_CATCH_ERRORS
  variable set) a pass that raises ends the conversion, which then runs again with them."""
  graph_def, images, names = graph
  saved = os.environ.pop(CATCH_ERRORS, None)
  if not copies:
    os.environ[CATCH_ERRORS] = "FALSE"
  try:
    return tf2onnx.convert.from_graph_def(
        graph_def, input_names=[images], output_names=list(names.values()),
        tensors_to_rename={images: "images", **{tensor: name for name, tensor in names.items()}})[0]
  except signals.Interrupted:
    raise
  except Exception:  # pylint: disable=broad-except
    if copies:
      raise
    logging.info("a pass of tf2onnx's optimizer failed: converting again with its copies")
  finally:
    os.environ.pop(CATCH_ERRORS, None)
    if saved is not None:
      os.environ[CATCH_ERRORS] = saved
  return _onnx_model(tf2onnx, graph, copies=True)


def convert(serve, fmt, path, image_size=None, quantize=None, representative=(), metadata=None):
  """Writes the signature `serve` as `fmt` into `path`, with `metadata` ({name: text}) in the
  model's own metadata: ONNX's metadata_props, the LiteRT flatbuffer's metadata entries."""
  if fmt == "onnx":
    model = _onnx_model(require(fmt)[0], onnx_graph(serve, image_size))
    for name, text in (metadata or {}).items():
      model.metadata_props.add(key=name, value=text)
    with open(path, "wb") as f:
      f.write(model.SerializeToString())
    return
  function = convertible(serve, image_size)
  module = tf.Module()
  module.serve = function
  with tempfile.TemporaryDirectory() as scratch:
    tf.saved_model.save(module, scratch, signatures={"serving_default": function})
    converter = tf.lite.TFLiteConverter.from_saved_model(scratch)
    if quantize:
      converter.optimizations = [tf.lite.Optimize.DEFAULT]
    if quantize == "float16":
      converter.target_spec.supported_types = [tf.float16]
    elif quantize == "int8":
      converter.representative_dataset = lambda: ([image[None]] for image in representative)
    content = converter.convert()
  if metadata:
    content = _with_metadata(content, metadata)
  with open(path, "wb") as f:
    f.write(content)


def _with_metadata(content, metadata):
  """A LiteRT flatbuffer with each {name: text} of `metadata` as one of its metadata entries."""
  model = flatbuffer_utils.convert_bytearray_to_object(bytearray(content))
  model.metadata = model.metadata or []
  for name, text in metadata.items():
    buffer, entry = schema_fb.BufferT(), schema_fb.MetadataT()
    buffer.data = np.frombuffer(text.encode(), np.uint8)
    entry.name, entry.buffer = name, len(model.buffers)
    model.buffers.append(buffer)
    model.metadata.append(entry)
  return flatbuffer_utils.convert_object_to_bytearray(model)


def load(fmt, path):
  """The export at `path` in its own runtime, called as a signature: images=uint8 [B, H, W, 3] -> {name: tensor}."""
  if fmt == "saved_model":
    loaded = checkpoints.load_saved_model(path)  # the signature's variables live as long as it
    serve = lambda images: loaded.signatures["serving_default"](images=images)
    constants = loaded.signatures.get(export_lib.CONSTANTS_SIGNATURE)  # triplet's threshold, its step
    serve.constants = {name: value.numpy().item() for name, value in constants().items()} if constants else {}
    serve.outputs = tuple(loaded.signatures["serving_default"].structured_outputs)
    return serve
  if fmt == "onnx":
    onnxruntime = require(fmt)[1]
    session = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
    names = [output.name for output in session.get_outputs()]
    return lambda images: dict(zip(names, map(tf.constant, session.run(None, {"images": np.asarray(images)}))))
  interpreter = require(fmt)[0].Interpreter(model_path=path)
  runner = interpreter.get_signature_runner()
  return lambda images: {name: tf.constant(value) for name, value in runner(images=np.asarray(images)).items()}


# The check.


class Comparison:
  """A signature that gives the exported model's outputs and records how far they are from the
  reference's on the same images (resized to image_size for a fixed-size model), and the images."""

  def __init__(self, reference, exported, image_size, keep_images=0):
    self.reference, self.exported, self.image_size = reference, exported, image_size
    self.keep_images, self.images = keep_images, []
    self.max_difference, self.scale, self.same, self.compared = {}, {}, 0, 0

  def __call__(self, images):
    size = tf.shape(images)[1:3]
    if self.image_size and tuple(size.numpy()) != tuple(self.image_size):
      images = tf.cast(tf.round(tf.image.resize(images, self.image_size)), tf.uint8)
    self.images += list(images.numpy()[:max(0, self.keep_images - len(self.images))])
    reference = self.reference(images=images)
    outputs = self.exported(images=images) if self.exported else reference
    for name, value in outputs.items():
      expected = reference[name].numpy()
      if name == "class_ids":
        self.same += int(np.sum(expected == value.numpy()))
        self.compared += expected.size
      elif value.dtype.is_floating:
        difference = np.abs(expected - value.numpy())
        # A NaN the export gives where the SavedModel gives a number is an infinite difference
        # (np.max would carry the NaN, and max() with a NaN keeps its first argument).
        difference = np.where(np.isnan(difference), np.inf, difference)
        self.max_difference[name] = max(self.max_difference.get(name, 0.0), float(np.max(difference)))
        self.scale[name] = max(self.scale.get(name, 1.0), float(np.max(np.abs(expected))))
    return {name: _resized(value, size) for name, value in outputs.items()}

  def failures(self):
    return [f"{name} differs by {difference:.3g}" for name, difference in self.max_difference.items()
            if not difference <= TOLERANCE * self.scale[name]]


def _resized(value, size):
  """A per-pixel output back at the image's size (a fixed-size model's input was resized)."""
  if value.shape.rank < 3 or value.shape[1:3] == tuple(size.numpy()) or value.dtype == tf.string:
    return value
  method = "bilinear" if value.dtype.is_floating else "nearest"
  stacked = value if value.shape.rank == 4 else value[..., None]
  back = tf.cast(tf.image.resize(stacked, size, method=method), value.dtype)
  return back if value.shape.rank == 4 else back[..., 0]


def evaluate(task, signature):
  return task.evaluate(task.saved_model_predict_fn(signature), True).metrics


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
    raise ExportError(f"--quantize={quantize} is for --format=litert (LiteRT's converter quantizes)")
  check_image_size(image_size)
  written = [output] + ([output + ".json"] if fmt in SUFFIX else [])  # as named, for the closing line
  output = check_output(output, fmt, workdir)
  require(fmt)
  workdir_lib.check_writable(os.path.dirname(output), flag="--output")
  _, config, task, model = load_run(workdir, saved_model)
  # Beside an ONNX or LiteRT model: its trainer and constants (a SavedModel carries its own).
  described = output + ".json" if fmt in SUFFIX else None
  signals.check("")
  with tempfile.TemporaryDirectory() as scratch:
    converted_path = saved_model or task.export(model, os.path.join(scratch, "saved_model"))
    converted = load("saved_model", converted_path)
    reference_path = reference_of(workdir, saved_model, task.name) or converted_path
    reference = converted if reference_path == converted_path else load("saved_model", reference_path)
    compared_with = (reference_path if saved_model or reference_path != converted_path
                     else "a SavedModel of the same weights, made for the check")
    about = {"trainer": task.name, "format": fmt, **converted.constants}
    export_lib.warn_of_constants(converted.constants, output)
    before = Comparison(reference, None, image_size,
                        keep_images=REPRESENTATIVE_IMAGES if quantize == "int8" else 0)
    with export_lib.reading_outputs(converted_path, converted.outputs):
      metrics_before = evaluate(task, before)
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
          convert(converted, fmt, partial, image_size, quantize, before.images,
                  {name: str(value) for name, value in about.items()})
          with open(partial + ".json", "w", encoding="utf-8") as f:
            f.write(json.dumps(about, indent=2) + "\n")
      signals.check("")
      try:
        check = Comparison(reference, load(fmt, partial), image_size)
        metrics_after = evaluate(task, check)
      except Exception as e:  # a converter's model its own runtime cannot run
        raise ExportError(f"the {fmt} export of {workdir} does not run in its runtime "
                          f"({first_line(e)[:300]}); nothing was written") from None
      failures = check.failures()
      if failures and not quantize:
        raise ExportError(f"the {fmt} export of {workdir} failed its check ({'; '.join(failures)} on "
                          f"the evaluation images, tolerance {TOLERANCE:g} x the output's scale; "
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
    raise ExportError(f"--image_size={image_size[0]} is not a side of 1 to {MAX_IMAGE_SIDE} pixels; "
                      "leave it out for any size")


def check_output(output, fmt, workdir):
  """--output as an absolute path, or one line if writing it would replace what the export did not make:
  an existing folder (above all the workdir), a path in a folder of the run, a file but an earlier export."""
  path = os.path.abspath(output)  # a trailing slash names the same folder
  run = os.path.realpath(workdir)
  parent = os.path.realpath(os.path.dirname(path))
  if os.path.isdir(path):
    what = "the run's --workdir" if os.path.realpath(path) == run else "an existing folder"
    raise ExportError(f"--output={output} is {what}; an export never replaces a folder: name a new "
                      f"path, e.g. {os.path.join(workdir, 'model' + SUFFIX.get(fmt, ''))}")
  if parent != run and os.path.commonpath([parent, run]) == run:
    raise ExportError(f"--output={output} is inside {os.path.relpath(parent, run)}/, a folder of the "
                      f"run {workdir}; write beside the run's files, e.g. "
                      f"{os.path.join(workdir, 'model' + SUFFIX.get(fmt, ''))}")
  problem = export_lib.replaced(output, fmt, SUFFIX.get(fmt))
  if problem:
    raise ExportError(f"--output={output}{problem}")
  return path


@contextlib.contextmanager
def _writing(output):
  """A write that fails (a full disk, a read-only folder) is one line."""
  try:
    yield
  except (OSError, tf.errors.OpError) as e:
    raise ExportError(f"cannot write --output={output} ({first_line(e)}); free space or choose "
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


def main(argv):
  del argv
  result = export(_WORKDIR.value, _FORMAT.value, _OUTPUT.value, _SAVED_MODEL.value,
                  None if _IMAGE_SIZE.value is None else (_IMAGE_SIZE.value,) * 2, _QUANTIZE.value)
  print(describe(result, _FORMAT.value, _OUTPUT.value, _QUANTIZE.value), flush=True)


if __name__ == "__main__":
  _WORKDIR = flags.DEFINE_string("workdir", None, "The training run: its config.json, weights and "
                                 "evaluation set.", required=True)
  _FORMAT = flags.DEFINE_enum("format", None, FORMATS, "What to write.", required=True)
  _OUTPUT = flags.DEFINE_string("output", None, "The file (onnx, litert) or folder (saved_model) "
                                "to write.", required=True)
  _SAVED_MODEL = flags.DEFINE_string("saved_model", None, "Convert this SavedModel instead of the "
                                     "run's weights.")
  _IMAGE_SIZE = flags.DEFINE_integer("image_size", None, "Fix the side of the square images the "
                                     "model takes (others are resized to it for the check); default "
                                     "any size.")
  _QUANTIZE = flags.DEFINE_enum("quantize", None, ("float16", "int8"), "LiteRT: float16 weights, or "
                                "int8 weights and activations calibrated on evaluation images.")
  cli.run(main)
