"""scripts/benchmark.py's printed tables: the header, a trainer's block and its aligned columns, and
the results as JSON for --json."""
import numpy as np

from scripts.benchmarking.exports import format_exports
from scripts.benchmarking.trainers import BUDGET_MB
from scripts.benchmarking.trainers import GTX960M_GFLOPS


COLUMNS = (
    ("variant", "variant", "{}"),
    ("phase", "phase", "{}"),
    ("first_step_s", "first step s", "{:.1f}"),
    ("train_steps_per_s", "steps/s", "{:.2f}"),
    ("train_images_per_s", "train img/s", "{:.1f}"),
    ("loop_steps_per_s", "loop steps/s", "{:.2f}"),
    ("loop_ratio", "loop/step", "{:.2f}"),
    ("host_peak_mib", "host peak MiB", "{:.0f}"),
    ("gpu_peak_mib", "GPU peak MiB", "{:.0f}"),
    ("estimate_mib", "estimate MiB", "{:.1f}"),
    ("gflop_per_step", "GFLOP/step", "{:.3g}"),
    ("gflops_per_s", "GFLOP/s", "{:.2f}"),
    ("matmul_share", "% of matmul", "{:.1%}"),
)
TEXT_COLUMNS = ("variant", "phase")


def format_header(report, matmul_rates, matmul_size):
  rates = ", ".join(f"{precision} {rate:.1f} GFLOP/s" for precision, rate in matmul_rates.items())
  return f"{report}\nmatmul {matmul_size}x{matmul_size}: {rates}"


def format_table(rows):
  """Aligned columns; those missing from a row (GPU peak without a GPU) are left out, as is the
  phase column of a one-phase trainer."""
  columns = [c for c in COLUMNS if all(c[0] in row for row in rows)]
  if len({row.get("phase") for row in rows}) == 1:
    columns = [c for c in columns if c[0] != "phase"]
  cells = [[title for _, title, _ in columns]]
  cells += [[fmt.format(row[key]) for key, _, fmt in columns] for row in rows]
  widths = [max(len(line[i]) for line in cells) for i in range(len(columns))]
  return "\n".join("  ".join(cell.ljust(width) if key in TEXT_COLUMNS else cell.rjust(width)
                             for (key, _, _), cell, width in zip(columns, line, widths))
                   for line in cells)


def format_trainer(result):
  settings = result["settings"]
  lines = [
      f"== {result['trainer']} (preset {result['preset']}, batch {result['batch_size']}, "
      f"{result['describe']})",
      f"input pipeline alone: {result['input_images_per_s']:.1f} images/s, "
      f"{result['input_feed_ratio']:.2f}x a GTX 960M's FLOP-bound demand ({result['gtx960m_images_per_s']:.1f} "
      f"images/s at {GTX960M_GFLOPS:.0f} GFLOP/s)",
      f"evaluation (the trainer's predict function on {result['eval_images']} images held in "
      "memory): " + ", ".join(f"{precision} {rate:.1f} images/s"
                              for precision, rate in result["eval_images_per_s"].items()),
      format_table(result["rows"]),
  ]
  lines += [f"{variant}: not run: {why}" for variant, why in result["not_run"].items()]
  lines += [
      f"(rates: medians of {settings['windows']} timed windows of "
      + (f"{settings['steps']} steps" if settings["steps"] else
         f"at least {settings['min_window_s']:g} s (1 step at least)")
      + f" after warm-up; first step = tracing, compilation and one step; "
      f"{result['seconds']:.0f} s in all)",
      f"memory estimate of the preset's precision ({result['preset_precision']}, largest phase) "
      f"against the {BUDGET_MB} MiB of a GTX 960M:",
      result["preset_estimate_table"],
  ]
  if result["exports"]:
    lines.append(format_exports(result["exports"]))
  for row in result["rows"]:
    if "gpu_peak_mib" in row and row["variant"].split("+")[0] == result["preset_precision"]:
      error = row["estimate_mib"] / row["gpu_peak_mib"] - 1
      lines.append(f"  measured GPU peak ({row['variant']}, {row['phase']}): {row['gpu_peak_mib']:.1f} "
                   f"MiB against the estimate {row['estimate_mib']:.1f} MiB ({error:+.0%})")
  return "\n".join(lines)


def to_json(value):
  """Results without the private (_) entries, for --json."""
  if isinstance(value, dict):
    return {k: to_json(v) for k, v in value.items() if not str(k).startswith("_")}
  if isinstance(value, (list, tuple)):
    return [to_json(v) for v in value]
  if isinstance(value, (np.integer, np.floating)):
    return value.item()
  return value
