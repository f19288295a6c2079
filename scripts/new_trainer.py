"""Copies a trainer under a new name: the start of a trainer of your own.

python scripts/new_trainer.py buildings --from segmentation

Into the repository (--dest, default the one this script is in) it writes buildings/ (segmentation/'s
.py files, importing buildings; its task's NAME, which the SavedModel carries, is "buildings"),
configs/buildings.py (its `trainer` key, which every run's config.json keeps, is "buildings"),
tests/test_buildings.py (a smoke run: trains, exports, the SavedModel named buildings) and
"buildings" in pyproject.toml's packages, so that `pip install -e .` installs it beside the other
trainers, sharing common/ and scripts/ with them.

The names change by token (tokenize), at a precise list of places, never by a blind search: the
package in import statements; strings that are exactly the package or the task's NAME; the config
file's path (configs/x.py) and module (configs.x); the default workdir (runs/x); and the package's
modules named in strings and comments (`python -m segmentation.train`, segmentation/visualize.py).
Prose ("a segmentation model") is left as it is.

A bad name, an unknown --from or a name already taken is one line before anything is written; a
write that fails (a read-only folder, a full disk) or a signal removes what was written.
"""
if not __package__:  # run as a file (python scripts/x.py): this repository's packages first
  import repository_root  # pylint: disable=unused-import

import argparse
import importlib.util
import io
import json
import keyword
import os
import re
import shutil
import signal
import sys
import tokenize

from common.app.trainers import REPO_ROOT
from common.app.trainers import find_trainers

# A package name that is also a valid file name everywhere.
NAME = re.compile(r"[a-z][a-z0-9_]*")
# pyproject.toml's list of packages, one line (a TOML list of strings is JSON).
PACKAGES = re.compile(r"^packages = (\[.*\])$", re.M)

SMOKE_TEST = '''"""The {name} trainer's smoke run (scripts/new_trainer.py wrote it from {source}'s): it trains,
exports, and every file names the trainer {name}."""
import json

from helpers import run_python


def test_{name}_trains_and_exports_under_its_name(tmp_path):
  result = run_python(["-m", "{name}.train", "--config=configs/{name}.py:smoke", "--config.train.num_steps=2",
                       f"--workdir={{tmp_path}}"])
  assert result.returncode == 0, result.stderr[-3000:]
  assert json.load(open(tmp_path / "config.json"))["trainer"] == "{name}"
  assert (tmp_path / "saved_model" / "assets" / "trainer.txt").read_text() == "{name}\\n"
'''


class Refused(Exception):
  """A bad argument or destination: one line, exit code 2."""


class _Stopped(Exception):
  """SIGTERM, raised where the files are being written (as Ctrl-C raises KeyboardInterrupt)."""


def _stop(signum, frame):
  del signum, frame
  raise _Stopped()


def renamer(source, task_name, config_stem, new, modules):
  """text -> text: the token-level renames of the module docstring's list, from the trainer
  `source` (its task's NAME, its config file configs/<config_stem>.py, its module names) to `new`."""
  alternatives = "|".join(map(re.escape, dict.fromkeys((source, task_name, config_stem))))
  modules = "|".join(map(re.escape, modules))
  in_text = [(re.compile(rf"\bconfigs([/.]){re.escape(config_stem)}\b"), rf"configs\g<1>{new}"),
             (re.compile(rf"\bruns/(?:{alternatives})\b"), f"runs/{new}"),
             (re.compile(rf"\b{re.escape(source)}([./])(?=(?:{modules})\b)"), rf"{new}\g<1>")]
  whole = re.compile(rf"""^(['"])(?:{re.escape(source)}|{re.escape(task_name)})\1$""")

  def rename(text):
    edits, previous = [], None  # (line, start column, end column, new text)
    for token in tokenize.generate_tokens(io.StringIO(text).readline):
      replaced = token.string
      if token.type == tokenize.NAME and token.string == source and previous in ("from", "import"):
        replaced = new
      elif token.type in (tokenize.STRING, tokenize.COMMENT):
        replaced = whole.sub(rf"\g<1>{new}\g<1>", replaced)
        for pattern, replacement in in_text:
          replaced = pattern.sub(replacement, replaced)
      if replaced != token.string:
        edits.append((*token.start, token.end[1], replaced, token.end[0]))
      if token.type not in (tokenize.NL, tokenize.NEWLINE, tokenize.COMMENT, tokenize.INDENT, tokenize.DEDENT):
        previous = token.string
    lines = text.splitlines(keepends=True)
    for row, start, end, replaced, end_row in reversed(edits):
      # A string over several lines: its first line's start up to its last line's end.
      lines[row - 1:end_row] = [lines[row - 1][:start] + replaced + lines[end_row - 1][end:]]
    return "".join(lines)

  return rename


