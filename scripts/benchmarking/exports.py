"""benchmark.py --exports: a trainer's model timed in each export format of scripts/export.py, each
in its own runtime, and their table."""
import os

import keras

from common.app import conversion
from common.app import export_check
from scripts.benchmarking import timing

EXPORTS = (("SavedModel", "saved_model", None), ("ONNX", "onnx", None), ("LiteRT float32", "litert", None),
           ("LiteRT float16", "litert", "float16"), ("LiteRT int8", "litert", "int8"))


def benchmark_exports(task, settings, workdir):
  """A row per export format: ms for one image and images/s on the first evaluation batch of the
  float32 Keras model's SavedModel and of its conversions, each in its own runtime; or
  {"skipped": why} without the export extra."""
  try:
    conversion.require("onnx")
    conversion.require("litert")
  except conversion.ExportError as e:
    return {"skipped": str(e)}
  keras.mixed_precision.set_global_policy("float32")
  saved_model = task.export(task.build_model(), os.path.join(workdir, "saved_model"))
  reference = conversion.load("saved_model", saved_model)
  first = []

  def keep_first_batch(images):
    first[:] = first or [images.numpy()]
    return reference(images=images)

  export_check.evaluate(task, keep_first_batch)  # the uint8 images its evaluation reads
  batch = first[0]
  rows = []
  for name, fmt, quantize in EXPORTS:
    timing.progress(f"{name}: converting and timing")
    path = saved_model
    if fmt != "saved_model":
      path = os.path.join(workdir, f"model-{quantize or 'float32'}.{fmt}")
      conversion.convert(reference, fmt, path, batch.shape[1:3] if fmt == "litert" else None, quantize,
                         list(batch))
    serve = conversion.load(fmt, path)
    seconds = [timing.time_steps(lambda images=images: timing.fetch(serve(images)), settings,
                                 warmup_steps=1)[0]
               for images in (batch[:1], batch)]
    rows.append({"format": name, "one_image_ms": 1000 * seconds[0],
                 "batch_images_per_s": len(batch) / seconds[1]})
  return {"image_size": batch.shape[1:3], "batch_size": len(batch), "rows": rows}


def format_exports(exports):
  if "skipped" in exports:
    return f"exports: skipped ({exports['skipped']})"
  height, width = exports["image_size"]
  lines = [f"exports (scripts/export.py; uint8 {height}x{width} images, preprocessing included, "
           f"each in its own runtime):",
           f"{'format':<16}{'1 image ms':>12}{'batch ' + str(exports['batch_size']) + ' img/s':>16}"]
  lines += [f"{row['format']:<16}{row['one_image_ms']:>12.2f}{row['batch_images_per_s']:>16.1f}"
            for row in exports["rows"]]
  return "\n".join(lines)
