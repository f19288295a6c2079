"""Inception V4 as a Keras functional model whose variables carry TF-Slim's names.

Keras layer names may not contain '/', so every layer is named after its TF-Slim
scope (below `InceptionV4/`) with '/' written as '.': the convolution
`Mixed_5b.Branch_0.Conv2d_0a_1x1` holds
`InceptionV4/Mixed_5b/Branch_0/Conv2d_0a_1x1/weights` and the layer
`Mixed_5b.Branch_0.Conv2d_0a_1x1.BatchNorm` holds `.../BatchNorm/beta`,
`moving_mean` and `moving_variance`. `slim_name` derives the TF-Slim name of any
variable from that encoding.

Layers follow TF-Slim's `nets/inception_v4.py` and `inception_utils.py`: every
convolution is conv (no bias) -> BatchNorm (no scale) -> ReLU; padding and
strides are listed in ../shared/fixtures/INCEPTION_V4_SLIM.md.
"""
import functools

import keras
from keras import layers

from common.contract.errors import ConfigError
from common.nn.layers import BatchNorm, l2_regularizer

SCOPE = "InceptionV4"

# The base network's blocks in order, as TF-Slim names its end points.
BLOCK_NAMES = (
    "Conv2d_1a_3x3", "Conv2d_2a_3x3", "Conv2d_2b_3x3",
    "Mixed_3a", "Mixed_4a", "Mixed_5a",
    "Mixed_5b", "Mixed_5c", "Mixed_5d", "Mixed_5e",
    "Mixed_6a",
    "Mixed_6b", "Mixed_6c", "Mixed_6d", "Mixed_6e", "Mixed_6f", "Mixed_6g", "Mixed_6h",
    "Mixed_7a",
    "Mixed_7b", "Mixed_7c", "Mixed_7d",
)
HEAD_SCOPES = (f"{SCOPE}/Logits", f"{SCOPE}/AuxLogits")
MIN_INPUT_SIZE = 75  # Mixed_7d is 1x1 there.
MIN_AUX_INPUT_SIZE = 107  # Mixed_6h is 5x5 there, as large as the aux pool.

_SLIM_VARIABLE_NAMES = {"kernel": "weights", "bias": "biases"}
_END_POINT_LAYERS = {
    "global_pool": "Logits.AvgPool_1a",
    "PreLogitsFlatten": "Logits.PreLogitsFlatten",
    "Logits": "Logits.Logits",
    "AuxLogits": "AuxLogits.Aux_logits",
}
_BATCH_NORM_EPSILON = 1e-3


def slim_name(variable):
  """TF-Slim checkpoint name of a variable of this model, e.g. InceptionV4/Logits/Logits/biases."""
  layer_name, variable_name = variable.path.split("/")[-2:]
  return "/".join([SCOPE, *layer_name.split("."),
                   _SLIM_VARIABLE_NAMES.get(variable_name, variable_name)])


def block_scopes(blocks):
  """TF-Slim scopes of base blocks: an int N means the last N blocks, else block names."""
  if isinstance(blocks, int):
    if not 0 <= blocks <= len(BLOCK_NAMES):
      raise ConfigError(f"number of blocks {blocks} is not in [0, {len(BLOCK_NAMES)}]")
    names = BLOCK_NAMES[len(BLOCK_NAMES) - blocks:]
  else:
    names = tuple(blocks)
    unknown = sorted(set(names) - set(BLOCK_NAMES))
    if unknown:
      raise ConfigError(f"unknown Inception V4 block(s) {unknown}; blocks are {BLOCK_NAMES}")
  return [f"{SCOPE}/{name}" for name in names]


def end_point(model, name):
  """Output tensor of a TF-Slim end point ('Mixed_6h', 'PreLogitsFlatten', ...) of a built model."""
  if name in BLOCK_NAMES and name.startswith("Conv2d"):
    layer_name = f"{name}.Relu"
  else:
    layer_name = _END_POINT_LAYERS.get(name, name)
  return model.get_layer(layer_name).output


def main_logits(outputs):
  """The main logits of the model's outputs ([logits, aux_logits] with the aux head)."""
  return outputs[0] if isinstance(outputs, (list, tuple)) else outputs


