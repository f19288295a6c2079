"""Segmentation trainer config: `--config=configs/segmentation.py[:preset]`."""
import ml_collections

from common.contract.config import apply_preset
from common.contract.config import base_config

# One line each for --help; get_config's presets dict holds their values.
PRESETS = {
    "default": "the README's main job: patches of synthetic scenes, about a minute on 2 CPU cores",
    "smoke": "seconds: the same code on a tiny model and data, for tests and benchmarks",
    "gtx960m": "sized for a 4 GB card (GTX 960M), mixed precision",
    "scenes": ("photos whose objects are larger than a patch: at half resolution, crops at random scales and angles, "
               "a context module"),
    "scenes_128": "small whole scenes of one object (128x128): 128-px crops that hold it, no context module",
}

CPU_PRESET = "default"  # what a preset in mixed precision is told to take on a CPU (common/app/cli.py)


def get_config(preset=None):
  config = base_config("segmentation")
  config.train.batch_size = 32
  config.train.num_steps = 400
  config.train.log_every = 50
  config.train.eval_every = 200
  config.train.checkpoint_every = 200
  config.optimizer.learning_rate = 3e-3
  config.optimizer.decay_steps = 200
  config.optimizer.decay_rate = 0.5
  config.optimizer.clipnorm = 1.0

  config.data = ml_collections.ConfigDict()
  config.data.source = "synthetic"  # synthetic | folder | voc | tfrecord | npy | tfds
  config.data.num_classes = 5  # class ids 0..num_classes-1 (0 the background)
  config.data.ignore_label = 255  # mask value left out of the loss and the metrics
  config.data.patch_size = 28  # training patches are patch_size x patch_size, cut from whole images
  config.data.patches_per_image = 8  # training patches cut from each image per pass
  # Training augmentation (segmentation/augment.py), drawn from the seed and each image's place in
  # the stream, so that a resumed run draws the same; the defaults are off.
  config.data.augment = ml_collections.ConfigDict()
  # (low, high): each patch cut from its image and mask scaled by a factor drawn log-uniformly in it
  # (bilinear image, nearest mask); (1.0, 1.0) = off.
  config.data.augment.scale_range = (1.0, 1.0)
  # Pixels around the scaled image (image 0, mask data.ignore_label) that a patch may reach: patches
  # shift the scene by up to this much. A patch larger than the scaled image holds all of it anyway.
  config.data.augment.crop_padding = 0
  config.data.augment.flip = False  # left and right swapped, image and mask together, half the time
  # Each patch turned about its centre by an angle drawn uniformly within this many degrees either
  # way (image bilinear, mask nearest); 0 = off.
  config.data.augment.rotation = 0.0
  # Photometric jitter of the image, 0 = off: brightness adds at most this to pixels in [0, 1];
  # contrast and saturation multiply by a factor in [1 - value, 1 + value]; hue turns by at most
  # this fraction of the colour wheel.
  config.data.augment.brightness = 0.0
  config.data.augment.contrast = 0.0  # a factor in [1 - contrast, 1 + contrast]; 0 = off
  config.data.augment.saturation = 0.0  # a factor in [1 - saturation, 1 + saturation]; 0 = off
  config.data.augment.hue = 0.0  # a turn of at most this fraction of the colour wheel; 0 = off
  config.data.normalization = "unit"  # see common/data/normalization.py
  config.data.skip_bad_files = False  # skip and count undecodable files instead of stopping
  # error | warn: an image id listed twice in a split file (warn keeps the first) or in both split
  # files (warn keeps it in both); warn logs a line instead of stopping.
  config.data.duplicates = "error"
  config.data.shuffle_buffer = 2048  # training patches shuffled in a buffer of this many (and tfds images)
  config.data.class_names = ()  # () = from the source (synthetic, VOC) or class_<id>
  config.data.eval_batch_size = 8  # when all eval images have one size; else 1
  # The pixels one call of the network sees in evaluation and predict: a whole image (a larger one
  # is refused before training; 4096x2048: about 2.5 GB of activations for the default network), or
  # with eval.window the windows of one call (and then images of any size are evaluated in tiles).
  config.data.eval_max_pixels = 4096 * 2048
  config.data.eval_fraction = 0.1  # held out when a source has no eval split of its own
  config.data.cache_dir = ""  # synthetic scenes are written here; "" = <workdir>/data
  config.data.image_size = 64  # synthetic scenes
  config.data.num_train_images = 200  # synthetic scenes for training
  config.data.num_eval_images = 40  # synthetic scenes for evaluation
  config.data.images_dir = ""  # folder source
  config.data.masks_dir = ""  # folder source: PNG masks of class ids, named as the images
  # folder: files of image ids, one per line (both or neither); voc: split names ("" = train, val).
  config.data.train_split = ""
  config.data.eval_split = ""  # the evaluation's split file (folder) or name (voc)
  config.data.voc_root = ""  # voc source: the VOC2012 folder
  config.data.train_pattern = ""  # tfrecord source
  config.data.eval_pattern = ""  # tfrecord source: the evaluation shards
  config.data.train_images = ""  # npy source: [N, h, w, 3] and [N, h, w]
  config.data.train_labels = ""  # npy source: the training labels [N, h, w]
  config.data.eval_images = ""  # npy source: the evaluation patches
  config.data.eval_labels = ""  # npy source: the evaluation labels
  config.data.npy_pixel_max = 255.0  # float .npy pixels span [0, npy_pixel_max]
  # tfds source (TensorFlow Datasets, requirements-tfds.txt): a data set with an image and a
  # segmentation_mask feature of class ids (mask values from num_classes on are ignored);
  # oxford_iiit_pet's trimaps are read as background 0, pet 1, the border ignored (num_classes=2).
  config.data.tfds_name = ""  # tfds source: the data set, e.g. oxford_iiit_pet
  config.data.tfds_data_dir = ""  # where the data set is prepared; "" = TFDS's ~/tensorflow_datasets
  config.data.tfds_train_split = "train"  # the training split, in TFDS split syntax, e.g. "train[:90%]"
  config.data.tfds_eval_split = "test"  # the evaluation's split, e.g. "train[90%:]"
  config.data.tfds_download = False  # download and prepare the data set when it is not prepared

  # Evaluation and predict (segmentation/inference.py); the SavedModel stays a whole-image network, and
  # evaluate and predict apply these around it too. Sliding windows (mmsegmentation's slide mode):
  # eval.window x eval.window pixels every eval.stride pixels (1 <= stride <= window), the last at
  # the image's edge, each pixel's logits averaged over the windows covering it; 0 = whole images.
  config.eval = ml_collections.ConfigDict()
  config.eval.window = 0
  config.eval.stride = 0
  # Test-time augmentation, off by default: the image mirrored left-right and resized by each scale,
  # each variant's logits brought back to the image's size and averaged.
  config.eval.flip = False
  config.eval.scales = (1.0,)  # e.g. (0.75, 1.0, 1.25)
  # One class per object: each 8-connected region of pixels not called background takes the class
  # most of its pixels are called (segmentation/inference.py's object_vote); off by default.
  config.eval.object_vote = False
  # Every this many training steps, the first summaries.max_outputs evaluation images beside their
  # truth and the model's prediction into TensorBoard (train/, overlays/<i>; segmentation/overlays.py),
  # between evaluations; 0 = off.
  config.eval.overlays_every = 0

  config.model = ml_collections.ConfigDict()
  config.model.widths = (16, 32, 64)  # one encoder level each; total stride 2**(levels-1)
  config.model.weight_decay = 0.0  # L2 on the kernels
  # Logits at 1/output_stride of the input resolution, upsampled bilinearly: objects many pixels
  # wide need no full-resolution layers (output_stride**2 times fewer pixels to compute).
  config.model.output_stride = 1
  # The deepest level's context module (segmentation/model.py): one atrous 3x3 branch per dilation
  # rate beside a 1x1 branch and image pooling; () = off.
  config.model.context_rates = ()
  # BatchNorm statistics over the global batch, not each replica's part (small per-replica batches).
  config.model.sync_batch_norm = False

  config.loss = ml_collections.ConfigDict()
  config.loss.class_weights = ()  # () = all 1; else one weight per class, in every term below
  # The loss is a weighted sum of terms (segmentation/losses.py), as the field combines them
  # (cross-entropy plus Dice or Lovász); a weight of 0 leaves its term out. The pixels' cross-entropy:
  config.loss.cross_entropy_weight = 1.0
  # Online hard-example mining: the cross-entropy of the hard pixels only, those whose probability of
  # their true class is below ohem_threshold, and never fewer than the ohem_min_kept hardest per patch.
  config.loss.ohem = False
  # OHEM: pixels whose true-class probability is below this are hard.
  config.loss.ohem_threshold = 0.7
  config.loss.ohem_min_kept = 100  # OHEM: never fewer hard pixels than this per patch
  # Terms per class, where a class of few pixels counts as much as the background: soft Dice (1 - F1)
  # and Lovász-softmax (a convex surrogate of 1 - IoU, the mIoU's own term).
  config.loss.dice_weight = 0.0
  config.loss.lovasz_weight = 0.0  # the Lovasz-softmax term's weight

  presets = {
      # The synthetic scenes' colours are random, so the network has to learn shapes and textures:
      # mIoU 0.936 after 800 steps (cross-entropy alone: 0.82 after 400, 0.89 after 600, 0.928 after
      # 800). A Dice term added 0.7-1.4 points here (seeds 0, 1) and 2.3-2.7 on the README's npy
      # patches, which start from this preset, at no cost in time (docs/benchmarks.md, Segmentation: losses).
      "default": {"train.num_steps": 800, "optimizer.decay_steps": 400, "loss.dice_weight": 1.0},
      "smoke": {
          "train.num_steps": 30, "train.batch_size": 16, "train.log_every": 10,
          "train.eval_every": 30, "train.checkpoint_every": 30, "summaries.scalars_every": 10,
          "summaries.images_every": 30, "data.num_train_images": 16, "data.num_eval_images": 4,
          "model.widths": (8, 16, 32),
      },
      "gtx960m": {
          "mixed_precision": True, "train.batch_size": 256, "train.num_steps": 2000, "model.widths": (32, 64, 128),
      },
      # Photos whose objects are several times the 28 px patch (digits of 60-200 px on VOC-sized
      # photos, scripts/make_real_sets.py's `scenes`), as the field's scene models do it: crops at a
      # random scale over the objects' size range, four light levels (total stride 32) at output stride
      # 4 ending in the context module (atrous rates 2 and 3 beside image pooling), polynomial decay
      # (power 0.9), at half resolution (crops at scales 0.35-0.7, evaluated and predicted at 0.5): a
      # step costs a quarter, and 9000 steps of 96-px crops scored mIoU 0.72 where 3300 at full
      # resolution scored 0.63 in the same 10 CPU minutes. Four crops from each decoded photo: decoding
      # a photo and its palette mask cost more CPU than the step's network (the input pipeline alone
      # 45 -> 14 ms a batch). 160-px crops, which hold whole digits (21-140 px at those scales): 3500
      # steps scored 0.736 where 9000 of 96 px scored 0.702, at three quarters of the CPU. Crops
      # turned by up to 15 degrees: the network fitted its training digits (0.88 there) but not
      # unseen ones; turned, 0.785 / 0.792 against 0.736 / 0.743 (seeds 0, 1; 30 degrees 0.782 /
      # 0.752) for about a tenth more CPU. It still under-fitted (0.87 on its training photos): 6000
      # steps scored 0.846 against 3500's 0.795; the same CPU spent on width, output stride 2 or batch 16
      # bought less, and a higher rate, elastic distortion and XLA lost (docs/benchmarks.md, Segmentation:
      # the photo scenes preset). It found the digits (foreground-vs-background IoU 0.92) but called
      # parts of one digit other digits: one class per digit (eval.object_vote) scored 0.879 against 0.864.
      "scenes": {
          "data.patch_size": 160, "data.patches_per_image": 4, "data.normalization": "per_image_standardization",
          "data.augment.scale_range": (0.35, 0.7), "data.augment.rotation": 15.0, "eval.scales": (0.5,),
          "eval.object_vote": True,
          "train.batch_size": 8, "train.num_steps": 6000, "train.log_every": 100, "train.eval_every": 6000,
          "train.checkpoint_every": 1000,
          "optimizer.learning_rate": 3e-3, "optimizer.schedule": "polynomial", "optimizer.power": 0.9,
          "model.widths": (16, 32, 64, 128), "model.output_stride": 4, "model.context_rates": (2, 3),
          "loss.dice_weight": 1.0,
      },
      # Small whole scenes of one object each (scripts/make_real_sets.py's 128x128 `voc` set): crops
      # that hold the object, logits at 1/4 resolution and four levels (total stride 32), whose
      # receptive field spans ~190 px. 1200 steps: at 600 the network still under-fitted the digit
      # scenes (mIoU 0.78 there, 0.92 at 1200). The `scenes` recipe scores 0.63 on them: its light
      # levels fit photos' many steps, not these blobs of colour (segmentation/README.md).
      "scenes_128": {
          "data.patch_size": 128, "data.patches_per_image": 1, "data.normalization": "per_image_standardization",
          "train.batch_size": 16, "train.num_steps": 1200, "train.log_every": 50, "train.eval_every": 1200,
          "train.checkpoint_every": 1200, "optimizer.learning_rate": 3e-3, "optimizer.decay_steps": 1200,
          "optimizer.decay_rate": 0.05, "model.widths": (32, 64, 128, 128), "model.output_stride": 4,
      },
  }
  return apply_preset(config, presets, preset)
