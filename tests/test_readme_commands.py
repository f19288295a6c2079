"""Every command the documentation shows runs, in reading order, in one scratch copy of the repository.

The documentation is helpers.DOC_FILES: README.md, each trainer's README.md beside its code, then
docs/*.md, read in that order (so that a trainer's README trains the run its evaluate lines read).

Commands are the lines of the ``` blocks and the inline `code` spans that start with a program
(python, pip, tensorboard, a shell script...; `NAME=value` assignments before it are its
environment), with `\\` continuations joined, `# comments` dropped and `a && b` split into a and
b. A command shown twice runs once, and an inline span that is the start of a block's command (the
trainers' table abbreviates the sections' commands) is that command. A python command runs as
written unless ADAPTATIONS (the entry whose key is the longest prefix of the command) says
otherwise and why: a smaller preset or a step cap, or another test that runs the same command line
and checks what it does (each command line runs once in the suite). Two rewrites apply to all:
absolute /tmp/ paths and TMPDIR point into the scratch folder, so that no run shares state with
another. Commands run without TF_CPP_MIN_LOG_LEVEL, as in a user's shell, and one that prints
TensorFlow's C++ start-up lines fails. The inputs the README assumes the user has
(inception_v4.ckpt, StanfordDogs/Images, a VOC folder, photo.jpg) are small stand-ins the `workspace`
fixture writes.

A README command that is neither runnable as written nor in the table fails, and so does a block
that is neither commands nor listed in TEXT_BLOCKS, and a table entry no README command uses: a
documented command cannot go untested.
"""
import dataclasses
import os
import re
import shlex
import shutil
import subprocess
import sys

import numpy as np
from PIL import Image
import pytest

import helpers

# A command: environment assignments, then a program the README tells the user to run.
ASSIGNMENT = r"[A-Za-z_]\w*=(?:'[^']*'|\"[^\"]*\"|\S+)\s+"
PROGRAMS = r"python3?|pip3?|tensorboard|mkdocs|bash|sh|kubectl|docker|podman|git|curl|wget|nvidia-smi|cd|export"
COMMAND = re.compile(rf"(?:{ASSIGNMENT})*(?:{PROGRAMS}|\S+\.sh)(?:\s|$)")
# Blocks that show no command, by the start of their first line.
TEXT_BLOCKS = {
    "error: ": "the one-line error of a misspelt config key",
    "common/ ": "the architecture page's tree of files",
    "config.": "the lines of a copied trainer's config file that segmentation's README edits "
               "(tests/test_make_it_yours.py makes those edits and trains the copy)",
}
RUNNABLE_AS_WRITTEN = ("python",)
TIMEOUT_S = 600
STDERR_TAIL_LINES = 15
# TensorFlow's C++ start-up lines (CUDA probing, CPU features), logged before absl is set up: every
# command hides them as the trainers do (common/runtime/process.py), and a command that shows them fails.
STARTUP_NOISE = re.compile(r"^([IWE]0000 00:00:|WARNING: All log messages before absl|To enable the following)")


@dataclasses.dataclass(frozen=True)
class Run:
  """Runs the command with changes: `preset` replaces the --config preset, `replace` swaps README
  text (placeholders such as `...`) for what runs, `append` adds arguments (later flags win).
  `exit_codes` are the successes; `prints` is text stdout must hold."""
  why: str
  preset: str = ""
  replace: tuple = ()
  append: tuple = ()
  exit_codes: tuple = (0,)
  prints: str = ""


@dataclasses.dataclass(frozen=True)
class Skip:
  why: str


AS_WRITTEN = Run("as written")
# A command line another test runs (on a workdir of its own) and checks more closely.
ELSEWHERE = "{} runs this command line on a run of its own and checks {}"
TEMPLATE_COPY = "tests/test_layout.py (in a copy of common/, the trainer and its config alone)"
# The real-data recipes: each result is asserted once, by the test that runs the command line.
REAL_DATA = ("a real-data recipe of {} that {} runs as this line reads (the README's real_data/ is "
             "the session's sets of scripts/make_real_sets.py) and whose figures it asserts")