def check(name, source, dest):
  """The source's Trainer and pyproject.toml's packages, or Refused naming what is wrong."""
  if not NAME.fullmatch(name) or keyword.iskeyword(name):
    raise Refused(f"{name!r} is not a package name: lower-case letters, digits and _, starting with a "
                  "letter (e.g. buildings)")
  pyproject = os.path.join(dest, "pyproject.toml")
  if not os.path.isfile(pyproject):
    raise Refused(f"--dest={dest} is not a repository of trainers (no pyproject.toml in it)")
  found = {trainer.package: trainer for trainer in find_trainers(dest)}
  if source not in found:
    raise Refused(f"--from={source}: not a trainer of {dest} (its trainers: {', '.join(found) or 'none'})")
  for path in targets(name, dest):
    if os.path.lexists(path):
      raise Refused(f"{path} exists already: choose another name")
  spec = importlib.util.find_spec(name)
  if spec is not None:
    raise Refused(f"{name!r} is already an importable module ({spec.origin or 'a namespace'}): choose "
                  "another name, which neither hides nor is hidden by it")
  try:
    with open(pyproject, encoding="utf-8") as f:
      text = f.read()
  except (OSError, UnicodeDecodeError) as e:
    raise Refused(f"cannot read {pyproject} ({getattr(e, 'strerror', None) or e})") from None
  packages = PACKAGES.search(text)
  if not packages:
    raise Refused(f"{pyproject}: no one-line `packages = [...]` to add {name!r} to")
  return found[source], text, packages


def targets(name, dest):
  """What the command writes: the package, its config file and its smoke test."""
  return (os.path.join(dest, name), os.path.join(dest, "configs", f"{name}.py"),
          os.path.join(dest, "tests", f"test_{name}.py"))


def new_trainer(name, source, dest):
  """Writes the trainer `name`, a copy of `source`, into the repository `dest`; returns what it wrote."""
  trainer, pyproject_text, packages = check(name, source, dest)
  config_stem = trainer.config_module.rpartition(".")[2]
  source_dir = os.path.join(dest, source)
  modules = sorted(file[:-3] for file in os.listdir(source_dir) if file.endswith(".py"))
  rename = renamer(source, trainer.name, config_stem, name, modules)
  package_dir, config_file, test_file = targets(name, dest)
  listed = json.loads(packages.group(1))
  made = []
  try:
    made.append(package_dir)
    os.mkdir(package_dir)
    for module in modules:
      _write(os.path.join(package_dir, f"{module}.py"), rename(_read(os.path.join(source_dir, f"{module}.py"))))
    made.append(config_file)
    _write(config_file, rename(_read(os.path.join(dest, "configs", f"{config_stem}.py"))))
    if not os.path.isdir(os.path.dirname(test_file)):
      made.append(os.path.dirname(test_file))
      os.mkdir(os.path.dirname(test_file))
    made.append(test_file)
    _write(test_file, SMOKE_TEST.format(name=name, source=source))
    listed += [name + package[len(source):] for package in listed
               if package == source or package.startswith(source + ".")]
    pyproject = os.path.join(dest, "pyproject.toml")
    made.append(pyproject + ".tmp")
    _write(pyproject + ".tmp", pyproject_text[:packages.start(1)] + json.dumps(listed) + pyproject_text[packages.end(1):])
    os.replace(pyproject + ".tmp", pyproject)  # swapped in whole, last
  except BaseException:  # an OS error or a signal: nothing is left half made
    for path in reversed(made):
      if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path, ignore_errors=True)
      elif os.path.lexists(path):
        os.remove(path)
    raise
  return package_dir, config_file, test_file


def _read(path):
  with open(path, encoding="utf-8") as f:
    return f.read()


def _write(path, text):
  """Writes text to path; an OS error names path (a full disk fails at the write, without a name)."""
  try:
    with open(path, "w", encoding="utf-8") as f:
      f.write(text)
  except OSError as e:
    raise OSError(e.errno, e.strerror, path) from None


class _Parser(argparse.ArgumentParser):
  def error(self, message):  # one line, not argparse's usage and error
    _fail(f"{message} (python scripts/new_trainer.py NAME --from TRAINER [--dest DIR])")


def _fail(message, code=2):
  print(f"error: {message}", file=sys.stderr, flush=True)
  sys.exit(code)


def main(argv):
  parser = _Parser(description=__doc__.split("\n\n")[0])
  parser.add_argument("name", help="the new trainer's package name, e.g. buildings")
  parser.add_argument("--from", dest="source", required=True, help="the trainer to copy, e.g. segmentation")
  parser.add_argument("--dest", default=REPO_ROOT, help="the repository to add it to (default: this one)")
  args = parser.parse_args(argv)
  previous = signal.signal(signal.SIGTERM, _stop)
  try:
    written = new_trainer(args.name, args.source, os.path.abspath(args.dest))
  except Refused as e:
    _fail(str(e))
  except OSError as e:  # a read-only folder, a full disk
    _fail(f"cannot write {e.filename or args.dest} ({e.strerror or e}); make --dest writable or free "
          "space, then run the command again: nothing was written")
  except (KeyboardInterrupt, _Stopped) as e:
    signum = signal.SIGTERM if isinstance(e, _Stopped) else signal.SIGINT
    _fail(f"interrupted by {signum.name}; nothing was written", 128 + signum)
  finally:
    signal.signal(signal.SIGTERM, previous)
  print(f"wrote {', '.join(written)}; added {args.name} to pyproject.toml's packages: pip install -e . "
        f"installs it, and python -m {args.name}.train --config=configs/{args.name}.py:smoke runs it", flush=True)


if __name__ == "__main__":
  main(sys.argv[1:])