def inception_v4(num_classes=1001, input_shape=(299, 299, 3), aux_logits=True,
                 dropout_rate=0.2, weight_decay=4e-5, include_top=True,
                 hidden_units=0, hidden_l2=0.0, hidden_dropout_rate=0.0,
                 logits_stddev=None, batch_norm_decay=0.9997, sync_batch_norm=False, name=SCOPE):
  """Builds Inception V4; outputs logits, or [logits, aux_logits] with the aux head.

  Args:
    num_classes: width of the logits (1001 in the published checkpoint, 0 = background).
    input_shape: (height, width, 3), at least 75x75, or 107x107 with the aux head;
      the aux head matches the checkpoint's shapes at 299x299 only.
    aux_logits: add TF-Slim's auxiliary head on Mixed_6h.
    dropout_rate: dropout before PreLogitsFlatten (TF-Slim keeps 0.8).
    weight_decay: TF-Slim's l2_regularizer scale on kernels, i.e. a loss of
      weight_decay * sum(w**2) / 2.
    include_top: False returns the base only, with Mixed_7d as its output.
    hidden_units: if > 0, a ReLU layer `Logits/Hidden` of this width between
      PreLogitsFlatten and the logits (a fine-tuning head; not in the checkpoint).
    hidden_l2: Keras L2 coefficient (loss hidden_l2 * sum(w**2)) on the hidden kernel.
    hidden_dropout_rate: dropout after the hidden layer.
    logits_stddev: if set, logits kernels start from a truncated normal of this
      stddev; None keeps TF-Slim's Glorot uniform.
    batch_norm_decay: momentum of the BatchNorm moving statistics (TF-Slim's
      inception_arg_scope batch_norm_decay).
    sync_batch_norm: BatchNorm statistics over all replicas' examples in training
      (the same variables, so checkpoints load either way).
    name: Keras model name.
  """
  _check_input_shape(input_shape, aux_logits and include_top)
  conv = functools.partial(_conv_bn_relu, regularizer=_slim_l2(weight_decay),
                           batch_norm_decay=batch_norm_decay, sync_batch_norm=sync_batch_norm)
  inputs = keras.Input(shape=input_shape, name="images")
  net = _stem(inputs, conv)
  for index in range(4):
    net = _block_inception_a(net, f"Mixed_5{'bcde'[index]}", conv)
  net = _block_reduction_a(net, "Mixed_6a", conv)
  for index in range(7):
    net = _block_inception_b(net, f"Mixed_6{'bcdefgh'[index]}", conv)
  mixed_6h = net
  net = _block_reduction_b(net, "Mixed_7a", conv)
  for index in range(3):
    net = _block_inception_c(net, f"Mixed_7{'bcd'[index]}", conv)
  if not include_top:
    return keras.Model(inputs, net, name=name)

  logits_initializer = _logits_initializer(logits_stddev)
  logits = _logits_head(net, num_classes, dropout_rate, weight_decay, hidden_units,
                        hidden_l2, hidden_dropout_rate, logits_initializer)
  if not aux_logits:
    return keras.Model(inputs, logits, name=name)
  aux = _aux_logits_head(mixed_6h, num_classes, conv, weight_decay, logits_initializer)
  return keras.Model(inputs, [logits, aux], name=name)


def _check_input_shape(input_shape, aux_logits):
  if len(input_shape) != 3 or input_shape[2] != 3:
    raise ConfigError(f"Inception V4 input_shape {tuple(input_shape)} is not (height, width, 3)")
  minimum = MIN_AUX_INPUT_SIZE if aux_logits else MIN_INPUT_SIZE
  if any(size is None or size < minimum for size in input_shape[:2]):
    with_aux = " with the aux head" if aux_logits else ""
    raise ConfigError(f"Inception V4 input {input_shape[0]}x{input_shape[1]} is smaller "
                      f"than the minimum {minimum}x{minimum}{with_aux}")


def _layer_name(scope):
  return scope.replace("/", ".")


def _slim_l2(weight_decay):
  return l2_regularizer(weight_decay / 2)  # slim's tf.nn.l2_loss halves the squared norm


def _logits_initializer(stddev):
  if stddev is None:
    return "glorot_uniform"
  return keras.initializers.TruncatedNormal(stddev=stddev)


def _conv_bn_relu(x, filters, kernel_size, scope, *, regularizer, batch_norm_decay, sync_batch_norm,
                  strides=1, padding="same"):
  # Slim's variance_scaling_initializer() default: He, fan-in, truncated normal.
  x = layers.Conv2D(
      filters, kernel_size, strides=strides, padding=padding, use_bias=False,
      kernel_initializer=keras.initializers.VarianceScaling(2.0, "fan_in", "truncated_normal"),
      kernel_regularizer=regularizer, name=_layer_name(scope))(x)
  x = BatchNorm(
      momentum=batch_norm_decay, epsilon=_BATCH_NORM_EPSILON, scale=False,
      synchronized=sync_batch_norm, name=_layer_name(f"{scope}/BatchNorm"))(x)
  return layers.ReLU(name=_layer_name(f"{scope}/Relu"))(x)


def _max_pool(x, scope):
  return layers.MaxPooling2D(3, strides=2, padding="valid", name=_layer_name(scope))(x)


def _avg_pool_same(x, scope):
  return layers.AveragePooling2D(3, strides=1, padding="same", name=_layer_name(scope))(x)


