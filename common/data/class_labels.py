"""Class labels of classification data: TF-Slim labels files, files of class names, `id,label`
CSVs, label strings to class ids, and the training images per class (its log lines and CSV)."""
import csv
import io
import os

import numpy as np

from common.contract.errors import DataError
from common.data import listing
from common.data import text_inputs


def labels_file_text(class_names):
  """TF-Slim's labels file: one `<id>:<name>` line per class."""
  return "".join(f"{class_id}:{name}\n" for class_id, name in enumerate(class_names))


def read_labels_file(path, duplicates="error"):
  """Class names by id from a TF-Slim labels file; ids must be 0..N-1 (any order).

  An id or a name listed twice is a DataError, or with duplicates="warn" a
  warning (the first id and name are kept).
  """
  entries = []
  for line_number, line in text_inputs.read_text_lines(path, "labels file"):
    class_id, sep, name = line.partition(":")
    if not sep or not class_id.strip().isdigit() or not name.strip():
      raise DataError(f"{path}:{line_number}: expected '<id>:<name>', got {line.strip()!r}")
    entries.append((int(class_id), name, line_number))
  if not entries:
    raise DataError(f"{path}: no '<id>:<name>' lines (the file is empty)")
  kept = text_inputs.first_entries(entries, path, "class id", duplicates, value_name="name")
  text_inputs.first_entries([(name, class_id, n) for class_id, name, n in kept], path, "class name",
                            duplicates, value_name="id")
  names = {class_id: name for class_id, name, _ in kept}
  if sorted(names) != list(range(len(names))):
    missing = sorted(set(range(max(names, default=-1) + 1)) - set(names))
    raise DataError(f"{path}: class ids must be 0..{len(names) - 1}; id {missing[0]} is missing")
  return [names[i] for i in range(len(names))]


def read_label_csv(path, images_dir, extension, duplicates="error"):
  """[(image path, label string, line number)] of a CSV of `id,label` rows (a header starting with 'id'
  is skipped).

  The image of id X is <images_dir>/X<extension>, as in the dog-breed labels.csv.
  An empty field, a missing image or an id listed twice (with duplicates="warn":
  a warning, the first row kept) is a DataError naming the line.
  """
  entries = []
  for line_number, row in text_inputs.read_csv_rows(path, "CSV file"):
    if len(row) != 2:
      one_hot = " (one-hot columns are not labels)" if len(row) > 2 else ""
      raise DataError(f"{path}:{line_number}: {len(row)} columns; expected 'id,label' with one "
                      f"class name or id per image{one_hot}")
    if not entries and row[0].lower() == "id":
      continue
    image_id, label = row
    if not image_id or not label:
      raise DataError(f"{path}:{line_number}: empty {'label' if image_id else 'id'} in {','.join(row)!r}")
    entries.append((image_id, label, line_number))
  if not entries:
    raise DataError(f"{path}: no rows")
  rows = []
  for image_id, label, line_number in text_inputs.first_entries(entries, path, "id", duplicates, "label"):
    image = os.path.join(images_dir, image_id + extension)
    if not os.path.lexists(image):  # a link to nothing passes, for the image check to name it
      raise DataError(f"{image}: no such file ({path}:{line_number}; data.image_extension is "
                      f"'{extension}'{_other_extension_hint(image, extension)})")
    rows.append((image, label, line_number))
  return rows


def _other_extension_hint(image, extension):
  stem = image[:-len(extension)] if extension else image
  for other in listing.IMAGE_EXTENSIONS:
    for candidate in (other, other.upper()):
      if candidate != extension and os.path.isfile(stem + candidate):
        return f"; {os.path.basename(stem + candidate)} exists: set data.image_extension='{candidate}'"
  return ""


def labels_to_ids(labels, class_names, num_classes, path, lines):
  """Label strings of `path` (at `lines`) -> (class names, ids): names of `class_names`, or integer ids.

  Without class_names, integer labels are ids (0..num_classes-1) and any other
  labels are names, numbered in sorted order.
  """
  if not class_names and not all(is_int(label) for label in labels):
    class_names = sorted(set(labels))
  hint = f"data.num_classes={num_classes}"
  if class_names:
    index = {}
    for i, name in enumerate(class_names):
      index.setdefault(name, i)  # a name listed twice (duplicates="warn") is its first id
    ids = []
    for label, line in zip(labels, lines):
      if label not in index and not is_int(label):
        raise DataError(f"{path}:{line}: label '{label}' is not a class of data.labels_file")
      ids.append(index[label] if label in index else int(label))
    num_classes = len(class_names)
    hint = f"data.labels_file names {num_classes} classes"
  else:
    ids = [int(label) for label in labels]
    class_names = [str(i) for i in range(num_classes)]
  for class_id, line in zip(ids, lines):
    error = label_error(class_id, num_classes, hint)
    if error:
      raise DataError(f"{path}:{line}: {error}")
  return class_names, ids


def label_error(class_id, num_classes, hint):
  """What is wrong with a class id outside 0..num_classes-1 (hint: where num_classes comes from), or None."""
  if not 0 <= class_id < num_classes:
    return f"label {class_id} is out of range; expected 0..{num_classes - 1} ({hint})"
  return None


def is_int(text):
  return text.lstrip("-").isdigit()


def count_labels(labels, num_classes):
  return np.bincount(np.asarray(labels, np.int64), minlength=num_classes)


def class_balance_report(counts, class_names, min_count):
  """Lines for the log: the spread of images per class and every class under min_count."""
  counts = np.asarray(counts)
  lines = [f"class balance: {len(counts)} classes, {counts.min()} to {counts.max()} training "
           f"images per class (median {np.median(counts):g})"]
  rare = [i for i in np.argsort(counts, kind="stable") if counts[i] < min_count]
  if rare:
    lines.append(f"{len(rare)} classes have fewer than {min_count} training images: " +
                 ", ".join(f"{class_names[i]} ({counts[i]})" for i in rare))
  return "\n".join(lines)


def class_balance_csv(counts, class_names, min_count):
  """The text of class_balance.csv: training images per class, and whether under min_count."""
  text = io.StringIO()
  writer = csv.writer(text)
  writer.writerow(["id", "name", "train_images", "under_min_count"])
  for class_id, (name, count) in enumerate(zip(class_names, counts)):
    writer.writerow([class_id, name, int(count), int(count < min_count)])
  return text.getvalue()


def read_class_balance(path):
  """The training images per class of a class_balance.csv (class_balance_csv's), in class id order; a
  file without rows, cut short or edited is a DataError naming it (and the line)."""
  rows = text_inputs.read_csv_rows(path, "class balance file")
  header = ["id", "name", "train_images", "under_min_count"]
  if not rows or rows[0][1] != header:
    raise DataError(f"{path}: the first line is not the header {','.join(header)}")
  counts = []
  for line_number, row in rows[1:]:
    if len(row) != len(header) or row[0] != str(len(counts)) or not row[2].isdigit():
      raise DataError(f"{path}:{line_number}: expected '{len(counts)},<name>,<images>,<0 or 1>', got "
                      f"{','.join(row)!r}")
    counts.append(int(row[2]))
  if not counts:
    raise DataError(f"{path}: a header and no classes")
  return np.array(counts, np.int64)


def read_class_names(path, num_classes):
  """The names of a file of one class name per line, in class id order (0 first)."""
  names = tuple(line.strip() for _, line in text_inputs.read_text_lines(path, "class names file"))
  if len(names) != num_classes:
    raise DataError(f"{path}: {len(names)} class names for data.num_classes={num_classes}; "
                    "give one name per class, one per line")
  return names
