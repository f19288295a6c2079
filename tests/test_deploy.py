"""The container route: deploy/Dockerfile, .dockerignore and deploy/tfjob.yaml, read as files.

No builder, registry or cluster: what these files promise is checked where it can go wrong
silently. The TensorFlow pinned per card is the one the code and the README recommend for it (a
GTX 960M pod given 2.17 or later trains on its CPU without an error), the build context keeps
workdirs and data sets out and every file the image copies in, and the job's pods share a
ReadWriteMany workdir and are replaced on the exits that mean "resume" (128-255) only.
"""
import json
import os
import re
import shutil
import subprocess
import sys

from packaging.specifiers import SpecifierSet  # a dependency of tensorflow
import pytest
import yaml  # PyYAML, a dependency of ml-collections

from common.runtime import hardware
import helpers
from scripts import new_trainer
import test_new_trainer

ROOT = helpers.REPO_ROOT
# The card the project is sized for (GTX 960M, compute capability 5.0), and the first generation
# of the newer pin; deploy/Dockerfile's CARD values for them.
CARDS = {"cc5": (5, 0), "cc6": (6, 0)}


def read(*path):
  with open(os.path.join(ROOT, *path), encoding="utf-8") as f:
    return f.read()


def manifests():
  """{kind: document} of deploy/tfjob.yaml, and the kinds in file order."""
  documents = [d for d in yaml.safe_load_all(read("deploy", "tfjob.yaml")) if d]
  return {d["kind"]: d for d in documents}, [d["kind"] for d in documents]


def install_instruction(dockerfile):
  """The RUN instruction that installs the requirements, its continuation lines joined."""
  runs = re.findall(r"^RUN ((?:.*\\\n)*.*)$", dockerfile, re.M)
  install, = [run for run in runs if "pip install" in run]
  return re.sub(r"\\\n", " ", install)


def card_pins(dockerfile):
  """{CARD value: what pip installs beside requirements.txt} from the install's `case`."""
  return dict(re.findall(r"(\w+)\) tensorflow=\"([^\"]+)\" ;;", install_instruction(dockerfile)))


def readme_builds():
  """{tag: the build's arguments} of the install page's `docker build -f deploy/Dockerfile` lines."""
  return {tag: args for args, tag in re.findall(
      r"^docker build -f deploy/Dockerfile (.*?) ?-t (\S+) \.(?:\s+#.*)?$", read("docs", "install.md"), re.M)}


def test_tfjob_manifest_runs_a_trainer_of_this_repository():
  documents, _ = manifests()
  job = documents["TFJob"]
  spec = job["spec"]["tfReplicaSpecs"]["Worker"]
  assert spec["replicas"] >= 2
  container, = spec["template"]["spec"]["containers"]
  assert container["name"] == "tensorflow"  # the name Kubeflow's training operator expects
  command = container["command"]
  assert command[:3] == ["python", "-m", "segmentation.train"]
  config = [a for a in command if a.startswith("--config=")][0].split("=", 1)[1]
  assert os.path.isfile(os.path.join(ROOT, config))


def test_the_workers_share_a_read_write_many_workdir_and_are_retried_on_128_to_255_only():
  documents, kinds = manifests()
  # `kubectl apply -f` creates the claim before the job whose pods wait for it.
  assert kinds == ["PersistentVolumeClaim", "TFJob"]
  claim = documents["PersistentVolumeClaim"]
  # Pods on several nodes mount it at once: every worker reads the chief's checkpoints and writes
  # its input position, and a replaced pod may start on another node.
  assert claim["spec"]["accessModes"] == ["ReadWriteMany"]
  assert claim["spec"]["resources"]["requests"]["storage"]
  for name, replicas in documents["TFJob"]["spec"]["tfReplicaSpecs"].items():
    # Kubeflow replaces a pod that exited with 128-255 (a signal, the stall exit) and fails the job
    # on 1-127: the trainers' 2 (bad input) and 3 (diverged) would fail the same way again.
    assert replicas["restartPolicy"] == "ExitCode", name
    pod = replicas["template"]["spec"]
    volume, = pod["volumes"]
    assert volume["persistentVolumeClaim"]["claimName"] == claim["metadata"]["name"], name
    container, = pod["containers"]
    mount, = [m for m in container["volumeMounts"] if m["name"] == volume["name"]]
    workdir = [a for a in container["command"] if a.startswith("--workdir=")][0].split("=", 1)[1]
    assert workdir.startswith(mount["mountPath"].rstrip("/") + "/"), (name, workdir, mount)


