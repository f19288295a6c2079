"""Config values: every preset passes the checks, and every bad value is one line naming its key."""
import ast
import importlib
import math
import re

import pytest

from common.app.trainers import find_trainers
from common.contract import checks
from common.contract import config as config_lib
from common.contract.errors import ConfigError
from helpers import REPO_ROOT
from helpers import make_config
from helpers import run_python

# trainer -> (configs/<name>.py, the task module whose validate_config checks its own sections), of
# every trainer of the repository: a new one is tried on SHARED, and its keys asked for below.
TRAINERS = {trainer.package: (trainer.config_module.rpartition(".")[2], f"{trainer.package}.task")
            for trainer in find_trainers(REPO_ROOT)}

# (key, bad value) for base_config()'s keys, tried on every trainer. None and True get past
# ml_collections' type check when set in Python, and presets set values without it.
SHARED = [
    ("seed", -1), ("seed", 2**32), ("seed", None),
    ("deterministic", None), ("mixed_precision", None),
    ("train.batch_size", 0), ("train.num_steps", 0), ("train.num_steps", True),
    ("train.log_every", 0), ("train.eval_every", -1), ("train.checkpoint_every", 0),
    ("train.keep_checkpoints", 0), ("train.steps_per_loop", 0), ("train.max_consecutive_nonfinite", 0),
    ("train.accumulate_steps", 0), ("train.accumulate_steps", -2), ("train.ema_decay", 1.0),
    ("train.ema_decay", -0.1), ("train.ema_decay", math.nan),
    ("train.profile_steps", (4,)), ("train.profile_steps", (8, 4)), ("train.profile_steps", (0, 4)),
    ("train.stall_update_ratio", -1.0), ("train.stall_update_ratio", math.nan),
    ("train.stall_timeout_s", -1.0), ("train.seconds_per_loop", -1.0), ("train.stall_timeout_s", math.inf),
    ("train.on_stall", "hang"),
    ("train.jit_compile", None), ("train.reset_input_pipeline", None),
    ("train.best_metric", None), ("train.best_mode", "highest"),
    ("optimizer.learning_rate", 1e-50), ("optimizer.learning_rate", 2.0),
    ("optimizer.learning_rate", math.nan), ("optimizer.allow_extreme_learning_rate", None),
    ("optimizer.decay_steps", 0), ("optimizer.decay_rate", 0.0), ("optimizer.decay_rate", 1.5),
    ("optimizer.staircase", None), ("optimizer.clipnorm", -1.0),
    ("optimizer.name", "adagrad"), ("optimizer.schedule", "step"), ("optimizer.warmup_steps", -1),
    ("optimizer.boundaries", (20, 10)), ("optimizer.boundaries", (0, 10)),
    ("optimizer.final_fraction", 1.0), ("optimizer.power", 0.0),
    ("optimizer.adam.beta_1", 1.0), ("optimizer.adam.beta_2", -0.1), ("optimizer.adam.epsilon", 0.0),
    ("optimizer.adamw.weight_decay", -0.01), ("optimizer.sgd.momentum", 1.0), ("optimizer.sgd.nesterov", None),
    ("optimizer.rmsprop.rho", 1.5), ("optimizer.rmsprop.momentum", -0.5), ("optimizer.rmsprop.epsilon", 0.0),
    ("summaries.scalars_every", 0), ("summaries.images_every", 0), ("summaries.histograms_every", 0),
    ("summaries.max_outputs", -1), ("summaries.histograms", None), ("summaries.bias_histograms", None),
    ("summaries.activation_histograms", None), ("summaries.activation_stats", None),
    ("summaries.max_summary_bytes", 0),
    ("hardware.memory_limit_mb", -1), ("hardware.memory_growth", None),
    ("distribution.strategy", "ring"), ("distribution.strategy", None),
]

