"""The segmentation network: no checkerboard from its upsampling path."""
import numpy as np
import pytest
import tensorflow as tf

from segmentation import model as model_lib


@pytest.mark.parametrize("widths, output_stride", [((8, 16, 32), 1), ((8, 16, 32), 4)])
def test_uniform_region_has_no_periodic_grid_in_its_prediction(widths, output_stride):
  """Inside a uniform region every pixel sees the same input, so logits and mask must be uniform there.

  A 3x3 Conv2DTranspose of stride 2 sums 1 or 2 taps per row and column depending on the parity of
  the output pixel: its logits alternate with period 2 over any uniform region, which shows in masks
  as a dot grid of every other row and column (issue 9).
  """
  tf.keras.utils.set_random_seed(0)
  model = model_lib.build_model(5, widths, output_stride=output_stride)
  # More than the receptive-field radius (3x3 convolutions, jump doubling per level, twice over for
  # the decoder, all times the stem's stride): padding at the image border cannot reach the interior.
  margin = 2 * output_stride * sum(2 * 2 ** level for level in range(len(widths)))
  size = 2 * margin + 32
  image = np.full([1, size, size, 3], (205, 65, 50), np.uint8)
  logits = model(image, training=False).numpy()[0, margin:-margin, margin:-margin]
  classes = logits.argmax(-1)
  # The mean logits of each of the four (row, column) parities: a period-2 grid makes them differ.
  parities = np.stack([logits[r::2, c::2].mean((0, 1)) for r in (0, 1) for c in (0, 1)])
  spread = np.abs(logits).max()
  assert np.abs(parities - parities[0]).max() <= 1e-4 * spread, parities
  assert np.ptp(logits, axis=(0, 1)).max() <= 1e-4 * spread
  assert np.unique(classes).size == 1, np.unique(classes, return_counts=True)


@pytest.mark.parametrize("context_rates", [(), (2, 3)])
def test_the_context_module_lets_every_pixel_see_the_whole_image(context_rates):
  """A change in one corner reaches the logits at the far corner through the context module's image
  pooling, beyond the reach of the convolutions; without it, it does not reach them."""
  tf.keras.utils.set_random_seed(0)
  widths, output_stride = (8, 16, 32), 2
  model = model_lib.build_model(5, widths, output_stride=output_stride, context_rates=context_rates)
  reach = 2 * output_stride * sum(2 * 2 ** level for level in range(len(widths)))
  reach += output_stride * 2 ** (len(widths) - 1) * max(context_rates, default=0)  # the atrous 3x3
  size = 2 * reach + 64
  rng = np.random.default_rng(0)
  image = rng.integers(0, 256, [1, size, size, 3], dtype=np.uint8)
  changed = image.copy()
  changed[0, :16, :16] = 255 - changed[0, :16, :16]
  far = lambda x: model(x, training=False).numpy()[0, -16:, -16:]  # pylint: disable=unnecessary-lambda-assignment
  difference = np.abs(far(image) - far(changed)).max()
  if context_rates:
    assert difference > 1e-4
  else:
    assert difference == 0.0