# The template route's lines, which need a copy of the repository to write into and an install.
NEW_TRAINER = Skip(ELSEWHERE.format(
    "tests/test_new_trainer.py (in a fresh copy of the repository and a virtual environment, the "
    "route's lines in order, under a name made per session)", "that every file it writes names the trainer"))
TWO_STEPS = ("--config.train.num_steps=2",)
ONE_INCEPTION_STEP = ("--config.train.num_steps=1", "--config.finetune.head_steps=1")
ONE_BENCHMARK_STEP = ("--steps", "1", "--windows", "1")
TFDS_DOWNLOAD = ("downloads and prepares the TensorFlow Datasets data set; tests/test_tfds.py runs the same "
                 "command line (data.source=tfds) on a tiny copy its builder prepares, and its resume")
ADAPTATIONS = {
    "python3 -m venv": Skip("makes the virtual environment the next lines install into: .ci/run "
                            "makes its own with the same command before it installs"),
    ". .venv/bin/activate": Skip("activates that environment in the user's shell; CI's commands run "
                                 "with its own environment's interpreter"),
    "pip install": Skip("installs packages: CI installs the requirements itself before the tests"),
    "python -m pytest": Skip("CI's own command: the test suite this test is part of"),
    "scripts/peers/setup_peer_venv.sh": Skip("downloads about 6 GB of PyTorch wheels into a venv"),
    "python scripts/fetch_slim_checkpoint.py": Skip(
        "downloads TF-Slim's published checkpoint from download.tensorflow.org; "
        "tests/test_fetch_slim_checkpoint.py runs it with --url=file://... on a tarball it makes"),
    "TF_CONFIG=": Skip("one command per host (host0, host1) with shared storage; "
                       "scripts/launch_workers.py (run above) starts the same on one machine"),
    "kubectl apply": Skip("needs a Kubernetes cluster with Kubeflow's training operator"),
    "docker build": Skip("needs a container builder and the network (the base image, TensorFlow's "
                         "wheels); tests/test_deploy.py checks deploy/Dockerfile's pin per card and "
                         "that the TFJob names the cc5 tag"),
    "podman build": Skip("needs a container builder and the network, as docker build"),
    "docker push": Skip("needs a registry"),
    "mkdocs build": Skip(ELSEWHERE.format("tests/test_docs.py", "that it builds with --strict")),
    # docs/real-data.md's TensorFlow Datasets lines: each downloads its data set (0.2-0.8 GB).
    "python -m inception_finetune.train --config=configs/inception_v4.py --config.checkpoint_path=inception_v4.ckpt --config.data.source=tfds": Skip(TFDS_DOWNLOAD),
    "python -m segmentation.train --config=configs/segmentation.py --config.data.source=tfds": Skip(TFDS_DOWNLOAD),
    "python -m triplet.train --config=configs/triplet.py --config.data.source=tfds": Skip(TFDS_DOWNLOAD),
    "python scripts/benchmark.py inception_v4 --variants float32 --set data.source=tfds": Skip(
        "reads the prepared stanford_dogs (a 0.8 GB download); tests/test_benchmark.py runs the benchmark"),
    "python scripts/benchmark.py inception_v4 --variants float32 --set data.source=folder": Skip(
        "reads Stanford Dogs' Images/ (the same photos as the line above), whose download the suite does "
        "not make; tests/test_benchmark.py runs the benchmark"),
    "python -m segmentation.train --config=configs/segmentation.py": Run(
        "the default preset trains 800 steps; the smoke preset runs the same code in seconds",
        preset="smoke"),
    "python -m segmentation.train --config=configs/segmentation.py:gtx960m": Run(
        "mixed precision is a GPU setting (float16 convolution gradients are hundreds of times "
        "slower on a CPU); 2 steps show the preset builds, trains, evaluates and exports",
        append=("--config.mixed_precision=False",) + TWO_STEPS),
    "python -m segmentation.train --config=configs/segmentation.py:scenes_128": Skip(REAL_DATA.format(
        "1,200 steps", "tests/test_real_segmentation.py")),
    "python -m segmentation.train --config=configs/segmentation.py:scenes": Run(
        "a real-data recipe of 6,000 steps (9-26 CPU minutes by machine) whose figures segmentation/README.md "
        "gives as measured, not asserted; 2 steps show the line reads the scenes set the make_real_sets "
        "line above wrote (its train_small split too), trains, evaluates and exports",
        append=TWO_STEPS),
    "python -m segmentation.train --config=configs/segmentation.py --config.data.source=npy": Skip(
        REAL_DATA.format("800 steps", "tests/test_real_segmentation.py")),
    "python -m segmentation.evaluate --config=configs/segmentation.py": Run(
        "runs/segmentation was trained with the smoke preset (above)", preset="smoke"),
    "python -m segmentation.train --config=configs/segmentation.py:smoke --workdir=/tmp/smoke": Skip(
        ELSEWHERE.format(TEMPLATE_COPY, "the SavedModel it exports")),
    "python -m triplet.train --config=configs/triplet.py:smoke --workdir=/tmp/triplet": Skip(
        ELSEWHERE.format(TEMPLATE_COPY, "the SavedModel it exports")),
    "python -m inception_finetune.train --config=configs/inception_v4.py:smoke --workdir=/tmp/inception": Skip(
        ELSEWHERE.format(TEMPLATE_COPY + ", one step", "the SavedModel it exports")),
    "python -m triplet.predict": Run(
        "runs/triplet is the GPU-sized recipe's workdir, which is not trained here; the smoke "
        "preset's softmax run (above) stands in", replace=(("runs/triplet", "runs/triplet_softmax"),)),
    "python -m segmentation.train --help": Skip(ELSEWHERE.format(
        "tests/test_cli_output.py", "the flags and presets it lists")),
    "python -m segmentation.evaluate --workdir=runs/segmentation --config.eval.window=": Run(
        "as written, on runs/segmentation (trained with the smoke preset above)"),
    "python -m segmentation.evaluate --workdir=runs/segmentation": Skip(ELSEWHERE.format(
        "tests/test_segmentation_train.py", "its mIoU against the run's")),
    "python -m triplet.evaluate --workdir=runs/triplet": Skip(ELSEWHERE.format(
        "tests/test_triplet_train.py", "its figures against the run's")),
    "python -m inception_finetune.evaluate --workdir=runs/dogs": Skip(ELSEWHERE.format(
        "tests/test_inception_train.py", "its top-1 against the run's")),
    "python -m triplet.train --config=configs/triplet.py": Run(
        "the default preset trains 3000 steps at 160x160 (GPU-sized)", preset="smoke"),
    "python -m triplet.train --config=configs/triplet.py --workdir=runs/triplet": Skip(
        "the default preset trains 3000 steps at 160x160 (GPU-sized); with the smoke preset it is the "
        "smoke line below, which " + TEMPLATE_COPY + " runs"),
    "python -m triplet.train --config=configs/triplet.py:few": Skip(REAL_DATA.format(
        "1,000 steps", "tests/test_real_triplet.py")),
    "python -m triplet.train --config=configs/triplet.py:small": Skip(REAL_DATA.format(
        "800 steps", "tests/test_real_triplet.py")),
    "python -m inception_finetune.train --config=configs/inception_v4.py --config.checkpoint_path=inception_v4.ckpt": Run(
        "the default preset trains 6000 steps at 299x299; the smoke preset (75x75, 10 classes as "
        "in the stand-in StanfordDogs/Images) restores the same checkpoint, and one step shows it trains",
        preset="smoke", append=ONE_INCEPTION_STEP),
    "python -m inception_finetune.train --config=configs/inception_v4.py:smoke": Run(
        "60 Inception V4 steps take minutes on 2 busy cores; one step shows the smoke run trains",
        append=ONE_INCEPTION_STEP),
    "python -m inception_finetune.train --config=configs/inception_v4.py:scratch": Skip(REAL_DATA.format(
        "300 steps (16 there: its figures need no more)", "tests/test_real_inception.py")),
    "python scripts/check_gpu.py": Run(
        "exit code 1 is its documented answer on a machine without a usable GPU, as here",
        exit_codes=(0, 1), prints="result: "),
    "python scripts/benchmark.py": Run(
        "one step per window, one window, float32 only: the figures are not the point here (the "
        "mixed-precision and XLA variants are tests/test_benchmark.py's)",
        append=ONE_BENCHMARK_STEP + ("--variants", "float32")),
    "python scripts/benchmark.py all --preset smoke": Run(
        "XLA compiles Inception V4 for minutes; float32 alone shows every table",
        append=ONE_BENCHMARK_STEP + ("--variants", "float32")),
    "python scripts/benchmark.py inception_v4 --preset gtx960m --memory_limit_mb 4096": Run(
        "a GPU command (the memory limit applies to a GPU); on a CPU the 299x299 mixed-precision "
        "steps take minutes, and Inception V4's timed rows are the smoke benchmark's (above): the "
        "estimate shows the preset and the limit are taken", append=("--estimate_only",)),
    "python scripts/benchmark.py segmentation --preset smoke": Skip(ELSEWHERE.format(
        "tests/test_benchmark.py (in one interpreter, every variant)", "every column it prints")),
    "python scripts/new_trainer.py": NEW_TRAINER,
    "python -m buildings.train": NEW_TRAINER,
    "python -m buildings.evaluate": NEW_TRAINER,
    "python scripts/export.py --workdir=runs/buildings": NEW_TRAINER,
    "python -m buildings.predict": NEW_TRAINER,
    "tensorboard --logdir runs": Skip(ELSEWHERE.format(
        "tests/test_tensorboard_contents.py", "the HParams it serves for a folder of runs")),
    "tensorboard --logdir runs/segmentation": Skip(ELSEWHERE.format(
        "tests/test_segmentation_train.py", "the loss series it serves")),
}