def _concat(branches, scope):
  return layers.Concatenate(axis=-1, name=_layer_name(scope))(branches)


def _stem(x, conv):
  x = conv(x, 32, 3, "Conv2d_1a_3x3", strides=2, padding="valid")
  x = conv(x, 32, 3, "Conv2d_2a_3x3", padding="valid")
  x = conv(x, 64, 3, "Conv2d_2b_3x3")
  x = _concat([
      _max_pool(x, "Mixed_3a/Branch_0/MaxPool_0a_3x3"),
      conv(x, 96, 3, "Mixed_3a/Branch_1/Conv2d_0a_3x3", strides=2, padding="valid"),
  ], "Mixed_3a")
  branch_0 = conv(x, 64, 1, "Mixed_4a/Branch_0/Conv2d_0a_1x1")
  branch_0 = conv(branch_0, 96, 3, "Mixed_4a/Branch_0/Conv2d_1a_3x3", padding="valid")
  branch_1 = conv(x, 64, 1, "Mixed_4a/Branch_1/Conv2d_0a_1x1")
  branch_1 = conv(branch_1, 64, (1, 7), "Mixed_4a/Branch_1/Conv2d_0b_1x7")
  branch_1 = conv(branch_1, 64, (7, 1), "Mixed_4a/Branch_1/Conv2d_0c_7x1")
  branch_1 = conv(branch_1, 96, 3, "Mixed_4a/Branch_1/Conv2d_1a_3x3", padding="valid")
  x = _concat([branch_0, branch_1], "Mixed_4a")
  return _concat([
      conv(x, 192, 3, "Mixed_5a/Branch_0/Conv2d_1a_3x3", strides=2, padding="valid"),
      _max_pool(x, "Mixed_5a/Branch_1/MaxPool_1a_3x3"),
  ], "Mixed_5a")


def _block_inception_a(x, scope, conv):
  branch_0 = conv(x, 96, 1, f"{scope}/Branch_0/Conv2d_0a_1x1")
  branch_1 = conv(x, 64, 1, f"{scope}/Branch_1/Conv2d_0a_1x1")
  branch_1 = conv(branch_1, 96, 3, f"{scope}/Branch_1/Conv2d_0b_3x3")
  branch_2 = conv(x, 64, 1, f"{scope}/Branch_2/Conv2d_0a_1x1")
  branch_2 = conv(branch_2, 96, 3, f"{scope}/Branch_2/Conv2d_0b_3x3")
  branch_2 = conv(branch_2, 96, 3, f"{scope}/Branch_2/Conv2d_0c_3x3")
  branch_3 = _avg_pool_same(x, f"{scope}/Branch_3/AvgPool_0a_3x3")
  branch_3 = conv(branch_3, 96, 1, f"{scope}/Branch_3/Conv2d_0b_1x1")
  return _concat([branch_0, branch_1, branch_2, branch_3], scope)


def _block_reduction_a(x, scope, conv):
  branch_0 = conv(x, 384, 3, f"{scope}/Branch_0/Conv2d_1a_3x3", strides=2, padding="valid")
  branch_1 = conv(x, 192, 1, f"{scope}/Branch_1/Conv2d_0a_1x1")
  branch_1 = conv(branch_1, 224, 3, f"{scope}/Branch_1/Conv2d_0b_3x3")
  branch_1 = conv(branch_1, 256, 3, f"{scope}/Branch_1/Conv2d_1a_3x3", strides=2, padding="valid")
  branch_2 = _max_pool(x, f"{scope}/Branch_2/MaxPool_1a_3x3")
  return _concat([branch_0, branch_1, branch_2], scope)


def _block_inception_b(x, scope, conv):
  branch_0 = conv(x, 384, 1, f"{scope}/Branch_0/Conv2d_0a_1x1")
  branch_1 = conv(x, 192, 1, f"{scope}/Branch_1/Conv2d_0a_1x1")
  branch_1 = conv(branch_1, 224, (1, 7), f"{scope}/Branch_1/Conv2d_0b_1x7")
  branch_1 = conv(branch_1, 256, (7, 1), f"{scope}/Branch_1/Conv2d_0c_7x1")
  branch_2 = conv(x, 192, 1, f"{scope}/Branch_2/Conv2d_0a_1x1")
  branch_2 = conv(branch_2, 192, (7, 1), f"{scope}/Branch_2/Conv2d_0b_7x1")
  branch_2 = conv(branch_2, 224, (1, 7), f"{scope}/Branch_2/Conv2d_0c_1x7")
  branch_2 = conv(branch_2, 224, (7, 1), f"{scope}/Branch_2/Conv2d_0d_7x1")
  branch_2 = conv(branch_2, 256, (1, 7), f"{scope}/Branch_2/Conv2d_0e_1x7")
  branch_3 = _avg_pool_same(x, f"{scope}/Branch_3/AvgPool_0a_3x3")
  branch_3 = conv(branch_3, 128, 1, f"{scope}/Branch_3/Conv2d_0b_1x1")
  return _concat([branch_0, branch_1, branch_2, branch_3], scope)


