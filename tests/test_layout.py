"""The layout a user copies: one set of file names per trainer, imports without circles, and each
trainer folder plus common/ working on its own."""
import ast
import os
import shutil

import pytest
import tensorflow as tf

from common.app.trainers import find_trainers
from common.training import FOR_TRAINERS
from helpers import REPO_ROOT
from helpers import run_python

# folder: its config file, of every trainer of the repository (one new_trainer.py made included).
TRAINERS = {trainer.package: trainer.config_module.rpartition(".")[2] + ".py" for trainer in find_trainers(REPO_ROOT)}
PACKAGES = ("common", "configs", "scripts") + tuple(TRAINERS)
# The jobs every trainer folder has under the same names (the model of inception_finetune is
# inception_v4.py, after the network): {file: its role}.
SHARED_FILES = {
    "task.py": "the trainer assembled (validate_config, make_task)",
    "train.py": "the training command",
    "evaluate.py": "the evaluation command",
    "metrics.py": "the evaluation's figures",
    "data.py": "the data settings (read_settings) and the datasets made of them",
    "sources.py": "the data sources, every file checked up front",
    "synthetic.py": "the built-in synthetic set",
    "input_pipeline.py": "the tf.data pipelines the sources become",
}


# common/'s floors from the bottom: a package imports only packages of lower rank (and itself);
# the engine's training/ and the toolkit's data/ and nn/ share a rank and import none of each other.
LAYERS = {"contract": 0, "runtime": 1, "data": 2, "nn": 2, "training": 2, "app": 3}


def project_modules(root=REPO_ROOT):
  """{dotted module name: path} of every Python file of the project's packages under root."""
  modules = {}
  for package in PACKAGES:
    for folder, _, files in os.walk(os.path.join(root, package)):
      for name in files:
        if name.endswith(".py"):
          path = os.path.join(folder, name)
          dotted = os.path.relpath(path, root)[:-3].replace(os.sep, ".")
          modules[dotted.removesuffix(".__init__")] = path
  return modules


def imports_of(module, path, modules):
  """[(imported project module, line, whether the import is inside a function or class)] of
  `module` (its file `path`): every project module each import names, relative imports resolved
  (`from . import x` in a.b.c names a.b.x)."""
  tree = ast.parse(open(path).read(), path)
  nested = {id(node) for parent in ast.walk(tree)
            if isinstance(parent, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
            for node in ast.walk(parent) if node is not parent}
  package = module.split(".") if path.endswith("__init__.py") else module.split(".")[:-1]
  found = []
  for node in ast.walk(tree):
    if isinstance(node, ast.Import):
      names = [alias.name for alias in node.names]
    elif isinstance(node, ast.ImportFrom):
      base = node.module
      if node.level:
        base = ".".join(package[:len(package) + 1 - node.level] + ([node.module] if node.module else []))
      # `from a import b`: the module a.b if there is one, else a (b is a name in it).
      names = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base for alias in node.names]
    else:
      continue
    for name in dict.fromkeys(names):
      while name and name not in modules:  # `import a.b.c`, c a name in a.b: the module a.b
        name = name.rpartition(".")[0]
      if name:
        found.append((name, node.lineno, id(node) in nested))
  return found


def import_graph(root=REPO_ROOT):
  modules = project_modules(root)
  return {name: imports_of(name, path, modules) for name, path in modules.items()}


def layer_violations(root=REPO_ROOT):
  """The imports of common/ that run against LAYERS, one line each; every module of common/ in a layer."""
  problems = []
  for module, imports in import_graph(root).items():
    parts = module.split(".")
    if parts[0] != "common" or len(parts) == 1:
      continue
    if parts[1] not in LAYERS:
      problems.append(f"{module} is in no layer of common/ ({', '.join(LAYERS)})")
      continue
    for imported, line, _ in imports:
      target = imported.split(".")
      if target[0] == "common" and len(target) > 1 and target[1] != parts[1] and (
          LAYERS.get(target[1], len(LAYERS)) >= LAYERS[parts[1]]):
        problems.append(f"{module} line {line} imports {imported}: common/{parts[1]}/ imports only "
                        f"the layers below it")
  return problems


def test_common_imports_only_the_layers_below():
  assert not layer_violations(), "\n".join(layer_violations())


def test_an_import_against_the_layer_order_is_caught(tmp_path):
  """The check itself: imports planted in a copy of common/ (the contract reaching up into the
  loop, the app and the data), one of them relative and one the second name of its import."""
  shutil.copytree(os.path.join(REPO_ROOT, "common"), tmp_path / "common",
                  ignore=shutil.ignore_patterns("__pycache__"))
  errors = tmp_path / "common" / "contract" / "errors.py"
  lines = len(errors.read_text().splitlines())
  errors.write_text(errors.read_text() + "\nfrom common.training import train_loop\n"
                    "from ..app import cli\nimport json, common.data.npy\n")
  assert layer_violations(str(tmp_path)) == [
      f"common.contract.errors line {line} imports {module}: common/contract/ imports only the "
      "layers below it"
      for line, module in ((lines + 2, "common.training.train_loop"), (lines + 3, "common.app.cli"),
                           (lines + 4, "common.data.npy"))]