@dataclasses.dataclass(frozen=True)
class Command:
  text: str  # the words as written, quotes removed: what ADAPTATIONS keys are prefixes of
  env: tuple  # the NAME=value assignments before the program
  argv: tuple


def split_commands(line):
  """The Commands of one README line: comments dropped, `&&` chains split."""
  commands, words = [], []
  for word in shlex.split(line, comments=True) + ["&&"]:
    if word != "&&":
      words.append(word)
      continue
    if words:
      assignments = 0
      while re.fullmatch(r"[A-Za-z_]\w*=.*", words[assignments], re.S):
        assignments += 1
      commands.append(Command(" ".join(words), tuple(words[:assignments]), tuple(words[assignments:])))
    words = []
  return commands


def parse_docs(docs):
  """(the Commands of docs, [(path, text)], in order and once each, the lines of code blocks that
  are not commands (each as `path: line`), the TEXT_BLOCKS keys used)."""
  found, strays, text_blocks = [], [], set()  # found: (in a block?, Command)
  for path, text in docs:
    block = None
    for line in text.splitlines():
      if line.startswith("```") and block is None:
        block = []
      elif line.startswith("```"):
        lines = [l.strip() for l in re.sub(r"\\\n\s*", " ", "\n".join(block)).splitlines() if l.strip()]
        commands = [l for l in lines if COMMAND.match(l)]
        text_key = next((key for key in TEXT_BLOCKS if lines and lines[0].startswith(key)), None)
        if commands or text_key is None:
          strays += [f"{path}: {l}" for l in lines if l not in commands]
          found += [(True, c) for l in commands for c in split_commands(l)]
        else:
          text_blocks.add(text_key)
        block = None
      elif block is not None:
        block.append(line)
      else:
        spans = [span for span in re.findall(r"`([^`]+)`", line) if COMMAND.match(span)]
        found += [(False, c) for span in spans for c in split_commands(span)]
  in_blocks = [c.text for in_block, c in found if in_block]
  ordered = {}
  for in_block, command in found:
    if in_block or not any(text.startswith(command.text + " ") for text in in_blocks):
      ordered.setdefault(command.text, command)
  return list(ordered.values()), strays, text_blocks


