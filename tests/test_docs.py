"""The documentation: a short README, a config key table that cannot drift from the configs, every
repository path it names present, and the site built by `mkdocs build --strict` (broken links,
missing pages and anchors fail).

The pages are helpers.DOC_FILES: README.md, each trainer's README.md, docs/*.md.
"""
import importlib
import os
import re
import subprocess
import sys

import pytest

import helpers
from common.contract import config as shared_config

README_MAX_LINES = 150
FIRST_SCREEN_LINES = 25
# The trainers' config files the key table documents, by module name, in its column order.
CONFIG_MODULES = ("segmentation", "triplet", "inception_v4")
TABLE_START = "<!-- config keys: generated from the config files; tests/test_docs.py checks it -->"
TABLE_END = "<!-- end of config keys -->"
ASSIGNMENT = re.compile(r"^\s*config\.([\w.]+)\s*=\s*(.*)$")
# The first folders and files of the repository a documented path may start with.
REPOSITORY_ROOTS = ("common/", "segmentation/", "triplet/", "inception_finetune/", "configs/", "scripts/",
                    "deploy/", "tests/", "docs/", ".ci/")


def test_readme_is_read_in_five_minutes():
  """At most README_MAX_LINES lines; its first screen holds the set-up commands and the trainers' table."""
  lines = helpers.read_doc("README.md").splitlines()
  assert len(lines) <= README_MAX_LINES, f"README.md: {len(lines)} lines, over {README_MAX_LINES}"
  first_screen = "\n".join(lines[:FIRST_SCREEN_LINES])
  assert "pip install -r requirements.txt && python -m segmentation.train" in first_screen
  assert "python -m pytest -q" in first_screen
  assert "| trainer | command |" in first_screen


def key_meanings(path):
  """{dotted key: meaning} of a config file: the comment ending the key's line, else the comment
  lines right above it."""
  found, block = {}, []
  with open(os.path.join(helpers.REPO_ROOT, path), encoding="utf-8") as f:
    for line in f:
      stripped = line.strip()
      if stripped.startswith("#"):
        block.append(stripped.lstrip("#").strip())
        continue
      match = ASSIGNMENT.match(line)
      if match:
        trailing = re.search(r"\s#\s*(.*)$", match.group(2))
        found[match.group(1)] = (trailing.group(1) if trailing else " ".join(block)).strip()
      block = []
  return found


def meaning(key, sources):
  """The key's own comment in the first source that has one; a key no source assigns alone (one
  of a dict written in one line) takes its section's."""
  parts = key.split(".")
  for end in range(len(parts), 0, -1):
    name = ".".join(parts[:end])
    for source in sources:
      if source.get(name):
        return source[name]
    if any(name in source for source in sources):
      return ""
  return ""


def cell(value):
  text = repr(value) if isinstance(value, str) else str(value)
  return f"`{text}`" if text and "|" not in text else text.replace("|", "\\|") or " "


def config_key_table():
  """The Markdown table of every key of the trainers' configs: its default in each (default preset)
  and its meaning, from the comments of common/contract/config.py and configs/<trainer>.py."""
  shared = key_meanings("common/contract/config.py")
  defaults, meanings = {}, {}  # meanings: {key: {meaning: [trainers]}}
  for name in CONFIG_MODULES:
    config = importlib.import_module(f"configs.{name}").get_config()
    own = key_meanings(f"configs/{name}.py")
    keys = shared_config.flatten_keys(config)
    defaults[name] = {key: shared_config.get_value(config, key) for key in keys}
    for key in keys:
      meanings.setdefault(key, {}).setdefault(meaning(key, (own, shared)), []).append(name)
  rows = ["| key | " + " | ".join(f"`{name}`" for name in CONFIG_MODULES) + " | meaning |",
          "|---|" + "---|" * len(CONFIG_MODULES) + "---|"]
  for key, by_meaning in sorted(meanings.items()):
    values = [cell(defaults[name][key]) if key in defaults[name] else "-" for name in CONFIG_MODULES]
    # Where the trainers' files say different things of one key, each says its own.
    said = next(iter(by_meaning)) if len(by_meaning) == 1 else "; ".join(
        f"{', '.join(names)}: {text}" for text, names in by_meaning.items())
    rows.append(f"| `{key}` | " + " | ".join(values) + f" | {said.replace('|', chr(92) + '|')} |")
  return "\n".join(rows)


