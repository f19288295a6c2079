"""What the trainers' data sources share: settings a source needs, the cache of synthetic sets, and
the split of train and eval by file-name hash."""
import collections
import os
import shutil
import tempfile
import zlib

from absl import logging

from common.contract.errors import ConfigError


def required(value, key, source):
  """value of data.`key`, which data.source=`source` needs; a ConfigError when it is empty."""
  if not value:
    raise ConfigError(f"data.{key} must be set for data.source='{source}'")
  return value


def synthetic_cache_dir(cache_dir, workdir):
  """Where synthetic data is written: cache_dir (data.cache_dir), else <workdir>/data."""
  cache_dir = cache_dir or (os.path.join(workdir, "data") if workdir else None)
  if not cache_dir:
    raise ConfigError("data.cache_dir (or a workdir) is needed to write the synthetic data")
  return cache_dir


def write_once(cache_dir, name, write_fn):
  """cache_dir/name, written by write_fn(folder) the first time only; returns its path.

  The set is written to a temporary folder and renamed, so an interrupted run
  leaves no half set; the name should hold every parameter of the set.
  """
  root = os.path.join(cache_dir, name)
  if not os.path.isdir(root):
    os.makedirs(cache_dir, exist_ok=True)
    staging = tempfile.mkdtemp(prefix=f".{name}-", dir=cache_dir)
    try:
      write_fn(staging)
    except BaseException:  # a refusal or an interrupt: no half set left behind either
      shutil.rmtree(staging, ignore_errors=True)
      raise
    try:
      os.rename(staging, root)
    except OSError:  # another process wrote the same set first
      shutil.rmtree(staging)
    logging.info("wrote %s", root)
  return root


def split_by_hash(examples, eval_fraction, path_fn, group_fn=None):
  """(train, eval): in each group, the examples whose file names hash lowest go to eval.

  The split depends on file names only, not on the seed or the other files,
  so runs with different seeds are evaluated on the same images. Each group
  (a class, say; one group if group_fn is None) of two or more examples gives
  at least one to eval and keeps at least one for training.
  """
  groups = collections.defaultdict(list)
  for example in examples:
    groups[group_fn(example) if group_fn else None].append(example)
  eval_set = set()
  for members in groups.values():
    if len(members) < 2:
      continue
    num_eval = min(max(int(round(len(members) * eval_fraction)), 1), len(members) - 1)
    ranked = sorted(members, key=lambda e: zlib.crc32(os.path.basename(path_fn(e)).encode()))
    eval_set.update(ranked[:num_eval])
  return [e for e in examples if e not in eval_set], [e for e in examples if e in eval_set]