# (key, bad value) for each trainer's own sections.
OWN = {
    "segmentation": [
        ("data.normalization", "foo"), ("data.skip_bad_files", None), ("data.class_names", ("a", 3)),
        ("data.npy_pixel_max", 0.0), ("data.patch_size", 30),  # not a multiple of the stride 4
        # data.read_settings, from validate_config: every data value before any file is listed.
        ("data.source", "pictures"), ("data.num_classes", 1), ("data.num_classes", 6),  # 6: synthetic has 5
        ("data.ignore_label", 3), ("data.patches_per_image", 0), ("data.shuffle_buffer", 0),
        ("data.eval_batch_size", 0), ("data.eval_max_pixels", 0), ("data.eval_fraction", 1.0),
        ("data.duplicates", "maybe"), ("data.image_size", 0), ("data.num_train_images", 0),
        ("data.num_eval_images", 0), ("data.tfds_download", None),
        ("data.augment.scale_range", (2.0, 0.5)), ("data.augment.scale_range", (0.0, 1.0)),
        ("data.augment.scale_range", (1.0,)), ("data.augment.scale_range", (0.5, 8.0)),  # at most 4
        ("data.augment.scale_range", ("0.5", 2.0)), ("data.augment.crop_padding", -1),
        ("data.augment.flip", None), ("data.augment.brightness", 1.0),
        ("data.augment.contrast", -0.1), ("data.augment.saturation", 1.5), ("data.augment.hue", 0.6),
        ("data.augment.rotation", 181.0), ("data.augment.rotation", -15.0), ("data.augment.rotation", None),
        ("model.widths", ()), ("model.widths", (-8, 16)), ("model.widths", ("",)),  # "" from the CLI
        ("model.widths", ("8", 16)), ("model.widths", (8.5, 16)), ("model.widths", (True, 8)),
        ("model.widths", None), ("model.weight_decay", -1e-4), ("model.sync_batch_norm", None),
        ("model.output_stride", 0), ("model.output_stride", 3),  # 3: patch 28 is not a multiple of 12
        ("model.context_rates", (0,)), ("model.context_rates", (1.5,)),
        ("loss.class_weights", (1.0, -1.0, 1.0, 1.0, 1.0)), ("loss.class_weights", (0, 0, 0, 0, 0)),
        ("loss.class_weights", (1.0, 2.0)), ("loss.class_weights", ("a",) * 5),
        ("loss.cross_entropy_weight", -1.0), ("loss.cross_entropy_weight", 0.0),  # 0: no term left
        ("loss.ohem", None), ("loss.ohem_threshold", 1.5), ("loss.ohem_threshold", math.nan),
        ("loss.ohem_min_kept", -1), ("loss.ohem_min_kept", True), ("loss.dice_weight", -0.5),
        ("loss.dice_weight", None), ("loss.lovasz_weight", math.inf), ("loss.lovasz_weight", None),
        # segmentation/inference.read_inference (stride against the window: test_segmentation_inference.py).
        ("eval.window", -1), ("eval.stride", -1), ("eval.stride", None),
        ("eval.flip", None), ("eval.scales", ()), ("eval.scales", (0.0, 1.0)), ("eval.scales", (1.0, 5.0)),
        ("eval.scales", ("1",)), ("eval.object_vote", None), ("eval.overlays_every", -1),
    ],
    "triplet": [
        ("loss.name", "triplet"), ("loss.margin", -0.1), ("loss.squared", None),
        ("loss.cross_replica_mining", None),
        ("data.source", "voc"), ("data.small_identities", "skip"), ("data.identities_per_batch", 1),
        ("data.images_per_identity", 1),  # a triplet loss needs an anchor and a positive
        ("data.skip_bad_files", None), ("data.random_flip", None), ("data.normalization", "foo"),
        ("data.load_size", 0),
        ("data.crop_size", 0), ("data.crop_size", 32), ("data.eval_batch_size", 0),
        ("data.num_train_identities", 0), ("data.num_eval_identities", 1),
        ("data.images_per_synthetic_identity", 1), ("data.num_pair_folds", 0), ("data.pairs_per_fold", 0),
        ("data.duplicates", "maybe"),  # data.read_settings, from validate_config
        ("data.tfds_download", None), ("data.tfds_eval_fraction", 0.0), ("data.tfds_eval_fraction", 1.0),
        ("model.embedding_size", 0), ("model.widths", ()), ("model.widths", (-4, 8)), ("model.widths", ("",)),
        ("model.weight_decay", -1.0), ("model.bn_momentum", 1.0), ("model.bn_momentum", 1.5),
        ("model.sync_batch_norm", None),
        ("train.batch_size", 9),  # not identities_per_batch x images_per_identity
        ("summaries.max_projector_points", -1),
    ],
    "inception_finetune": [
        ("checkpoint_exclude_scopes", "InceptionV4/Logts"), ("trainable_scopes", "Inceptionv4/Logits"),
        ("ignore_missing_vars", None), ("label_smoothing", 1.0), ("label_smoothing", -0.1),
        ("finetune.head_steps", -1), ("finetune.head_steps", 61),  # the smoke preset trains 60 steps
        ("finetune.learning_rate", 1e-50), ("finetune.learning_rate", 0.0),
        ("finetune.unfreeze_last_blocks", -2), ("finetune.unfreeze_last_blocks", 23),
        ("finetune.aux_loss_weight", -0.4),
        ("model.aux_logits", None), ("model.aux_logits", True),  # needs 107 pixels, smoke has 75
        ("model.dropout_rate", 1.0), ("model.weight_decay", -1.0), ("model.batch_norm_decay", 1.0),
        ("model.hidden_units", -1), ("model.hidden_l2", -1.0), ("model.hidden_dropout_rate", 1.5),
        ("model.logits_stddev", -0.01), ("model.sync_batch_norm", None),
        ("data.image_size", 74), ("data.central_fraction", 1.5), ("data.central_fraction", -0.1),
        ("data.augment", None), ("data.fast_mode", None), ("data.skip_bad_files", None),
        ("data.min_class_count", -1), ("data.labels_offset", -1), ("data.synthetic_image_size", 0),
        # data.read_settings, from validate_config: every data value before any file is listed.
        ("data.source", "voc"), ("data.num_classes", -1), ("data.eval_batch_size", 0),
        ("data.shuffle_buffer", 0), ("data.eval_fraction", 1.0), ("data.oversample_to", -1),
        ("data.duplicates", "maybe"), ("data.synthetic_images_per_class", 1),
        ("data.randaugment_ops", -1), ("data.randaugment_ops", True), ("data.randaugment_magnitude", 11),
        ("data.randaugment_magnitude", -1.0), ("data.mixup_alpha", -0.2), ("data.mixup_alpha", math.nan),
        ("data.cutmix_alpha", -1.0), ("data.mix_prob", 1.5), ("data.mix_switch_prob", -0.1),
        ("data.tfds_download", None),
    ],
}