def test_trainers_use_only_what_the_training_package_exports_for_them():
  problems = [f"{module} line {line} imports {imported}: a trainer uses common.training's "
              f"{', '.join(FOR_TRAINERS)} (the rest is the engine's, reached through common.app)"
              for module, imports in import_graph().items() if module.split(".")[0] in TRAINERS
              for imported, line, _ in imports
              if imported.startswith("common.training") and imported.split(".")[-1] not in FOR_TRAINERS]
  assert not problems, "\n".join(problems)


def test_no_lazy_imports_and_no_trainer_imports_another():
  problems = []
  for module, imports in import_graph().items():
    top = module.split(".")[0]
    for imported, line, nested in imports:
      target = imported.split(".")[0]
      where = f"{module} line {line} imports {imported}"
      if nested:
        problems.append(f"{where} inside a function or class")
      if top == "common" and target != "common":
        problems.append(f"{where}: common/ imports only common/")
      if top in TRAINERS and target not in (top, "common"):
        problems.append(f"{where}: a trainer imports only itself and common/")
      if module.endswith(".evaluate") and imported.endswith(".train") or (
          module.endswith(".train") and imported.endswith(".evaluate")):
        problems.append(f"{where}: train.py and evaluate.py both build on task.py")
  assert not problems, "\n".join(problems)


def test_no_import_circle():
  graph = {module: sorted({name for name, _, _ in imports}) for module, imports in import_graph().items()}
  state = {}  # module -> "open" while on the path, "done" after

  def visit(module, path):
    state[module] = "open"
    for imported in graph.get(module, ()):
      if state.get(imported) == "open":
        cycle = path[path.index(imported):] + [imported]
        raise AssertionError("import circle: " + " -> ".join(cycle))
      if imported not in state:
        visit(imported, path + [imported])
    state[module] = "done"

  for module in sorted(graph):
    if module not in state:
      visit(module, [module])


def missing_files(folder):
  """One line per file of SHARED_FILES that the trainer folder lacks, with its role."""
  return [f"{os.path.basename(folder)}/ lacks {name}: {role}" for name, role in SHARED_FILES.items()
          if not os.path.isfile(os.path.join(folder, name))]


@pytest.mark.parametrize("trainer", sorted(TRAINERS))
def test_trainer_folders_share_their_file_names(trainer):
  missing = missing_files(os.path.join(REPO_ROOT, trainer))
  assert not missing, "\n".join(missing)


def test_a_trainer_without_a_roles_file_is_named(tmp_path):
  shutil.copytree(os.path.join(REPO_ROOT, "triplet"), tmp_path / "triplet",
                  ignore=shutil.ignore_patterns("__pycache__"))
  os.remove(tmp_path / "triplet" / "sources.py")
  assert missing_files(str(tmp_path / "triplet")) == [
      f"triplet/ lacks sources.py: {SHARED_FILES['sources.py']}"]


@pytest.mark.slow
@pytest.mark.parametrize("trainer", sorted(TRAINERS))
def test_a_trainer_copied_alone_with_common_runs_its_smoke_preset(trainer, tmp_path):
  """What a user copies as a template: common/, one trainer folder, its config and requirements.txt."""
  copy = tmp_path / "template"
  for folder in ("common", trainer):
    shutil.copytree(os.path.join(REPO_ROOT, folder), copy / folder,
                    ignore=shutil.ignore_patterns("__pycache__"))
  os.makedirs(copy / "configs")
  config_file = TRAINERS[trainer]
  shutil.copy(os.path.join(REPO_ROOT, "configs", config_file), copy / "configs" / config_file)
  shutil.copy(os.path.join(REPO_ROOT, "requirements.txt"), copy / "requirements.txt")
  assert sorted(os.listdir(copy)) == sorted(["common", trainer, "configs", "requirements.txt"])

  # What the copy imports and reads is the point: Inception V4's 60 smoke steps take minutes here.
  steps = ["--config.train.num_steps=1", "--config.finetune.head_steps=1"] \
      if trainer == "inception_finetune" else []
  result = run_python(["-m", f"{trainer}.train", f"--config=configs/{config_file}:smoke", *steps,
                       "--workdir=run"], cwd=copy, env={k: v for k, v in os.environ.items()
                                                       if k != "PYTHONPATH"})
  assert result.returncode == 0, result.stderr[-3000:]
  saved_model = tf.saved_model.load(str(copy / "run" / "saved_model"))
  assert "serving_default" in saved_model.signatures
  assert os.path.isfile(copy / "run" / "metrics.json")


MAX_MODULE_LINES = 400  # a module longer than this is split by job (DESIGN: no module over 400 lines)


def long_modules(root=REPO_ROOT):
  """[(path under root, its lines)] of the project's modules (every .py outside tests/) over
  MAX_MODULE_LINES lines."""
  found = []
  for path in sorted(project_modules(root).values()):
    with open(path, encoding="utf-8") as f:
      lines = sum(1 for _ in f)
    if lines > MAX_MODULE_LINES:
      found.append((os.path.relpath(path, root), lines))
  return found


def test_the_line_check_catches_a_module_of_401_lines(tmp_path):
  for path, lines in (("common/x/long.py", 401), ("scripts/just.py", 400), ("tests/test_long.py", 900)):
    os.makedirs(tmp_path / os.path.dirname(path), exist_ok=True)
    (tmp_path / path).write_text("x = 1\n" * lines)
  assert long_modules(str(tmp_path)) == [("common/x/long.py", 401)]


def test_no_module_is_over_400_lines():
  assert not long_modules(), f"split by job: {long_modules()}"
