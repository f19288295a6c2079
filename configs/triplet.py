"""Triplet-loss embedding trainer config: `--config=configs/triplet.py[:preset]`."""
import ml_collections

from common.contract.config import apply_preset
from common.contract.config import base_config

# One line each for --help; get_config's presets dict holds their values.
PRESETS = {
    "default": "the FaceNet-style recipe: 182 -> 160 crops, 32 identities x 4 images, 128-d; GPU-sized",
    "smoke": "seconds: the same code on a tiny model and data, for tests",
    "gtx960m": "the default with mixed precision, for a 4 GB card (GTX 960M)",
    "small": "40 px images (the handwritten numbers of scripts/make_real_sets.py), minutes on a CPU",
    "few": "small for 6-10 training identities of handwriting-like images: no flips, soft margin, cosine",
}

CPU_PRESET = "small"  # what a preset in mixed precision is told to take on a CPU (common/app/cli.py)


def get_config(preset=None):
  config = base_config("triplet")
  config.train.num_steps = 3000
  config.train.log_every = 100
  config.train.eval_every = 500
  config.train.checkpoint_every = 500
  # The export (and the model the run ends with) holds the weights of the best evaluation: on few
  # identities the last weights can be worse than the untrained network on held-out ones. The
  # best is chosen on the evaluation set itself, whose figures it then reports. Without
  # verification pairs (no data.pairs_file) the run keeps the best recall_at_1 instead, or, with
  # no held-out identities either, the last weights (said in one line before training).
  config.train.best_metric = "verification_accuracy"
  config.optimizer.learning_rate = 1e-3
  config.optimizer.decay_steps = 500  # the learning rate halves every 500 steps
  config.optimizer.decay_rate = 0.5
  config.optimizer.staircase = True
  config.optimizer.clipnorm = 1.0
  config.summaries.activation_stats = False  # per-layer activation mean and variance; True turns them on
  # TensorBoard's Projector: at each evaluation the embeddings of the first this many held-out images,
  # with their identities, files and thumbnails, in <workdir>/eval (the newest evaluation's only:
  # about 3 MB at 2000 points of 128 values); at most summaries.MAX_PROJECTOR_POINTS (28,900), 0 = none.
  config.summaries.max_projector_points = 2000

  config.data = ml_collections.ConfigDict()
  config.data.source = "synthetic"  # synthetic | folder | tfds
  config.data.identities_per_batch = 32  # P
  config.data.images_per_identity = 4  # K
  # Identities with fewer than K images: error | drop | repeat (reuse their images).
  config.data.small_identities = "error"
  config.data.skip_bad_files = False  # skip and count non-image and undecodable files
  # error | warn: an identity both in train_dir and in eval_dir (warn keeps both and logs a line).
  config.data.duplicates = "error"
  config.data.load_size = 182  # images are resized to this, then cropped
  config.data.crop_size = 160  # random crops for training, center crops for evaluation
  # Random horizontal flips in training: a mirrored face is the same person, mirrored writing is not.
  config.data.random_flip = True
  config.data.normalization = "symmetric"  # see common/data/normalization.py
  config.data.eval_batch_size = 128  # evaluation images per batch
  # folder source: one directory per identity.
  config.data.train_dir = ""
  config.data.eval_dir = ""  # held-out identities for recall@k; "" = none
  config.data.pairs_file = ""  # LFW pairs.txt for verification; "" = none
  config.data.pairs_dir = ""  # image root of pairs_file; "" = eval_dir
  # synthetic source: glyph identities written once as PNG folders.
  config.data.cache_dir = ""  # "" = <workdir>/data
  config.data.num_train_identities = 200  # synthetic identities for training
  config.data.num_eval_identities = 50  # synthetic identities held out for evaluation
  config.data.images_per_synthetic_identity = 8  # images each synthetic identity makes
  config.data.num_pair_folds = 10  # cross-validation folds of the verification pairs (LFW: 10)
  config.data.pairs_per_fold = 30  # same pairs per fold, and as many different pairs
  # tfds source (TensorFlow Datasets, requirements-tfds.txt): a data set with an image feature and a
  # "label" naming the identity (Text, as lfw's person names, or ClassLabel), written once as identity
  # folders under cache_dir; verification pairs drawn from the seed (not LFW's published pairs),
  # num_pair_folds x pairs_per_fold, over the evaluation identities.
  config.data.tfds_name = ""  # tfds source: the data set, e.g. lfw
  config.data.tfds_data_dir = ""  # where the data set is prepared; "" = TFDS's ~/tensorflow_datasets
  config.data.tfds_train_split = "train"  # the training split, in TFDS split syntax, e.g. "train[:90%]"
  config.data.tfds_eval_split = ""  # the evaluation identities' split; "" = held out of the train split
  config.data.tfds_eval_fraction = 0.1  # without tfds_eval_split: identities held out, by a hash of their names
  config.data.tfds_download = False  # download and prepare the data set when it is not prepared

  config.model = ml_collections.ConfigDict()
  config.model.embedding_size = 128  # the embedding's dimension
  config.model.widths = (64, 128, 256, 256)  # stem, then one 1x1 + 3x3 stage each
  config.model.weight_decay = 5e-4  # L2 on the kernels
  config.model.bn_momentum = 0.99  # BatchNorm's moving-average momentum
  # BatchNorm statistics over the global batch, not each replica's part (small per-replica batches).
  config.model.sync_batch_norm = False

  config.loss = ml_collections.ConfigDict()
  # batch_hard | batch_hard_soft | semi_hard | batch_all, or softmax: the same network as a
  # classifier over the training identities (tells a network problem from a triplet problem).
  config.loss.name = "semi_hard"
  config.loss.margin = 0.2  # of the hinge losses; batch_hard_soft's soft margin (Hermans et al.) has none
  config.loss.squared = False  # squared Euclidean distances instead of Euclidean
  # With several replicas, mine hard positives and negatives over the global batch (all replicas'
  # embeddings), as one device would; False mines each replica's own part of the batch.
  config.loss.cross_replica_mining = True

  # A batch is P identities x K images; overriding either updates it.
  config.train.batch_size = (config.data.get_ref("identities_per_batch")
                             * config.data.get_ref("images_per_identity"))

  presets = {
      "default": {},
      "smoke": {
          "train.num_steps": 20, "train.log_every": 10, "train.eval_every": 20,
          "train.checkpoint_every": 20, "summaries.scalars_every": 10, "summaries.images_every": 20,
          "summaries.histograms_every": 20,
          "data.identities_per_batch": 4, "data.images_per_identity": 2, "data.load_size": 20,
          "data.crop_size": 16, "data.num_train_identities": 8, "data.num_eval_identities": 4,
          "data.images_per_synthetic_identity": 3, "data.num_pair_folds": 2, "data.pairs_per_fold": 4,
          "data.eval_batch_size": 32, "model.embedding_size": 8, "model.widths": (4, 8),
      },
      "gtx960m": {
          "mixed_precision": True,
      },
      # Small grayscale-like images (40 px, such as the handwritten numbers of
      # scripts/make_real_sets.py): minutes on a CPU.
      "small": {
          "train.num_steps": 800, "train.eval_every": 400, "train.checkpoint_every": 400,
          "train.log_every": 100, "optimizer.decay_steps": 400,
          "data.identities_per_batch": 16, "data.images_per_identity": 4, "data.load_size": 40,
          "data.crop_size": 36, "model.embedding_size": 64, "model.widths": (16, 32, 64),
      },
  }
  # Few identities (6-10, such as make_real_sets.py --train_identities=8): small's network with
  # Hermans et al.'s soft-margin batch-hard loss, a higher rate decaying on a cosine to 0, no flips
  # (mirrored writing is other writing) and an evaluation every 100 steps for the best weights;
  # docs/benchmarks.md's table has what each change gave on held-out identities.
  presets["few"] = dict(
      presets["small"], **{
          "train.num_steps": 1000, "train.eval_every": 100, "train.checkpoint_every": 100,
          "optimizer.schedule": "cosine", "optimizer.learning_rate": 2e-3,
          "data.identities_per_batch": 6, "data.random_flip": False, "loss.name": "batch_hard_soft"})
  return apply_preset(config, presets, preset)
