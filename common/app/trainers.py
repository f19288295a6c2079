"""The repository's trainers, found from its folders, never listed by hand: the tests (layout, hostile
table, configs) and the scripts (benchmark, new_trainer) read this one list, so a trainer that
scripts/new_trainer.py adds is checked and benchmarked by its name with no edit.

A trainer is a folder whose task.py sets NAME (what its runs and SavedModels carry) and CONFIG_MODULE
(configs.<file>), read without importing it (reading a folder imports no TensorFlow)."""
import ast
import collections
import os

# The repository (or site-packages) this package was imported from: the trainers' folders and their
# configs/<trainer>.py are there, whatever the folder a command runs from.
REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# package: the folder (segmentation); name: its task's NAME (inception_finetune's is inception_v4);
# config_module: configs.<file> (configs.inception_v4).
Trainer = collections.namedtuple("Trainer", "package name config_module")


def task_constants(path):
  """{NAME, CONFIG_MODULE: their string values} of a trainer's task.py, read without importing it."""
  try:
    tree = ast.parse(open(path, encoding="utf-8").read(), path)
  except (OSError, SyntaxError, UnicodeDecodeError):
    return {}
  return {node.targets[0].id: node.value.value for node in tree.body if isinstance(node, ast.Assign)
          and isinstance(node.targets[0], ast.Name) and node.targets[0].id in ("NAME", "CONFIG_MODULE")
          and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)}


def find_trainers(root=REPO_ROOT):
  """[Trainer] of the repository at root, by folder name: the folders whose task.py sets both."""
  found = []
  for package in sorted(os.listdir(root)):
    constants = task_constants(os.path.join(root, package, "task.py"))
    if len(constants) == 2:
      found.append(Trainer(package, constants["NAME"], constants["CONFIG_MODULE"]))
  return found
