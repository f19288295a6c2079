"""Inception V4 fine-tuning config: `--config=configs/inception_v4.py[:preset]`.

The slim-style keys sit at the top level under TF-Slim's flag names:
`--config.checkpoint_path=.../inception_v4.ckpt`, `checkpoint_exclude_scopes`,
`trainable_scopes`, `ignore_missing_vars`, `label_smoothing` (and
`data.labels_offset`).
"""
import ml_collections

from common.contract.config import apply_preset
from common.contract.config import base_config

# One line each for --help; get_config's presets dict holds their values.
PRESETS = {
    "default": "the fine-tuning recipe at 299x299, 120 classes (synthetic images unless data.source is set)",
    "smoke": "75x75, 10 classes, 60 steps: the same code in minutes on a CPU, for tests",
    "scratch": "random weights, every layer trained, 75x75 (the digits of scripts/make_real_sets.py)",
    "gtx960m": "mixed precision and a batch that fits a 4 GB card (GTX 960M)",
}


def get_config(preset=None):
  config = base_config("inception_finetune")
  # TF-Slim's fine-tuning flags.
  config.checkpoint_path = ""  # a TF-Slim checkpoint (prefix or directory); "" = random initialization
  # TF-Slim's flag: scopes not restored (the new head), comma-separated.
  config.checkpoint_exclude_scopes = "InceptionV4/Logits,InceptionV4/AuxLogits"
  config.trainable_scopes = "InceptionV4/Logits,InceptionV4/AuxLogits"  # phase 1; "" = everything
  # TF-Slim's flag: variables missing from the checkpoint keep their init.
  config.ignore_missing_vars = False
  config.label_smoothing = 0.0  # TF-Slim's flag: the one-hot labels smoothed by this much

  config.train.batch_size = 32
  config.train.num_steps = 6000  # both phases
  config.train.log_every = 50
  config.train.eval_every = 500
  config.train.checkpoint_every = 500
  config.optimizer.learning_rate = 1e-4  # phase 1 (the new head)
  # TF-Slim's fine-tuning recipe used rmsprop (optimizer.rmsprop has its settings) with fixed rates.
  config.optimizer.schedule = "constant"
  config.optimizer.clipnorm = 5.0

  config.finetune = ml_collections.ConfigDict()
  config.finetune.head_steps = 2000  # phase 1: trainable_scopes only; phase 2: the rest of train.num_steps
  config.finetune.learning_rate = 1e-5  # phase 2
  config.finetune.unfreeze_last_blocks = 4  # phase 2 trains these base blocks too (Mixed_7b..7d and 7a); -1 = all
  config.finetune.aux_loss_weight = 0.4  # TF-Slim's weight of the aux head's loss

  config.model = ml_collections.ConfigDict()
  config.model.aux_logits = True  # needs data.image_size >= 107
  config.model.dropout_rate = 0.2  # before PreLogitsFlatten, as in TF-Slim
  config.model.weight_decay = 4e-5  # TF-Slim's l2_regularizer scale on the base's kernels
  config.model.batch_norm_decay = 0.9997  # momentum of the moving statistics, as in TF-Slim
  # BatchNorm statistics over the global batch, not each replica's part (small per-replica batches).
  config.model.sync_batch_norm = False
  config.model.hidden_units = 512  # the new head: a ReLU layer, then dropout, then the logits
  config.model.hidden_l2 = 1e-4  # L2 on the head's hidden kernel
  config.model.hidden_dropout_rate = 0.5  # dropout after the head's hidden layer
  config.model.logits_stddev = 0.01  # truncated normal initialization of the new logits

  config.data = ml_collections.ConfigDict()
  config.data.source = "synthetic"  # synthetic | folder | csv | tfrecord | tfds
  config.data.num_classes = 120  # 0 = from the data (class folders, CSV names, labels file)
  config.data.image_size = 299  # the network's input, height and width
  config.data.central_fraction = 0.875  # evaluation crop
  config.data.augment = True  # False: training images get the evaluation preprocessing
  config.data.fast_mode = True  # TF-Slim's fast color distortion (brightness, saturation)
  # timm's training augmentations, all off by default (inception_finetune/augment.py). RandAugment:
  # this many operations per training image (0 = off) at this strength, in [0, 10].
  config.data.randaugment_ops = 0
  config.data.randaugment_magnitude = 9.0  # timm's rand-m9
  # Mixup and CutMix of each training batch with itself reversed, lambda ~ Beta(alpha, alpha);
  # 0 = off (timm's recipes: 0.8 and 1.0). Labels become soft, label_smoothing on top.
  config.data.mixup_alpha = 0.0
  config.data.cutmix_alpha = 0.0  # CutMix: lambda ~ Beta(alpha, alpha); 0 = off
  config.data.mix_prob = 1.0  # probability that a batch is mixed at all
  config.data.mix_switch_prob = 0.5  # with both alphas on: probability of CutMix rather than mixup
  config.data.eval_batch_size = 32  # evaluation images per batch
  config.data.shuffle_buffer = 1000  # tfrecord and tfds sources' records; file lists are shuffled whole
  config.data.eval_fraction = 0.1  # folder/csv without a separate eval set
  config.data.skip_bad_files = False  # skip and count undecodable files instead of stopping
  # error | warn: an id of csv_path (or an id or name of labels_file) listed twice (warn keeps the
  # first), an image in both train_dir and eval_dir (warn keeps both); warn logs a line instead.
  config.data.duplicates = "error"
  config.data.min_class_count = 20  # the class-balance report flags classes under this
  config.data.oversample_to = 0  # >0: draw each class as though it had at least this many images
  config.data.train_dir = ""  # folder: one subfolder of images per class (Stanford Dogs' Images/)
  config.data.eval_dir = ""  # folder: optional, same class subfolders
  config.data.csv_path = ""  # csv: rows of id,label (the dog-breed labels.csv)
  config.data.images_dir = ""  # csv: images named <id><image_extension>
  config.data.image_extension = ".jpg"  # csv source: the images' file extension
  config.data.train_pattern = ""  # tfrecord: TF-Slim's image/encoded, image/class/label
  config.data.eval_pattern = ""  # tfrecord: the evaluation shards
  config.data.labels_file = ""  # TF-Slim's labels.txt (<id>:<name> lines)
  config.data.labels_offset = 0  # subtracted from TFRecord labels (1 for slim's ImageNet background)
  config.data.cache_dir = ""  # synthetic images are written here; "" = <workdir>/data
  config.data.synthetic_images_per_class = 25  # synthetic source: images per class
  config.data.synthetic_image_size = 96  # synthetic source: their size
  # tfds source (TensorFlow Datasets, requirements-tfds.txt): a data set with an image feature and a
  # ClassLabel feature "label", whose names are the classes (data.num_classes 0 = as many).
  config.data.tfds_name = ""  # tfds source: the data set, e.g. stanford_dogs (the 120 breeds of this recipe)
  config.data.tfds_data_dir = ""  # where the data set is prepared; "" = TFDS's ~/tensorflow_datasets
  config.data.tfds_train_split = "train"  # the training split, in TFDS split syntax, e.g. "train[:90%]"
  config.data.tfds_eval_split = "test"  # the evaluation's split, e.g. "train[90%:]"
  config.data.tfds_download = False  # download and prepare the data set when it is not prepared

  presets = {
      "default": {},
      "smoke": {
          "train.batch_size": 16, "train.num_steps": 60, "finetune.head_steps": 40,
          "train.log_every": 10, "train.eval_every": 60, "train.checkpoint_every": 60,
          "summaries.scalars_every": 10, "summaries.images_every": 60,
          "optimizer.learning_rate": 1e-3, "finetune.learning_rate": 1e-4,
          "finetune.unfreeze_last_blocks": 1, "model.aux_logits": False,
          "data.num_classes": 10, "data.image_size": 75, "data.eval_batch_size": 50,
          "data.synthetic_images_per_class": 20, "data.synthetic_image_size": 64,
          "data.min_class_count": 5,
      },
      # Random weights, every layer trained from the first step, small 75x75 images of a few
      # classes (the digits of scripts/make_real_sets.py). Not enough steps to learn them well: on
      # the 10 digits, training loss 2.38 -> 1.89 and top-1 0.32 (chance 0.10) after 300 steps,
      # 0.45 after 1,000 (README.md, Results on real data).
      "scratch": {
          "checkpoint_path": "", "trainable_scopes": "", "train.batch_size": 16,
          "train.num_steps": 300, "finetune.head_steps": 300, "train.log_every": 25,
          "train.eval_every": 100, "train.checkpoint_every": 100, "optimizer.learning_rate": 1e-3,
          "model.aux_logits": False, "data.num_classes": 0, "data.image_size": 75,
          "data.augment": False, "data.eval_batch_size": 50, "data.min_class_count": 5,
      },
      # The recipe's batch of 32 (TF-Slim's) in two micro-batches of 16:
      # scripts/benchmarking/memory_estimate.py puts phase 2 at a micro-batch of 16 at about 2.9 GB and
      # of 24 at about 4.0 GB (tests/test_inception_train.py checks it); not yet measured on a GTX 960M.
      "gtx960m": {
          "mixed_precision": True, "train.batch_size": 32, "train.accumulate_steps": 2,
          "data.eval_batch_size": 16,
      },
  }
  return apply_preset(config, presets, preset)