def adaptation_key(command):
  """The longest ADAPTATIONS key that is the command or its start (ending a word or at `=`)."""
  keys = [key for key in ADAPTATIONS if command.text == key or command.text.startswith(
      key if key.endswith("=") else key + " ")]
  return max(keys, key=len, default=None)


COMMANDS, STRAYS, TEXT_BLOCKS_USED = parse_docs([(doc, helpers.read_doc(doc)) for doc in helpers.DOC_FILES])


def test_every_readme_command_is_runnable_as_written_or_in_the_table():
  assert not STRAYS, ("The docs' lines of code blocks that are not commands this test knows (add "
                      f"the program to PROGRAMS, or the block to TEXT_BLOCKS): {STRAYS}")
  untested = [c.text for c in COMMANDS if c.argv[0] not in RUNNABLE_AS_WRITTEN and adaptation_key(c) is None]
  assert not untested, ("Documented commands the test cannot run as written; give each an entry in "
                        f"ADAPTATIONS saying how or why not: {untested}")


def test_every_table_entry_is_used_by_the_readme():
  stale = sorted(set(ADAPTATIONS) - {adaptation_key(c) for c in COMMANDS})
  stale += sorted(set(TEXT_BLOCKS) - TEXT_BLOCKS_USED)
  assert not stale, f"ADAPTATIONS or TEXT_BLOCKS entries that match nothing in the docs (stale): {stale}"