def test_the_dockerfile_installs_the_requirements_and_the_repository_and_the_tfjob_names_its_tag():
  dockerfile = read("deploy", "Dockerfile")
  # requirements.txt installs the repository (-e .): pyproject.toml and every package it lists, all
  # copied before the install.
  assert "-e ." in read("requirements.txt")
  copied = image_files(ROOT)
  packages = json.loads(re.search(r"^packages = (\[.*\])$", read("pyproject.toml"), re.M).group(1))
  needed = {"requirements.txt", "pyproject.toml"} | {package.replace(".", "/") + "/__init__.py" for package in packages}
  assert needed <= set(copied), needed - set(copied)
  install = dockerfile.index("RUN case")
  assert all(match.start() < install for match in re.finditer(r"^COPY ", dockerfile, re.M))
  assert 'pip install --no-cache-dir "${tensorflow}" -r requirements.txt' in install_instruction(dockerfile)
  assert re.search(r"^ARG CARD=cpu$", dockerfile, re.M)  # the CPU build needs no build argument

  # The install page builds an image per GPU card; the TFJob runs the one of the card the project is
  # sized for, from the Dockerfile's WORKDIR.
  builds = readme_builds()
  assert sorted(builds.values()) == [f"--build-arg CARD={card}" for card in sorted(CARDS)], builds
  container, = manifests()[0]["TFJob"]["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["containers"]
  assert builds[container["image"]] == "--build-arg CARD=cc5"
  assert container["workingDir"] == re.search(r"^WORKDIR (\S+)$", dockerfile, re.M).group(1)
  # The scaling page pushes the image the TFJob runs.
  assert re.search(rf"^docker push {re.escape(container['image'])}$", read("docs", "scaling.md"), re.M)


def test_each_card_gets_the_tensorflow_the_code_and_the_readme_recommend_for_it():
  pins = card_pins(read("deploy", "Dockerfile"))
  assert pins["cpu"] == "tensorflow"  # requirements.txt bounds its version
  bounds = SpecifierSet(re.search(r"^tensorflow([<>=!~][^\s#]*)", read("requirements.txt"), re.M).group(1))
  readme = read("docs", "install.md")
  hardware_section = read("docs", "hardware.md")
  for card, capability in CARDS.items():
    name, version = pins[card].split("==")
    assert name == "tensorflow[and-cuda]", card  # the CUDA and cuDNN libraries come with it
    # The newest release with kernels for the card's compute capability (2.17 and later have no
    # sm_50: a 5.x card's pod would train on its CPU).
    assert version == hardware.recommend_release(capability)[0], (card, version)
    assert version in bounds, (card, version, bounds)
    assert f'"tensorflow[and-cuda]=={version}"' in readme, card  # the install page's set-up pins
  assert pins["cc6"].endswith(f"=={hardware.RELEASE_KERNELS[0][0]}")  # the newest supported release
  assert f"tensorflow[and-cuda]=={pins['cc5'].split('==')[1]}" in hardware_section


@pytest.mark.skipif(shutil.which("sh") is None, reason="needs a POSIX shell, as the build's RUN does")
def test_the_card_argument_picks_one_pin_and_refuses_an_unknown_card():
  run = install_instruction(read("deploy", "Dockerfile")).replace("pip install", "echo pip install", 1)
  expected = card_pins(read("deploy", "Dockerfile"))
  assert set(expected) == {"cpu"} | set(CARDS)
  for card, tensorflow in expected.items():
    result = subprocess.run(["sh", "-c", run], env={"CARD": card, "PATH": os.environ["PATH"]},
                            capture_output=True, text=True, timeout=30)
    assert result.returncode == 0 and result.stdout.split() == [
        "pip", "install", "--no-cache-dir", tensorflow, "-r", "requirements.txt"], (card, result)
  result = subprocess.run(["sh", "-c", run], env={"CARD": "cc8", "PATH": os.environ["PATH"]},
                          capture_output=True, text=True, timeout=30)
  assert result.returncode == 2 and not result.stdout, result
  assert result.stderr.startswith("CARD=cc8: expected cpu, cc5 "), result.stderr


def dockerignore_pattern(pattern):
  """A .dockerignore pattern as a regular expression over a path relative to the context, with
  Docker's rules: anchored at the root, `*` and `?` within one folder, `**` across folders."""
  pattern = pattern.strip("/")
  parts, i = [], 0
  while i < len(pattern):
    if pattern.startswith("**/", i):
      parts.append("(?:.*/)?")
      i += 3
    elif pattern.startswith("**", i):
      parts.append(".*")
      i += 2
    else:
      parts.append({"*": "[^/]*", "?": "[^/]"}.get(pattern[i], re.escape(pattern[i])))
      i += 1
  return re.compile("".join(parts) + "$")


def dockerignored(path, lines):
  """Whether the context leaves path out: the last pattern that matches it or a folder above it
  decides (a `!` pattern takes it back)."""
  candidates = [path] + [path.rsplit("/", n)[0] for n in range(1, path.count("/") + 1)]
  ignored = False
  for line in lines:
    exception = line.startswith("!")
    regex = dockerignore_pattern(line.lstrip("!"))
    if any(regex.match(candidate) for candidate in candidates):
      ignored = not exception
  return ignored


def test_dockerignore_keeps_workdirs_and_data_out_and_every_copied_file_in():
  lines = [line.strip() for line in read(".dockerignore").splitlines()
           if line.strip() and not line.startswith("#")]
  assert dockerignored("common/__pycache__/x.pyc", lines) and not dockerignored("common/x.py", lines)
  # Workdirs, the README's data sets and downloads, virtual environments, the suite, build files.
  out = ["runs/segmentation/checkpoints/ckpt-1.index", "real_data/digits/labels.csv",
         "real_data_few/numbers/train_images.npy", "StanfordDogs/Images/a/1.jpg",
         "inception_v4.ckpt", "checkpoints/inception_v4.ckpt", "inception_v4_2016_09_09.tar.gz",
         ".git/HEAD", ".venv/bin/python", ".venv-ci-tf216/bin/python", "venv/bin/python",
         "configs/__pycache__/segmentation.cpython-311.pyc", "tests/data/inception_v4_slim_variables.tsv",
         "tf2_reference_trainers.egg-info/PKG-INFO"]
  assert [path for path in out if not dockerignored(path, lines)] == []


def image_files(root):
  """The files (paths relative to root, with /) the COPY instructions of root's deploy/Dockerfile
  take from root as the build context: what root/.dockerignore leaves in under each source."""
  with open(os.path.join(root, ".dockerignore"), encoding="utf-8") as f:
    lines = [line.strip() for line in f.read().splitlines() if line.strip() and not line.startswith("#")]
  with open(os.path.join(root, "deploy", "Dockerfile"), encoding="utf-8") as f:
    sources = [source for line in re.findall(r"^COPY (.+)$", f.read(), re.M) for source in line.split()[:-1]]
  found = []
  for source in sources:
    source = os.path.normpath(source).replace(os.sep, "/")
    if os.path.isfile(os.path.join(root, source)):
      found += [] if dockerignored(source, lines) else [source]
      continue
    for folder, subfolders, files in os.walk(os.path.join(root, source)):
      relative = os.path.relpath(folder, root).replace(os.sep, "/")
      paths = {name: name if relative == "." else f"{relative}/{name}" for name in subfolders + files}
      # An ignored folder is not walked (.git, runs/, data sets: the list has no `!` exception).
      subfolders[:] = [name for name in subfolders if not dockerignored(paths[name], lines)]
      found += [paths[name] for name in files if not dockerignored(paths[name], lines)]
  return found


@pytest.mark.slow
def test_the_image_files_install_every_trainer_one_added_by_new_trainer_included(tmp_path):
  """What the image's `pip install ... -r requirements.txt` installs (-e .), from the files the
  Dockerfile copies: in a copy of them a trainer is added under the session's name (was: the image
  copied the three trainers by name, and the README's example stopped its build with `package
  directory 'roads' does not exist`), then the image's files of that copy install with pip (offline,
  --no-deps) in a fresh virtual environment, every trainer importable from another folder."""
  repository, image = tmp_path / "repository", tmp_path / "image"
  for root, into in ((ROOT, repository), (repository, image)):
    for path in image_files(str(root)):
      os.makedirs(os.path.dirname(into / path), exist_ok=True)
      shutil.copy(os.path.join(root, path), into / path)
    if into == repository:
      new_trainer.new_trainer(test_new_trainer.NEW, "segmentation", str(repository))
  assert (image / test_new_trainer.NEW / "train.py").is_file() and not (image / "tests").exists()
  python = test_new_trainer.fresh_venv(tmp_path / "venv")
  env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
  env.update(PIP_NO_INDEX="1", PIP_NO_BUILD_ISOLATION="0")
  result = subprocess.run([python, "-m", "pip", "install", "--no-deps", "-e", "."], cwd=image, env=env,
                          capture_output=True, text=True, timeout=600)
  assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
  trainers = ("segmentation", "triplet", "inception_finetune", test_new_trainer.NEW)
  where = subprocess.run([python, "-c", f"import {', '.join(trainers)}; "
                          f"print({', '.join(trainer + '.__file__' for trainer in trainers)})"], cwd=tmp_path, env=env, capture_output=True, text=True, check=True).stdout.split()
  assert where == [str(image / trainer / "__init__.py") for trainer in trainers]
