"""Classification metrics: top-1, top-5, loss, per-class accuracy and the confusion-matrix report."""
import csv
import dataclasses
import os

import numpy as np
from PIL import Image
from PIL import ImageDraw
from PIL import ImageFont
import tensorflow as tf

# Side of the confusion-matrix grid in the PNG, about; every class gets a square of whole pixels.
_CONFUSION_PNG_SIZE = 480
# Class names label the axes up to this many classes (ids beyond, at a readable stride).
_MAX_NAMED_CLASSES = 20
_LABEL_CHARS = 16  # longer names are cut
_MIN_LABEL_SPACING = 12  # pixels between two axis labels


@dataclasses.dataclass
class EvalResult:
  """Metrics of one pass over an evaluation set."""
  top1: float
  top5: float
  loss: float
  confusion: np.ndarray  # [true class, predicted class] counts

  @property
  def per_class_accuracy(self):
    """Recall of each class; NaN for a class without evaluation images."""
    totals = self.confusion.sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
      return np.diag(self.confusion) / totals

  def scalars(self):
    return {"top1": self.top1, "top5": self.top5, "loss": self.loss,
            "mean_per_class_accuracy": float(np.nanmean(self.per_class_accuracy))}


def top_k_hits(labels, logits, k):
  """Booleans [B]: whether each label is among the k largest logits (k capped at the class count)."""
  logits = np.asarray(logits)
  k = min(k, logits.shape[-1])
  # The label's rank: how many classes score strictly higher. Ties count in its favor, as in tf.math.in_top_k.
  label_scores = np.take_along_axis(logits, np.asarray(labels)[:, None], axis=1)
  return (logits > label_scores).sum(axis=1) < k


def chance_top1(confusion, train_counts):
  """Top-1 of two guessers that never look at the image, over the same evaluation images.

  chance_top1_majority always answers the training set's most frequent class;
  chance_top1_uniform answers a class at random (1 / num_classes).
  """
  per_class = confusion.sum(axis=1)
  return {"chance_top1_majority": float(per_class[int(np.argmax(train_counts))] / per_class.sum()),
          "chance_top1_uniform": 1.0 / len(confusion)}


def confusion_matrix(labels, predictions, num_classes):
  return np.bincount(np.asarray(labels) * num_classes + np.asarray(predictions),
                     minlength=num_classes * num_classes).reshape(num_classes, num_classes)


def evaluate(predict_fn, dataset, num_classes):
  """One pass over (images, labels) batches -> EvalResult; predict_fn(images) -> logits."""
  confusion = np.zeros([num_classes, num_classes], np.int64)
  hits1 = hits5 = count = 0
  loss_sum = 0.0
  for images, labels in dataset:
    logits = predict_fn(images)
    labels = labels.numpy()
    loss_sum += float(tf.reduce_sum(
        tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits)))
    logits = logits.numpy()
    hits1 += int(top_k_hits(labels, logits, 1).sum())
    hits5 += int(top_k_hits(labels, logits, 5).sum())
    count += len(labels)
    confusion += confusion_matrix(labels, logits.argmax(axis=1), num_classes)
  if not count:
    raise ValueError("the evaluation dataset is empty")
  return EvalResult(top1=hits1 / count, top5=hits5 / count, loss=loss_sum / count, confusion=confusion)


def write_report(result, directory, class_names):
  """Writes per_class_accuracy.csv, confusion_matrix.csv (rows: true class) and confusion_matrix.png.

  Returns the paths written.
  """
  os.makedirs(directory, exist_ok=True)
  per_class, matrix, image = (os.path.join(directory, name) for name in (
      "per_class_accuracy.csv", "confusion_matrix.csv", "confusion_matrix.png"))
  with open(per_class, "w", newline="") as f:
    writer = csv.writer(f)
    writer.writerow(["id", "name", "images", "accuracy"])
    for class_id, (name, images, accuracy) in enumerate(
        zip(class_names, result.confusion.sum(axis=1), result.per_class_accuracy)):
      writer.writerow([class_id, name, int(images), "" if np.isnan(accuracy) else f"{accuracy:.6f}"])
  with open(matrix, "w", newline="") as f:
    writer = csv.writer(f)
    writer.writerow(["true \\ predicted", *class_names])
    for name, row in zip(class_names, result.confusion):
      writer.writerow([name, *(int(c) for c in row)])
  confusion_image(result.confusion, class_names).save(image)
  return [per_class, matrix, image]


def confusion_grid(confusion):
  """Row-normalized confusion matrix as an RGB array: white 0, dark blue 1; true classes down."""
  totals = np.maximum(confusion.sum(axis=1, keepdims=True), 1)
  fraction = confusion / totals
  white, blue = np.array([255, 255, 255]), np.array([8, 48, 107])
  pixels = (white + fraction[..., None] * (blue - white)).astype(np.uint8)
  cell = max(_CONFUSION_PNG_SIZE // len(confusion), 1)
  return np.kron(pixels, np.ones((cell, cell, 1), np.uint8))


def axis_labels(class_names, cell):
  """{class id: label}: every name for a few classes; else ids, at a stride that leaves room."""
  if len(class_names) <= _MAX_NAMED_CLASSES and cell >= _MIN_LABEL_SPACING:
    return {i: str(name)[:_LABEL_CHARS] for i, name in enumerate(class_names)}
  stride = next(s for s in (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 10**9)
                if s * cell >= _MIN_LABEL_SPACING)
  return {i: str(i) for i in range(0, len(class_names), stride)}


def confusion_image(confusion, class_names):
  """The confusion grid with the classes on both axes (true down the left, predicted along the top)."""
  grid = confusion_grid(confusion)
  cell = grid.shape[0] // len(confusion)
  labels = axis_labels(class_names, cell)
  font = ImageFont.load_default()
  width = max(int(font.getlength(text)) for text in labels.values()) + 6
  title = "rows: true class, columns: predicted" + ("" if len(labels) == len(class_names) and
                                                     labels[0] == str(class_names[0])[:_LABEL_CHARS]
                                                     else " (class ids, names in labels.txt)")
  top = width + 16  # the title's line, then the rotated column labels
  image = Image.new("RGB", (width + grid.shape[1] + 4, top + grid.shape[0] + 4), "white")
  image.paste(Image.fromarray(grid), (width, top))
  draw = ImageDraw.Draw(image)
  draw.text((2, 2), title, fill="black", font=font)
  column_labels = Image.new("RGB", (width, grid.shape[1]), "white")  # drawn across, then turned
  column_draw = ImageDraw.Draw(column_labels)
  for class_id, text in labels.items():
    middle = class_id * cell + cell // 2
    draw.text((width - 3, top + middle), text, fill="black", font=font, anchor="rm")
    column_draw.text((3, middle), text, fill="black", font=font, anchor="lm")
  image.paste(column_labels.rotate(90, expand=True), (width, 16))
  return image