def test_parse_joins_continuations_splits_chains_and_keeps_the_order():
  commands, strays, text_blocks = parse_docs([("README.md",
      "Run `python -m a.b` or `sh x.sh`\n"
      "```\npip install -r r.txt && python -m a.b --x=1 \\\n    --y='two words'   # comment\n```\n"
      "then `V='a b' python c.py`, `--flag` and\n```\nerror: output\n```\n```\nnot a command\n```\n")])
  assert [c.text for c in commands] == [
      "sh x.sh", "pip install -r r.txt", "python -m a.b --x=1 --y=two words", "V=a b python c.py"]
  assert commands[2].argv[-1] == "--y=two words" and commands[3].env == ("V=a b",)
  assert strays == ["README.md: not a command"] and text_blocks == {"error: "}


def make_stand_ins(root, slim_checkpoint):
  """The inputs the README assumes: a TF-Slim checkpoint (a copy of the session's stand-in,
  helpers.write_slim_inception_checkpoint's, with its folder's state file), class folders, a VOC
  folder, photos."""
  rng = np.random.default_rng(0)
  for name in os.listdir(os.path.dirname(slim_checkpoint)):
    shutil.copy(os.path.join(os.path.dirname(slim_checkpoint), name), root / name)
  for label in range(10):  # the smoke preset's 10 classes
    folder = root / "StanfordDogs" / "Images" / f"n0208{label:04d}-breed_{label}"
    folder.mkdir(parents=True)
    for i in range(6):
      image = np.clip(rng.normal(25 * label, 30, (64, 64, 3)), 0, 255).astype(np.uint8)
      Image.fromarray(image).save(folder / f"{i}.jpg")
  helpers.write_voc(root / "VOCdevkit" / "VOC2012")
  write_photos(root, rng)


def write_photos(root, rng):
  """The predict commands' photo.jpg (stored turned, EXIF orientation 6, as phones save photos),
  photo2.jpg and photos/ (a PNG, a greyscale JPEG and a palette GIF)."""
  def photo(height=60, width=80):
    return Image.fromarray(rng.integers(0, 256, (height, width, 3), dtype=np.uint8))

  exif = Image.Exif()
  exif[0x0112] = 6
  photo().transpose(Image.Transpose.ROTATE_90).save(root / "photo.jpg", exif=exif)
  photo().save(root / "photo2.jpg")
  (root / "photos").mkdir()
  photo().save(root / "photos" / "a.png")
  photo(90, 50).convert("L").save(root / "photos" / "b.jpg")
  photo().convert("P").save(root / "photos" / "c.gif")


