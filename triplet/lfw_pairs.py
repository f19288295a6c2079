"""Verification pairs in LFW's pairs.txt format: read (each image looked up and checked up front)
and written."""
import collections
import os

from absl import logging

from common.contract.errors import DataError
from common.data import image_checks
from common.data import listing
from common.data import text_inputs


Pair = collections.namedtuple("Pair", ["path_a", "path_b", "is_same"])


def read_pairs(pairs_path, image_root):
  """Parses an LFW pairs file; returns (list of Pair, number of folds).

  The header is "folds pairs_per_fold" (each fold: that many same pairs,
  then as many different pairs) or a single count (one fold). Lines are
  "name idx1 idx2" (same identity) or "name1 idx1 name2 idx2"; image idx of
  name is {image_root}/{name}/{name}_{idx:04d} with an image extension.
  """
  lines = [(n, line.split()) for n, line in text_inputs.read_text_lines(pairs_path, "pairs file")]
  if not lines:
    raise DataError(f"{pairs_path}: empty pairs file")
  num_folds, per_fold = _parse_pairs_header(pairs_path, lines[0][1])
  pairs = [_parse_pair(pairs_path, n, tokens, image_root) for n, tokens in lines[1:]]
  if len(pairs) != 2 * num_folds * per_fold:
    raise DataError(f"{pairs_path}: header promises {num_folds} folds of {2 * per_fold} pairs, "
                    f"the file has {len(pairs)} pairs")
  return pairs, num_folds


def _parse_pairs_header(pairs_path, tokens):
  if len(tokens) not in (1, 2) or not all(t.isdigit() and int(t) > 0 for t in tokens):
    raise DataError(f"{pairs_path}:1: expected a header 'folds pairs_per_fold' or 'pairs', "
                    f"got '{' '.join(tokens)}'")
  return (1, int(tokens[0])) if len(tokens) == 1 else (int(tokens[0]), int(tokens[1]))


def _parse_pair(pairs_path, line_number, tokens, image_root):
  where = f"{pairs_path}:{line_number}"
  if len(tokens) == 3 and tokens[1].isdigit() and tokens[2].isdigit():
    name_a, index_a, name_b, index_b = tokens[0], tokens[1], tokens[0], tokens[2]
  elif len(tokens) == 4 and tokens[1].isdigit() and tokens[3].isdigit():
    name_a, index_a, name_b, index_b = tokens
  else:
    raise DataError(f"{where}: expected 'name idx1 idx2' or 'name1 idx1 name2 idx2', "
                    f"got '{' '.join(tokens)}'")
  return Pair(_pair_image(where, image_root, name_a, int(index_a)),
              _pair_image(where, image_root, name_b, int(index_b)), name_a == name_b)


def _pair_image(where, image_root, name, index):
  stem = os.path.join(image_root, name, f"{name}_{index:04d}")
  for extension in listing.IMAGE_EXTENSIONS:
    for candidate in (stem + extension, stem + extension.upper()):
      if os.path.lexists(candidate):  # a link to nothing too: check_pairs names it
        return candidate
  raise DataError(f"{where}: names image {stem}.* which does not exist (images of the pairs are "
                  "looked up under data.pairs_dir, or data.eval_dir when that is empty)")


def check_pairs(pairs, skip_bad_files=False):
  """Decodes every image of the pairs; returns (the pairs whose images decode, names of skipped images)."""
  paths = sorted({p for pair in pairs for p in pair[:2]})
  good, _, skipped = image_checks.check_files(paths, image_checks.check_image, skip_bad_files)
  if not skipped:
    return pairs, []
  good = set(good)
  kept = [p for p in pairs if p.path_a in good and p.path_b in good]
  logging.warning("dropped %d of %d pairs with an image that does not decode",
                  len(pairs) - len(kept), len(pairs))
  return kept, skipped


def write_pairs_file(path, image_counts, num_folds, per_fold, rng):
  """LFW-format pairs over {identity name: images (numbered 1..n)}: per fold, per_fold same pairs
  (of identities with 2 or more images) then per_fold different ones."""
  names = list(image_counts)
  several = [name for name in names if image_counts[name] >= 2]
  if len(names) < 2 or not several:
    raise ValueError("pairs need at least 2 identities, one with at least 2 images")
  lines = [f"{num_folds}\t{per_fold}"]
  for _ in range(num_folds):
    for _ in range(per_fold):
      name = several[rng.integers(len(several))]
      a, b = rng.choice(image_counts[name], 2, replace=False) + 1
      lines.append(f"{name}\t{a}\t{b}")
    for _ in range(per_fold):
      i, j = rng.choice(len(names), 2, replace=False)
      a, b = (rng.integers(image_counts[names[k]]) + 1 for k in (i, j))
      lines.append(f"{names[i]}\t{a}\t{names[j]}\t{b}")
  with open(path, "w") as f:
    f.write("\n".join(lines) + "\n")
