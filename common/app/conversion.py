"""A SavedModel's serving signature converted to ONNX or LiteRT, with its metadata, and any export
loaded in its own runtime.

The serving signature is converted, preprocessing included: the model takes uint8 images and gives
the numeric outputs (logits, probabilities, class ids, embeddings; ONNX and LiteRT give ids, not class
names). Keras' model.export(format="onnx"|"litert") would convert the network alone. Neither converter
has kernels for the signatures' uint8 operations (a padding, a resize), so the frozen signature runs
them on float32 copies of the same values behind one cast of the input. Both formats take what predict
takes: uint8 images [batch, height, width, 3] of any batch and size (or a fixed size), resized inside
as the signature does. The export's metadata ({name: text}: whose export it is and the constants its
SavedModel carries) goes into the model's own metadata (ONNX's metadata_props, LiteRT's metadata
entries) for runtimes that read it.
"""
import importlib
import os
import tempfile

from absl import logging
import numpy as np
import tensorflow as tf
from tensorflow.core.framework import types_pb2
from tensorflow.lite.python import schema_py_generated as schema_fb
from tensorflow.lite.tools import flatbuffer_utils
from tensorflow.python.framework import convert_to_constants

from common.app import export as export_lib
from common.contract.errors import UserError
from common.runtime import signals
from common.training import checkpoints

# What each format needs beyond requirements.txt (requirements-export.txt installs them all).
EXTRA = {"onnx": ("tf2onnx", "onnxruntime"), "litert": ("ai_edge_litert.interpreter",)}
CATCH_ERRORS = "TF2ONNX_CATCH_ERRORS"  # tf2onnx reads "set" as "no copies", whatever the value
INSTALL = 'pip install -r requirements-export.txt (or pip install -e ".[export]")'


class ExportError(UserError):
  """An export that cannot be made, or whose check failed (the output is not kept)."""


def require(fmt):
  """The modules `fmt` needs, or one line naming the extra that installs them."""
  try:
    return [importlib.import_module(name) for name in EXTRA.get(fmt, ())]
  except ImportError as e:
    raise ExportError(f"--format={fmt} needs {', '.join(EXTRA[fmt])} ({e.name} is not installed): "
                      f"{INSTALL}") from None


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