def test_every_config_key_has_a_meaning():
  missing = [line.split("|")[1].strip() for line in config_key_table().splitlines()[2:]
             if not line.rstrip(" |").rsplit("|", 1)[1].strip() or re.search(r": (;|$)", line.rstrip(" |"))]
  assert not missing, ("config keys without a comment saying what they mean (write one at the end of "
                       f"the key's line, or above it, in its config file): {missing}")


def test_config_key_table_in_the_docs_is_the_configs(tmp_path):
  text = helpers.read_doc("docs/configs.md")
  assert TABLE_START in text and TABLE_END in text, f"docs/configs.md: no {TABLE_START!r} ... {TABLE_END!r}"
  shown = text.split(TABLE_START, 1)[1].split(TABLE_END, 1)[0].strip()
  current = config_key_table()
  if shown != current:
    (tmp_path / "config_keys.md").write_text(current + "\n", encoding="utf-8")
    pytest.fail(f"docs/configs.md's key table differs from the config files: replace it (between its "
                f"markers) with {tmp_path / 'config_keys.md'}")


def named_paths(text):
  """The repository paths a page names: `code` spans starting with a repository folder, less
  placeholders and the files of the docs' example trainer (which the user's copy writes)."""
  example = helpers.readme_command("python scripts/new_trainer.py")[1]
  paths = set()
  for span in re.findall(r"`([^`\s]+)`", text):
    span = span.split("::")[0]
    if span.startswith(REPOSITORY_ROOTS) and not re.search(rf"[<>*{{}}]|\.\.\.|{example}", span):
      paths.add(span)
  return paths


def tree_paths(text):
  """The files the architecture page's tree names, each under the folder of its entry: a line
  starting `folder/` (a top folder) or `  folder/` (a folder of common/); `<trainer>/` entries are
  checked in every trainer's folder."""
  tree = text.split("## The files", 1)[1].split("```")[1]
  paths, folder = [], None
  for line in tree.splitlines():
    top = re.match(r"^(\S+/)\s", line)
    sub = re.match(r"^  (\w+/)\s", line)
    if top:
      folder = top.group(1)
    elif sub and folder == "common/":
      folder = "common/" + sub.group(1)
    elif sub and folder and folder.startswith("common/"):
      folder = "common/" + sub.group(1)
    if folder is None:
      continue
    for name in re.findall(r"(?<![\w/])([\w/]+\.(?:py|yaml))\b", line):
      paths.append(("", name) if "/" in name else (folder, name))
  return paths


def test_every_repository_path_the_docs_name_exists():
  missing = []
  for doc in helpers.DOC_FILES:
    for path in named_paths(helpers.read_doc(doc)):
      if not os.path.exists(os.path.join(helpers.REPO_ROOT, path)):
        missing.append(f"{doc}: {path}")
  trainers = ("segmentation/", "triplet/", "inception_finetune/")
  for folder, name in tree_paths(helpers.read_doc("docs/architecture.md")):
    folders = trainers if folder == "<trainer>/" else (folder,)
    if not any(os.path.exists(os.path.join(helpers.REPO_ROOT, f, name)) for f in folders):
      missing.append(f"docs/architecture.md, the tree: {folder}{name}")
  assert not missing, f"paths the docs name that the repository does not have: {missing}"


def test_docs_site_builds_strict(tmp_path):
  """`mkdocs build --strict`: a broken link, a missing page or anchor, a page outside the nav fails."""
  try:
    import mkdocs  # pylint: disable=g-import-not-at-top,unused-import
  except ImportError:
    pytest.skip('mkdocs is not installed: the docs extra, pip install -e ".[docs]" (requirements-docs.txt)')
  result = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
                          cwd=helpers.REPO_ROOT, capture_output=True, text=True, timeout=300)
  assert result.returncode == 0, result.stderr[-3000:]
  assert (tmp_path / "site" / "segmentation" / "index.html").is_file()  # a trainer's README is a page