class Workspace:
  """A scratch folder with the repository's files linked in; runs the documented commands in order."""

  def __init__(self, root, slim_checkpoint):
    self.root = root
    self.tmp = root / "tmp"
    self.tmp.mkdir()
    for name in os.listdir(helpers.REPO_ROOT):
      if not name.startswith((".", "__")) and name != "runs":
        os.symlink(os.path.join(helpers.REPO_ROOT, name), root / name)
    make_stand_ins(root, slim_checkpoint)
    self.failures = {}

  def run_through(self, index):
    """Runs COMMANDS[:index + 1] that have not run yet; returns the last one's failure or None."""
    for command in COMMANDS[:index + 1]:
      if command.text not in self.failures:
        self.failures[command.text] = self.run(command)
    return self.failures[COMMANDS[index].text]

  def run(self, command):
    key = adaptation_key(command)
    adaptation = ADAPTATIONS[key] if key else AS_WRITTEN
    if isinstance(adaptation, Skip):
      return None
    argv = [self.adapt(self.to_tmp(word), adaptation) for word in command.argv] + list(adaptation.append)
    if argv[0] != "python":
      return f"Documented command `{command.text}`: no way to run {argv[0]}; give it an entry in ADAPTATIONS"
    shown = "" if list(command.argv) == argv else f" (ran as `{shlex.join(argv)}`)"
    argv = [sys.executable] + argv[1:]
    # As a user runs it: TensorFlow's C++ start-up lines are the command's to hide, not the test's.
    env = {key: value for key, value in os.environ.items() if key != "TF_CPP_MIN_LOG_LEVEL"}
    env["TMPDIR"] = str(self.tmp)
    env.update(self.to_tmp(assignment).split("=", 1) for assignment in command.env)
    try:
      result = subprocess.run(argv, cwd=self.root, capture_output=True, text=True, timeout=TIMEOUT_S,
                              env=env)
    except subprocess.TimeoutExpired:
      return (f"Documented command `{command.text}`{shown} did not end in {TIMEOUT_S} s: "
              "give it an adaptation in ADAPTATIONS (a smaller preset, fewer steps)")
    if result.returncode not in adaptation.exit_codes:
      return (f"Documented command `{command.text}`{shown} exited {result.returncode}; stderr ends:\n"
              f"{stderr_tail(result.stderr)}")
    noise = [line for line in result.stderr.splitlines() if STARTUP_NOISE.match(line)]
    if noise:
      return f"Documented command `{command.text}` printed TensorFlow's start-up lines: {noise[:3]}"
    if adaptation.prints not in result.stdout:
      return f"Documented command `{command.text}` did not print {adaptation.prints!r}: {result.stdout[-2000:]}"
    return None

  def to_tmp(self, word):
    """An absolute /tmp/ path (alone or after `=`) inside the scratch folder's tmp/."""
    return re.sub(r"(^|=)/tmp/", lambda m: f"{m.group(1)}{self.tmp}/", word)

  @staticmethod
  def adapt(word, adaptation):
    for old, new in adaptation.replace:
      word = word.replace(old, new)
    if adaptation.preset and word.startswith("--config="):
      word = f"{word.split(':')[0]}:{adaptation.preset}"
    return word


def stderr_tail(stderr):
  return "\n".join(stderr.strip().splitlines()[-STDERR_TAIL_LINES:])


@pytest.fixture(scope="module")
def workspace(module_tmp, slim_inception_checkpoint):
  return Workspace(module_tmp("readme"), slim_inception_checkpoint)


@pytest.mark.slow
@pytest.mark.parametrize("index", range(len(COMMANDS)), ids=[c.text for c in COMMANDS])
def test_readme_command_runs(workspace, index):
  adaptation = ADAPTATIONS.get(adaptation_key(COMMANDS[index]))
  if isinstance(adaptation, Skip):
    pytest.skip(adaptation.why)
  failure = workspace.run_through(index)
  assert failure is None, failure