def _block_reduction_b(x, scope, conv):
  branch_0 = conv(x, 192, 1, f"{scope}/Branch_0/Conv2d_0a_1x1")
  branch_0 = conv(branch_0, 192, 3, f"{scope}/Branch_0/Conv2d_1a_3x3", strides=2, padding="valid")
  branch_1 = conv(x, 256, 1, f"{scope}/Branch_1/Conv2d_0a_1x1")
  branch_1 = conv(branch_1, 256, (1, 7), f"{scope}/Branch_1/Conv2d_0b_1x7")
  branch_1 = conv(branch_1, 320, (7, 1), f"{scope}/Branch_1/Conv2d_0c_7x1")
  branch_1 = conv(branch_1, 320, 3, f"{scope}/Branch_1/Conv2d_1a_3x3", strides=2, padding="valid")
  branch_2 = _max_pool(x, f"{scope}/Branch_2/MaxPool_1a_3x3")
  return _concat([branch_0, branch_1, branch_2], scope)


def _block_inception_c(x, scope, conv):
  branch_0 = conv(x, 256, 1, f"{scope}/Branch_0/Conv2d_0a_1x1")
  branch_1 = conv(x, 384, 1, f"{scope}/Branch_1/Conv2d_0a_1x1")
  branch_1 = _concat([
      conv(branch_1, 256, (1, 3), f"{scope}/Branch_1/Conv2d_0b_1x3"),
      conv(branch_1, 256, (3, 1), f"{scope}/Branch_1/Conv2d_0c_3x1"),
  ], f"{scope}/Branch_1/Concat")
  branch_2 = conv(x, 384, 1, f"{scope}/Branch_2/Conv2d_0a_1x1")
  branch_2 = conv(branch_2, 448, (3, 1), f"{scope}/Branch_2/Conv2d_0b_3x1")
  branch_2 = conv(branch_2, 512, (1, 3), f"{scope}/Branch_2/Conv2d_0c_1x3")
  branch_2 = _concat([
      conv(branch_2, 256, (1, 3), f"{scope}/Branch_2/Conv2d_0d_1x3"),
      conv(branch_2, 256, (3, 1), f"{scope}/Branch_2/Conv2d_0e_3x1"),
  ], f"{scope}/Branch_2/Concat")
  branch_3 = _avg_pool_same(x, f"{scope}/Branch_3/AvgPool_0a_3x3")
  branch_3 = conv(branch_3, 256, 1, f"{scope}/Branch_3/Conv2d_0b_1x1")
  return _concat([branch_0, branch_1, branch_2, branch_3], scope)


def _logits_head(net, num_classes, dropout_rate, weight_decay, hidden_units, hidden_l2,
                 hidden_dropout_rate, logits_initializer):
  # A pool as large as the map, as slim does for a static shape (8x8 at 299).
  net = layers.AveragePooling2D(net.shape[1:3], padding="valid", name="Logits.AvgPool_1a")(net)
  net = layers.Dropout(dropout_rate, name="Logits.Dropout_1b")(net)
  net = layers.Flatten(name="Logits.PreLogitsFlatten")(net)
  if hidden_units:
    net = layers.Dense(hidden_units, activation="relu",
                       kernel_regularizer=keras.regularizers.L2(hidden_l2) if hidden_l2 else None,
                       name="Logits.Hidden")(net)
    net = layers.Dropout(hidden_dropout_rate, name="Logits.Hidden.Dropout")(net)
  # float32 logits under a mixed-precision policy.
  return layers.Dense(num_classes, kernel_initializer=logits_initializer,
                      kernel_regularizer=_slim_l2(weight_decay), dtype="float32",
                      name="Logits.Logits")(net)


def _aux_logits_head(mixed_6h, num_classes, conv, weight_decay, logits_initializer):
  aux = layers.AveragePooling2D(5, strides=3, padding="valid",
                                name="AuxLogits.AvgPool_1a_5x5")(mixed_6h)
  aux = conv(aux, 128, 1, "AuxLogits/Conv2d_1b_1x1")
  # A kernel as large as its input: 5x5 at 299.
  aux = conv(aux, 768, tuple(aux.shape[1:3]), "AuxLogits/Conv2d_2a", padding="valid")
  aux = layers.Flatten(name="AuxLogits.Flatten")(aux)
  return layers.Dense(num_classes, kernel_initializer=logits_initializer,
                      kernel_regularizer=_slim_l2(weight_decay), dtype="float32",
                      name="AuxLogits.Aux_logits")(aux)
