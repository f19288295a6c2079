"""Text inputs (split files, CSVs, labels and pairs files) and what an id listed twice is."""
import csv
import io

from absl import logging

from common.contract.errors import ConfigError
from common.contract.errors import DataError
from common.data.listing import read_file

# data.duplicates: an id listed twice (or in train and eval) is an error, or a warning.
DUPLICATE_MODES = ("error", "warn")


def read_text(path, what):
  """The contents of a UTF-8 text file (a BOM is dropped); a DataError names a missing
  file, a folder, or the first byte that is not UTF-8."""
  contents = read_file(path, what)
  try:
    return contents.decode("utf-8-sig")
  except UnicodeDecodeError as e:
    line = contents.count(b"\n", 0, e.start) + 1
    raise DataError(f"{path}: not UTF-8 text (byte 0x{contents[e.start]:02x} at line {line}); "
                    "save it as UTF-8") from None


def read_text_lines(path, what):
  """[(line number, line)] of the non-blank lines of a UTF-8 text file, line ends stripped.

  Lines are split at \\n only (not at the other breaks str.splitlines knows), so
  that the numbers are those an editor shows.
  """
  lines = [(n, line.rstrip("\r")) for n, line in enumerate(read_text(path, what).split("\n"), start=1)]
  return [(n, line) for n, line in lines if line.strip()]


def read_csv_rows(path, what):
  """[(line number, fields)] of the non-empty rows of a UTF-8 CSV file, fields stripped."""
  reader = csv.reader(io.StringIO(read_text(path, what), newline=""))
  return [(reader.line_num, [field.strip() for field in row]) for row in reader if any(row)]


def check_duplicates_mode(mode):
  """mode (data.duplicates), a ConfigError when it is not one of DUPLICATE_MODES."""
  if mode not in DUPLICATE_MODES:
    raise ConfigError(f"data.duplicates='{mode}' is not one of {', '.join(DUPLICATE_MODES)}")
  return mode


def first_entries(entries, path, what, duplicates, value_name=None):
  """The entries (key, value, line number) of a file whose key comes first.

  A key listed again (with the same value, or with another: a conflict) is a
  DataError naming both lines, or with duplicates="warn" a warning; the first
  entry is kept either way.
  """
  first, kept = {}, []
  for key, value, line in entries:
    if key not in first:
      first[key] = (value, line)
      kept.append((key, value, line))
      continue
    first_value, first_line = first[key]
    if value == first_value:
      message = f"{path}:{line}: {what} '{key}' is listed again (first at line {first_line})"
    else:
      message = (f"{path}:{line}: {what} '{key}' has {value_name} '{value}' here but '{first_value}' "
                 f"at line {first_line}")
    _report_duplicate(message, duplicates, "remove one, or set data.duplicates='warn' to keep the first",
                      "keeping the first")
  return kept


def check_overlap(train, evaluation, what, duplicates):
  """Reports keys both in `train` and `evaluation` ({key: where}, where = "path:line" or a path).

  An example in both splits makes the evaluation measure training images: a
  DataError naming the first, or with duplicates="warn" a warning (both kept).
  """
  both = [key for key in evaluation if key in train]
  if both:
    others = f" ({len(both) - 1} more)" if len(both) > 1 else ""
    message = (f"{evaluation[both[0]]}: {what} '{both[0]}' is in the training split too "
               f"({train[both[0]]}){others}")
    _report_duplicate(message, duplicates,
                      "remove it from one split, or set data.duplicates='warn' to keep both",
                      "kept in both splits")


def _report_duplicate(message, duplicates, fix, kept):
  if duplicates == "error":
    raise DataError(f"{message}; {fix}")
  logging.warning("%s; %s", message, kept)
