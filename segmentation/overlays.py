"""Segmentation's own action in the training loop (Task.make_actions): every eval.overlays_every steps,
the same few evaluation images (the first summaries.max_outputs) beside their truth and the model's
prediction, into TensorBoard (train/, overlays/<i>), so that a run shows its answers on fixed images
change between evaluations. On the chief alone; it reads the weights and changes none."""
import numpy as np

from common.training import actions
from common.training import plots
from segmentation import visualize


def first_examples(eval_dataset, count):
  """[(uint8 image [H, W, 3], class ids [H, W])] of the first `count` images of the evaluation set."""
  examples = []
  for images, labels in eval_dataset:
    examples += list(zip(images.numpy(), labels.numpy()))[:count - len(examples)]
    if len(examples) >= count:
      break
  return examples


def make_overlay_actions(every, eval_dataset, count, predict, class_names, ignore_label, writer):
  """[the action that writes the overlays every `every` steps], or [] when every or count is 0.

  predict: uint8 images [1, H, W, 3] -> logits, the evaluation's; writer: the run's train/ writer
  (summaries.SummaryBudget). The images are read at the first overlay, on the chief alone."""
  if not every or not count:
    return []
  examples = []

  def write_overlays(call):
    examples[:] = examples or first_examples(eval_dataset, count)
    writer.write_images(call.step, {f"overlays/{i}": np.asarray(visualize.figure(
        image, {"truth": label, "prediction": np.argmax(predict(image[None])[0], axis=-1)}, class_names,
        ignore_label, width=plots.TENSORBOARD_BOX[0]))[None] for i, (image, label) in enumerate(examples)})

  return [actions.Action(write_overlays, every=(every,), chief_only=True)]