# Keys without a bad value above, and why: the data modules check them when they read the data
# (tests/test_*_data.py), or they are paths and names, checked when the files are opened.
# trainer: set by the config file alone, refused as a flag (common/app/cli.py).
CHECKED_ELSEWHERE = {
    "segmentation": {
        "trainer", "data.cache_dir", "data.images_dir", "data.masks_dir", "data.train_split", "data.eval_split",
        "data.voc_root", "data.train_pattern", "data.eval_pattern", "data.train_images",
        "data.train_labels", "data.eval_images", "data.eval_labels",
        # Opened with the data set (common/data/tfds_sets.py; tests/test_tfds.py, tests/hostile_table.py).
        "data.tfds_name", "data.tfds_data_dir", "data.tfds_train_split", "data.tfds_eval_split",
    },
    "triplet": {
        "trainer", "data.train_dir", "data.eval_dir", "data.pairs_file", "data.pairs_dir", "data.cache_dir",
        "data.tfds_name", "data.tfds_data_dir", "data.tfds_train_split", "data.tfds_eval_split",
    },
    "inception_finetune": {
        "trainer", "checkpoint_path", "data.train_dir", "data.eval_dir", "data.csv_path", "data.images_dir",
        "data.image_extension", "data.train_pattern", "data.eval_pattern", "data.labels_file",
        "data.cache_dir", "data.tfds_name", "data.tfds_data_dir", "data.tfds_train_split", "data.tfds_eval_split",
    },
}

BAD_VALUES = [(trainer, key, value) for trainer in TRAINERS for key, value in SHARED + OWN.get(trainer, [])]


def validate(trainer, config):
  """Both checks, in the order a run makes them (prepare_run, then make_task)."""
  checks.validate_config(config)
  importlib.import_module(TRAINERS[trainer][1]).validate_config(config)


def presets(config_name):
  """The preset names of a config file, from the error that an unknown one raises (it lists them)."""
  module = importlib.import_module(f"configs.{config_name}")
  with pytest.raises(ConfigError) as error:
    module.get_config("no such preset")
  return ast.literal_eval(str(error.value).split("choose one of ", 1)[1])


@pytest.mark.parametrize("trainer", TRAINERS)
def test_every_preset_passes(trainer):
  config_name = TRAINERS[trainer][0]
  names = presets(config_name)
  assert {"default", "smoke", "gtx960m"} <= set(names)
  # --help lists PRESETS, one line each: every preset has its line, and no line is left over.
  assert sorted(importlib.import_module(f"configs.{config_name}").PRESETS) == sorted(names)
  for name in names:
    validate(trainer, make_config(config_name, name))


@pytest.mark.parametrize("trainer,key,value", BAD_VALUES,
                         ids=[f"{t}-{k}={v!r}" for t, k, v in BAD_VALUES])
def test_bad_value_is_one_line_naming_the_key(trainer, key, value):
  config = make_config(TRAINERS[trainer][0], "smoke", **{key: value})
  with pytest.raises(ConfigError) as error:
    validate(trainer, config)
  message = str(error.value)
  assert key in message and "\n" not in message, message


@pytest.mark.parametrize("trainer", TRAINERS)
def test_every_key_has_a_bad_value_or_is_checked_elsewhere(trainer):
  if trainer not in OWN:  # a trainer new_trainer.py made: SHARED and the bounds are tried on it above
    pytest.skip(f"{trainer}'s own keys have no bad values in OWN of tests/test_config.py yet")
  keys = set(config_lib.flatten_keys(make_config(TRAINERS[trainer][0], "smoke")))
  tried = {key for key, _ in SHARED + OWN.get(trainer, [])}
  elsewhere = CHECKED_ELSEWHERE.get(trainer, set())
  assert elsewhere <= keys
  assert sorted(keys - tried - elsewhere) == [], f"keys of {trainer} without a bad value in OWN or CHECKED_ELSEWHERE"


def test_allow_extreme_learning_rate_widens_the_range_but_not_below_zero():
  overrides = {"optimizer.allow_extreme_learning_rate": True}
  validate("inception_finetune", make_config("inception_v4", "smoke", **overrides, **{
      "optimizer.learning_rate": 1e-50, "finetune.learning_rate": 2.0}))
  for key in ("optimizer.learning_rate", "finetune.learning_rate"):
    with pytest.raises(ConfigError, match=key):
      validate("inception_finetune", make_config("inception_v4", "smoke", **overrides, **{key: -1e-3}))


@pytest.mark.parametrize("module,config_file,override,key", [
    ("triplet.train", "configs/triplet.py", "--config.model.embedding_size=0", "model.embedding_size"),
    ("segmentation.train", "configs/segmentation.py", "--config.model.widths=", "model.widths"),
    ("inception_finetune.train", "configs/inception_v4.py", "--config.train.keep_checkpoints=0",
     "train.keep_checkpoints"),
])
def test_bad_value_on_the_command_line_is_one_error_line_and_exit_code_2(
    tmp_path, module, config_file, override, key):
  result = run_python(["-m", module, f"--config={config_file}:smoke", override, f"--workdir={tmp_path}"])
  errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
  assert result.returncode == 2, result.stderr[-2000:]
  assert len(errors) == 1 and key in errors[0], result.stderr[-2000:]
  assert "Traceback" not in result.stderr


# Sizes in seconds, pixels or distances: the float keys bounded above (the others are rates and weights).
FLOAT_BOUNDED = {"train.seconds_per_loop": 86401.0, "train.stall_timeout_s": 7 * 86400 + 1.0, "loss.margin": 4.5}
# Keys whose value sets another's (helpers.make_config: the triplet's batch is their product), named instead.
NAMED_AS = {"data.identities_per_batch": "train.batch_size", "data.images_per_identity": "train.batch_size"}


@pytest.mark.parametrize("trainer", TRAINERS)
def test_every_count_and_size_has_an_upper_bound_checked_before_any_work(trainer):
  """Every integer key (or sequence of them) of the config, and the float sizes, set past any sensible
  value (2^40; a crop padding as wide as the patch; 100 RandAugment operations) is one line naming the
  key: was a run on padding only (loss 0.0000, exit 0) or out of memory."""
  config = make_config(TRAINERS[trainer][0], "smoke")
  values = {key: config_lib.get_value(config, key) for key in config_lib.flatten_keys(config)}
  cases = [(key, 2**40) for key, value in values.items() if checks._is_int(value)]
  cases += [(key, (2**40,) * len(value)) for key, value in values.items() if isinstance(value, tuple) and value
            and all(checks._is_int(v) for v in value)]
  cases += [(key, value) for key, value in FLOAT_BOUNDED.items() if key in values]
  cases += {"segmentation": [("data.augment.crop_padding", 28), ("data.augment.crop_padding", 100000),
                             ("loss.ohem_min_kept", 28 * 28 + 1)],
            "inception_finetune": [("data.randaugment_ops", 100)]}.get(trainer, [])
  assert len(cases) > 30
  for key, value in cases:
    with pytest.raises(ConfigError) as error:
      validate(trainer, make_config(TRAINERS[trainer][0], "smoke", **{key: value}))
    assert NAMED_AS.get(key, key) in str(error.value) and "\n" not in str(error.value), (key, value, str(error.value))


@pytest.mark.parametrize("trainer, key, value, said", [  # the cases, the line's words
    ("segmentation", "data.augment.crop_padding", 100000, "=100000 must be below data.patch_size=28: a patch"),
    ("triplet", "model.embedding_size", 5000, "=5000 is over its bound 4,096: more channels"),
    ("inception_finetune", "data.randaugment_ops", 100, "=100 is over its bound 14: RandAugment's layers"),
])
def test_an_unbounded_value_says_its_bound_and_why(trainer, key, value, said):
  with pytest.raises(ConfigError, match=re.escape(key + said)):
    validate(trainer, make_config(TRAINERS[trainer][0], "smoke", **{key: value}))


def test_eval_stride_without_eval_window_is_one_line():
  with pytest.raises(ConfigError, match=r"eval.stride=8 is the step between windows, and eval.window=0"):
    validate("segmentation", make_config("segmentation", "smoke", **{"eval.stride": 8}))
