"""The hostile table: for every command, every file, folder, value and moment it meets, the kinds of
bad input (../shared/HOSTILE.md), and for each cell the test that asserts its one line and exit code.

Data only, the suite's index of tests spread over many files; tests/test_hostile.py checks it: every
command of the repository is here, every cell its SURFACES declare is one row, and every row's test
exists and holds the row's words and exit code. A new command, file or flag gets its rows here.

A row: (command or tuple of commands, surface, kind or tuple of kinds, the words of the expected line
(a string or a tuple, each in the test's source or the module names it uses), exit code, the test).
A cell that cannot happen: (..., NA, why). A cell without a test yet: (..., OPEN, why). A row may
name the test of the reader or guard the command shares with others (one reader per kind of file).
Exit code 0 rows are a warning, or the bad input taken as the row says.
"""
NA, OPEN = "n/a", "open"

# The kinds every surface of a category is tried with.
KINDS = {
    "file": ("missing", "empty", "cut short", "wrong type", "another trainer's", "a folder"),
    "output": ("in the way", "read-only", "full disk"),
    "values": ("wrong type", "out of range", "unknown"),
}

SEG, TRI, INC = "segmentation", "triplet", "inception_finetune"
TRAIN = (f"{SEG}.train", f"{TRI}.train", f"{INC}.train")
EVALUATE = (f"{SEG}.evaluate", f"{TRI}.evaluate", f"{INC}.evaluate")
PREDICT = (f"{SEG}.predict", f"{TRI}.predict", f"{INC}.predict")
TRAINER_COMMANDS = TRAIN + EVALUATE + PREDICT
EXPORT, FETCH, LAUNCH = "scripts.export", "scripts.fetch_slim_checkpoint", "scripts.launch_workers"
BENCHMARK, REAL_SETS = "scripts.benchmark", "scripts.make_real_sets"
CONVERT, CHECK_GPU = "scripts.convert_to_tfrecord", "scripts.check_gpu"
NEW_TRAINER = "scripts.new_trainer"

# {command: {surface: (category, extra kinds...) or (None, its kinds...)}}.
SURFACES = {
    **{command: {
        "--config file": (None, "missing", "broken (a Python error)", "another trainer's"),
        "config values": ("values", "only fails later"),
    } for command in TRAINER_COMMANDS},
}
for _command in TRAIN:
  SURFACES[_command].update({
      "workdir": ("output", "locked by another run"),
      "config.json": ("file",),  # read back on a rerun, then rewritten
      "checkpoints and their state file": ("file", "full disk at a save", "a killed save's leftovers",
                                           "input changed since"),
      "saved_model/": ("output",),
      "signals": (None, "at start-up", "inside a compiled call", "while evaluating", "before the export",
                  "during the export", "after the last safe point", "a second signal"),
      "several workers": (None, "one killed", "one stopped", "the lock of a dead worker", "no TF_CONFIG"),
  })
SURFACES[f"{SEG}.train"].update({
    "images and masks": ("file", "skipped with data.skip_bad_files", "EXIF-rotated"),
    "split files": ("file",),
    "data.augment.rotation": (None, "over 180 degrees", "negative", "not a number"),
})
SURFACES[f"{TRI}.train"].update({
    "identity folders": ("file", "skipped with data.skip_bad_files"),
    "pairs.txt": ("file",),
    "initial_eval.json": ("file",),
    "initial_roc.json": ("file",),
})
SURFACES[f"{INC}.train"].update({
    "class images (folders, CSV, TFRecords)": ("file", "skipped with data.skip_bad_files"),
    "labels.csv": ("file",),
    "TF-Slim checkpoint": ("file",),
    "labels.txt, class_balance.csv": (None, "a refused rerun"),
    "mixup, CutMix and RandAugment keys": (None, "alpha below 0", "probability outside [0, 1]",
                                           "magnitude out of range", "not a number"),
})
for _command in EVALUATE + PREDICT:
  SURFACES[_command].update({
      "--workdir": (None, "missing", "no checkpoint", "a file"),
      "config.json": ("file",),
      "checkpoints and their state file": ("file", "rotated away while read"),
      "--saved_model": ("file",),
  })
for _command in EVALUATE:
  SURFACES[_command].update({
      "evaluation data": ("file",),
      "--report_dir": ("output", "left out, a --config.* flag changes the run's config"),
      "signals": (None, "at start-up", "while evaluating", "after the last safe point"),
  })
SURFACES[f"{TRI}.evaluate"]["initial_roc.json"] = ("file",)
SURFACES[f"{INC}.evaluate"]["labels.txt, class_balance.csv"] = ("file",)
for _command in PREDICT:
  SURFACES[_command].update({
      "photos": ("file", "too large", "one bad among good"),
      "flags": ("values", "no photo"),
      "signals": (None, "at start-up", "between photos", "after the last safe point"),
  })
SURFACES[f"{SEG}.predict"]["--output_dir"] = ("output", "a refused run leaves nothing")
SURFACES[f"{SEG}.predict"]["photos"] += ("over data.eval_max_pixels, with eval.window",)
for _command in (f"{SEG}.train", f"{SEG}.evaluate", f"{SEG}.predict"):
  SURFACES[_command]["eval.window, eval.stride, eval.scales"] = (
      None, "window negative", "stride 0 or over the window", "window over data.eval_max_pixels",
      "scales empty or not positive")
SURFACES[f"{TRI}.predict"]["--embed_to, --output"] = ("output", "a refused run leaves nothing",
                                                      "a name the writer changes")
SURFACES[f"{TRI}.predict"]["metrics.json"] = ("file",)
SURFACES[f"{TRI}.predict"]["--threshold_from (an export's JSON)"] = ("file", "not UTF-8", "out of range",
                                                                     "with --threshold")
SURFACES[f"{INC}.predict"]["--output"] = ("output", "a refused run leaves nothing")
SURFACES[f"{INC}.predict"]["labels.txt"] = ("file",)
SURFACES[f"{INC}.predict"]["assets/class_names.txt"] = ("file",)
SURFACES.update({
    EXPORT: {
        "config.json": ("file", "a trainer not importable here", "names no trainer"),
        "checkpoints and their state file": ("file",),
        "metrics.json (triplet)": ("file",),
        "--saved_model": ("file",),
        "the run's saved_model/": ("file",),  # what the export is checked against
        "--output": ("output", "the run's workdir or a folder in it", "an existing file not an export",
                     "a folder where its JSON goes"),
        "flags": ("values", "an extra not installed"),
        "signals": (None, "at start-up", "between stages", "after the last safe point"),
    },
    FETCH: {
        "tarball": ("file", "a flipped byte", "a member escaping the folder"),
        "--url": (None, "not an address", "nothing listening", "the connection dropped"),
        "--sha256, --size": (None, "another sha256", "another size"),
        "--output_dir": ("output", "a broken checkpoint there", "another network's checkpoint there"),
        "signals": (None, "at start-up", "during the download", "while extracting", "after the last safe point"),
    },
    LAUNCH: {
        "files": (None, "any"),
        "flags": (None, "--num_workers missing or not a number", "--num_workers below 1", "no command",
                  "a program that does not exist"),
        "several workers": (None, "one fails", "one killed", "one stopped", "a signal to the launcher"),
    },
    BENCHMARK: {
        "--json": ("output", "a missing folder"),
        "flags": ("values",),
        "signals": (None, "at start-up", "during the run", "after the last safe point"),
    },
    REAL_SETS: {
        "files read": (None, "any"),
        "--output_dir": ("output",),
        ".written.json (a set's record)": ("file", "a file of the set changed since", "other arguments"),
        "flags": (None, "an unknown set", "--train_identities out of range"),
        "signals": (None, "Ctrl-C", "SIGTERM"),
    },
    CONVERT: {
        "images and masks": ("file",),
        "--split_file": ("file",),
        "--output_prefix": ("output", "an interrupted or failed run leaves nothing"),
        "flags": (None, "required flag missing", "--num_classes below 2"),
        "signals": (None, "at start-up", "while converting", "after the last safe point"),
    },
    NEW_TRAINER: {
        "NAME": (None, "not a package name", "a Python keyword", "already importable"),
        "--from": (None, "missing", "unknown"),
        "--dest": ("output", "not a repository of trainers"),
        "signals": (None, "Ctrl-C"),
    },
    CHECK_GPU: {
        "files": (None, "any"),
        "the GPU and TensorFlow's build": (None, "no GPU", "no kernels for it"),
        "signals": (None, "at start-up", "after the last safe point"),
    },
})
# Issue 50, workers:
for _command in TRAIN:
  SURFACES[_command]["several workers"] += ("train.jit_compile with a collective in the forward pass off GPUs",)
# Issue 50, signals:
for _command in TRAIN:
  SURFACES[_command]["signals"] += ("inside a compiled call of minutes", "a second signal inside a compiled "
                                    "call of minutes", "the same signal twice within half a second")
  SURFACES[_command]["config values"] += ("sized for a GPU, run on a CPU",)

# Issue 50, predict:
SURFACES[f"{SEG}.predict"]["--output_dir"] += ("the user's files under its output names", "two photos of one name stem",
                                               "the photos' own folder, twice")
SURFACES[f"{TRI}.predict"]["--embed_to, --output"] += ("the user's file there",)
SURFACES[f"{INC}.predict"]["--output"] += ("the user's file there",)
SURFACES[f"{SEG}.predict"]["photos"] += ("too large, among good ones", "16-100 Mpixel with eval.window")
PREDICT_OUTPUTS = "tests/test_predict_outputs.py::"

# Issue 50, rows:
SURFACES[f"{TRI}.predict"]["metrics.json"] += ("eval of another type",)
SURFACES[f"{TRI}.predict"]["--threshold_from (an export's JSON)"] += ("no export's JSON", "a threshold at or below 0")
SURFACES[EXPORT]["--saved_model"] += ("other outputs under the run's trainer",)
SURFACES[EXPORT]["--output"] += ("an earlier export's name without its JSON", "a file at <output>.json no export wrote")
SURFACES[EXPORT]["the run's threshold (triplet)"] = (None, "at or below 0")
for _command in TRAINER_COMMANDS:
  SURFACES[_command]["config values"] += ("over its upper bound",)
for _command in (f"{SEG}.train", f"{SEG}.evaluate", f"{SEG}.predict"):
  SURFACES[_command]["eval.window, eval.stride, eval.scales"] += ("stride without a window",)

# Issue 50, anyfolder: where the user stands (../shared/HOSTILE.md).
WHERE, ANOTHER_FOLDER = "where the user stands", "another folder, relative and absolute paths"
README_EXAMPLE = "a trainer copied under the README's example name"
for _command in EVALUATE + PREDICT:
  SURFACES[_command][WHERE] = (None, ANOTHER_FOLDER, "another folder, a relative --config")
SURFACES[EXPORT][WHERE] = (None, ANOTHER_FOLDER, README_EXAMPLE)
SURFACES[NEW_TRAINER][WHERE] = (None, f"{README_EXAMPLE}: the suite", f"{README_EXAMPLE}: the container build")

# Issue 54, TensorFlow Datasets: data.source='tfds' (common/data/tfds_sets.py, shared by the trainers).
TFDS_SURFACE = "TensorFlow Datasets (data.source='tfds')"
for _command in TRAIN:
  SURFACES[_command][TFDS_SURFACE] = (
      None, "unknown or empty name", "not prepared, no download", "a split it does not have, or malformed",
      "an empty split", "features of the wrong kind", "the extra not installed", "another split on resume",
      "inside tfds.testing.mock_data")
TFDS = "tests/test_tfds.py::"

# The tests named most often.
BAD_INPUTS = "tests/test_bad_inputs.py::test_bad_input_is_exit_code_2_and_one_error_line"
SKIPPED = "tests/test_bad_inputs.py::test_skip_bad_files_names_and_counts_the_skipped_files"
CONFIG_VALUE = "tests/test_config.py::test_bad_value_is_one_line_naming_the_key"
RUN_CONFIG = "tests/test_run_files.py::test_a_broken_or_missing_config_json_is_one_line_for_evaluate_and_predict"
CORRUPT_CHECKPOINT = "tests/test_run_files.py::test_a_corrupt_checkpoint_is_one_line_naming_its_file_not_a_mismatch"
STATE_FILE = "tests/test_run_files.py::test_a_broken_checkpoint_state_file_is_never_trusted_alone"
ROTATED = "tests/test_run_files.py::test_a_checkpoint_rotated_away_while_read_is_retried_on_the_next_newest"
DAMAGED_SAVED_MODEL = "tests/test_run_files.py::test_a_damaged_or_another_trainers_saved_model_is_one_line"
EVALUATION_PATHS = "tests/test_cli_paths.py::test_bad_evaluation_paths_are_one_line_each"
FETCH_BAD = "tests/test_fetch_slim_checkpoint.py::test_from_file_and_bad_inputs_are_one_line_and_delete_nothing_good"
PREDICT_PIXELS = "tests/test_predict.py::test_a_photo_over_max_pixels_is_one_line_for_every_predict_before_the_model_loads"
PREDICT_LEAVES_NOTHING = "tests/test_predict.py::test_a_refused_or_interrupted_predict_leaves_no_folder_it_made"
HOSTILE = "tests/test_hostile.py::"
INFERENCE = "tests/test_segmentation_inference.py::"
NEW_TRAINER_BAD = "tests/test_new_trainer.py::test_a_bad_name_source_or_destination_is_one_line_and_writes_nothing"

ROWS = [
    # The trainers' command lines: --config and its values (common/app/cli.py, the config checks).
    (TRAINER_COMMANDS, "--config file", "missing", "does not exist (a relative --config is read from the current", 2,
     HOSTILE + "test_a_config_file_missing_broken_or_of_another_trainer_is_one_line"),
    (TRAINER_COMMANDS, "--config file", "broken (a Python error)", "invalid syntax", 2,
     HOSTILE + "test_a_config_file_missing_broken_or_of_another_trainer_is_one_line"),
    (TRAINER_COMMANDS, "--config file", "another trainer's", "is another trainer's config ", 2,
     HOSTILE + "test_a_config_file_missing_broken_or_of_another_trainer_is_one_line"),
    (TRAINER_COMMANDS, "config values", "wrong type", '("train.num_steps", True)', 2, CONFIG_VALUE),
    (TRAINER_COMMANDS, "config values", "out of range", '("train.batch_size", 0)', 2, CONFIG_VALUE),
    (TRAINER_COMMANDS, "config values", "unknown", "unknown config key 'optimizer.learnin_rate'. Did you mean", 2,
     "tests/test_segmentation_train.py::test_misspelt_key_is_one_line_and_exit_code_2"),
    (TRAIN, "config values", "only fails later", "must be increasing positive step", 2,
     "tests/test_schedule_checks.py::test_piecewise_boundaries_are_checked_before_any_data_is_read"),
    (EVALUATE + PREDICT, "config values", "only fails later", NA, "no schedule: they do not train"),

    # Training: the workdir and what a rerun reads back.
    (TRAIN, "workdir", "in the way", '"workdir is a file"', 2, BAD_INPUTS),
    (TRAIN, "workdir", "read-only", "not writable", 2,
     "tests/test_workdir.py::test_a_read_only_or_full_workdir_is_one_line_and_the_checkpoint_still_loads"),
    (TRAIN, "workdir", "full disk", "the disk is full", 2,
     "tests/test_workdir.py::test_a_read_only_or_full_workdir_is_one_line_and_the_checkpoint_still_loads"),
    (TRAIN, "workdir", "locked by another run", ('"workdir locked by another run"', "pid"), 2, BAD_INPUTS),
    (TRAIN, "config.json", "missing", NA, "a new run: written"),
    (TRAIN, "config.json", "cut short", ("is not valid JSON", "it is rewritten by this run"), 0,
     "tests/test_run_files.py::test_a_training_rerun_over_a_broken_config_json_warns_and_rewrites_it_whole"),
    (TRAIN, "config.json", ("empty", "wrong type", "another trainer's"),
     ("config.json is empty; it is rewritten by this run", "config.json holds no keys (a JSON list)",
      "config.json is another trainer's config"), 0,
     HOSTILE + "test_a_rerun_reads_its_broken_run_files_in_one_line"),
    (TRAIN, "config.json", "a folder", "(Is a directory); check the path or ", 2,
     HOSTILE + "test_a_rerun_reads_its_broken_run_files_in_one_line"),
    (TRAIN, "checkpoints and their state file", "missing", NA, "a new run: starts at step 0"),
    (TRAIN, "checkpoints and their state file", ("empty", "wrong type"), "(TensorFlow's list of checkpoints)", 0,
     STATE_FILE),
    (TRAIN, "checkpoints and their state file", "a folder", "cannot rewrite", 2, STATE_FILE),
    (TRAIN, "checkpoints and their state file", "cut short", "is corrupt (checksum does not match)", 2,
     HOSTILE + "test_a_rerun_reads_its_broken_run_files_in_one_line"),
    (f"{SEG}.train", "checkpoints and their state file", "another trainer's", "does not match this model", 2,
     "tests/test_workdir.py::test_a_refused_rerun_leaves_config_json_byte_identical"),
    (f"{TRI}.train", "checkpoints and their state file", "another trainer's", ('"resume"', "raw_embedding"), 2,
     "tests/test_triplet_train.py::test_evaluate_cli_and_bad_input"),
    (f"{INC}.train", "checkpoints and their state file", "another trainer's",
     ('"another model"', "does not match this model"), 2,
     "tests/test_refusals_leave_workdir.py::test_a_refused_inception_rerun_leaves_the_workdir_byte_identical"),
    (TRAIN, "checkpoints and their state file", "full disk at a save", "ckpt-2 is intact", 2,
     "tests/test_workdir.py::test_a_full_disk_at_a_checkpoint_is_one_line_and_keeps_the_last_good_one"),
    (TRAIN, "checkpoints and their state file", "a killed save's leftovers", "ckpt-3_temp", 0,
     "tests/test_workdir.py::test_leftovers_of_a_killed_save_are_removed"),
    ((f"{SEG}.train", f"{TRI}.train"), "checkpoints and their state file", "input changed since",
     "train.batch_size: 4 -> 2", 2, "tests/test_workdir.py::test_changed_input_is_one_line_and_reset_input_pipeline_resumes"),
    (f"{INC}.train", "checkpoints and their state file", "input changed since", "train.batch_size: 99 -> 16", 2,
     "tests/test_refusals_leave_workdir.py::test_a_refused_inception_rerun_leaves_the_workdir_byte_identical"),
    (TRAIN, "saved_model/", "in the way", "is in the way", 2,
     "tests/test_workdir.py::test_a_file_or_symlink_where_the_saved_model_goes_is_one_line"),
    (TRAIN, "saved_model/", "read-only", "is read-only", 2,
     "tests/test_workdir.py::test_export_faults_are_one_line_and_keep_the_previous_saved_model"),
    (TRAIN, "saved_model/", "full disk", "the previous export", 2,
     "tests/test_workdir.py::test_a_full_disk_during_the_export_is_one_line_and_a_rerun_exports"),

    # Training: time, and several workers (the loop and its guard are common/'s).
    (TRAIN + EVALUATE + PREDICT + (EXPORT, FETCH, CONVERT, CHECK_GPU), "signals", "at start-up",
     "during start-up; nothing was written", 130, HOSTILE + "test_every_command_honours_a_signal_at_start_up_and_after_its_end"),
    (TRAIN + EVALUATE + PREDICT + (EXPORT, FETCH, CONVERT), "signals", "after the last safe point",
     "after the run had finished; every output is written", 143,
     "tests/test_cli_output.py::test_a_signal_after_the_last_safe_point_says_everything_was_written"),
    (TRAIN, "signals", "inside a compiled call", "at step 16", 143,
     "tests/test_train_loop.py::test_sigterm_inside_a_call_then_resume_matches_an_uninterrupted_run"),
    (TRAIN, "signals", "while evaluating", "during the evaluation at step 4; checkpoint", 130,
     "tests/test_workdir.py::test_a_signal_stops_a_long_evaluation_before_its_next_batch"),
    (TRAIN, "signals", "before the export", "training is finished and checkpointed", 143,
     HOSTILE + "test_a_signal_at_the_safe_points_of_evaluate_and_of_the_trainers_export"),
    (TRAIN, "signals", "during the export", "the SavedModel", 143,
     HOSTILE + "test_a_signal_at_the_safe_points_of_evaluate_and_of_the_trainers_export"),
    (TRAIN, "signals", "a second signal", "second SIGINT: exiting now", 130,
     "tests/test_workdir.py::test_a_second_signal_exits_at_once"),
    (TRAIN, "several workers", "one killed", "(?:error|interrupted)", 137,
     "tests/test_multi_worker.py::test_a_killed_worker_resumes_with_every_input_position"),
    (TRAIN, "several workers", "one stopped", "exiting with code 142 so that the run is restarted", 142,
     "tests/test_multi_worker.py::test_a_stalled_worker_ends_the_run_with_a_retryable_code_and_a_rerun_finishes"),
    (TRAIN, "several workers", "the lock of a dead worker", "exiting with code 142 so that it is tried again", 142,
     "tests/test_workdir.py::test_a_worker_of_several_finding_the_lock_held_exits_to_be_retried"),
    (TRAIN, "several workers", "no TF_CONFIG", "needs TF_CONFIG", 2,
     "tests/test_multi_worker.py::test_multi_worker_without_tf_config_is_one_line"),

    # segmentation.train's data.
    (f"{SEG}.train", "images and masks", "missing", ('"image a link to nothing"', '"mask a link to nothing"'), 2,
     BAD_INPUTS),
    (f"{SEG}.train", "images and masks", "empty", '"empty folder"', 2, BAD_INPUTS),
    (f"{SEG}.train", "images and masks", "cut short", ('"truncated image, train"', '"truncated mask, eval"'), 2,
     BAD_INPUTS),
    (f"{SEG}.train", "images and masks", "wrong type",
     ('"corrupt image"', '"mask of another size"', '"npy label out of range"'), 2, BAD_INPUTS),
    (f"{SEG}.train", "images and masks", "another trainer's", NA,
     "data belong to no trainer: another layout is files missing or of the wrong type (the rows above)"),
    (f"{SEG}.train", "images and masks", "a folder", "a folder, expected a file", 2,
     "tests/test_common_data.py::test_check_image_names_missing_files_and_folders"),
    (f"{SEG}.train", "images and masks", "skipped with data.skip_bad_files", "files that do not decode: ", 0,
     SKIPPED),
    (f"{SEG}.train", "images and masks", "EXIF-rotated", "EXIF orientation 6 ", 2,
     "tests/test_exif.py::test_an_exif_6_photo_with_a_mask_is_one_line_naming_it"),
    (f"{SEG}.train", "split files", "missing", '"VOC without its split file"', 2, BAD_INPUTS),
    (f"{SEG}.train", "split files", "empty", "split file lists no image ids", 2,
     "tests/test_segmentation_data.py::test_bad_split_files_are_one_line_naming_file_and_line"),
    (f"{SEG}.train", "split files", "cut short", "has no image in", 2,
     "tests/test_segmentation_data.py::test_bad_split_files_are_one_line_naming_file_and_line"),
    (f"{SEG}.train", "split files", "wrong type", '"split file not UTF-8"', 2, BAD_INPUTS),
    (f"{SEG}.train", "split files", "another trainer's", NA, "a list of image ids belongs to no trainer"),
    (f"{SEG}.train", "split files", "a folder", '"split file is a folder"', 2, BAD_INPUTS),
    (f"{SEG}.train", "data.augment.rotation", "over 180 degrees", '("data.augment.rotation", 181.0)', 2, CONFIG_VALUE),
    (f"{SEG}.train", "data.augment.rotation", "negative", '("data.augment.rotation", -15.0)', 2, CONFIG_VALUE),
    (f"{SEG}.train", "data.augment.rotation", "not a number", '("data.augment.rotation", None)', 2, CONFIG_VALUE),

    # triplet.train's data and baselines.
    (f"{TRI}.train", "identity folders", "missing", '"identity image a link to nothing"', 2, BAD_INPUTS),
    (f"{TRI}.train", "identity folders", "empty", '"fewer identities than a batch"', 2, BAD_INPUTS),
    (f"{TRI}.train", "identity folders", "cut short", '"truncated identity image"', 2, BAD_INPUTS),
    (f"{TRI}.train", "identity folders", "wrong type",
     ('"corrupt identity image"', '"non-image file in an identity folder"'), 2, BAD_INPUTS),
    (f"{TRI}.train", "identity folders", "another trainer's", NA,
     "data belong to no trainer: another layout is files missing or of the wrong type (the rows above)"),
    (f"{TRI}.train", "identity folders", "a folder", "a folder, expected a file", 2,
     "tests/test_common_data.py::test_check_image_names_missing_files_and_folders"),
    (f"{TRI}.train", "identity folders", "skipped with data.skip_bad_files", "files that do not decode: ", 0,
     SKIPPED),
    (f"{TRI}.train", "pairs.txt", "missing", "no such pairs file", 2,
     "tests/test_triplet_data.py::test_a_bad_pairs_file_is_one_line_naming_it"),
    (f"{TRI}.train", "pairs.txt", "empty", "expected a header", 2,
     "tests/test_triplet_data.py::test_bad_pairs_file_is_one_line_naming_the_file"),
    (f"{TRI}.train", "pairs.txt", "cut short", "header promises 2 folds of 2 pairs", 2,
     "tests/test_triplet_data.py::test_bad_pairs_file_is_one_line_naming_the_file"),
    (f"{TRI}.train", "pairs.txt", "wrong type", '"pairs file not UTF-8"', 2, BAD_INPUTS),
    (f"{TRI}.train", "pairs.txt", "another trainer's", NA, "LFW's format belongs to no trainer"),
    (f"{TRI}.train", "pairs.txt", "a folder", '"pairs file is a folder"', 2, BAD_INPUTS),
    (f"{TRI}.train", ("initial_eval.json", "initial_roc.json"), "missing", NA,
     "computed before the first step; a resumed run without them goes on without (shown, never trained on)"),
    (f"{TRI}.train", "initial_eval.json", "cut short", "initial_eval.json'} is not valid JSON", 0,
     "tests/test_run_files.py::test_triplet_json_files_read_back_broken_are_one_line_naming_them"),
    (f"{TRI}.train", "initial_eval.json", "wrong type", 'recall_at_1 is "0.2", not a number', 0,
     "tests/test_run_files.py::test_triplet_baselines_of_the_wrong_types_are_set_aside_with_a_warning"),
    (f"{TRI}.train", "initial_eval.json", ("empty", "a folder"),
     ("initial_eval.json is empty; the closing line leaves out", "initial_eval.json cannot be read (Is a directory)"), 0,
     HOSTILE + "test_a_rerun_reads_its_broken_run_files_in_one_line"),
    (f"{TRI}.train", "initial_eval.json", "another trainer's", ('{"miou": 0.5}', "recall_at_1 0.9000 at step 3"), 0,
     HOSTILE + "test_a_rerun_reads_its_broken_run_files_in_one_line"),
    (f"{TRI}.train", "initial_roc.json", "wrong type", "is not the run's baselines (keys far, tar of equal ", 0,
     "tests/test_run_files.py::test_triplet_baselines_of_the_wrong_types_are_set_aside_with_a_warning"),
    ((f"{TRI}.train", f"{TRI}.evaluate"), "initial_roc.json", ("empty", "cut short", "another trainer's", "a folder"),
     ("is empty; the ROC is drawn without the baselines", "the ROC is drawn without them", "not a file"), 0,
     HOSTILE + "test_a_rerun_reads_its_broken_run_files_in_one_line"),

    # inception_finetune.train's data, the TF-Slim checkpoint, and the run files it writes.
    (f"{INC}.train", "class images (folders, CSV, TFRecords)", "missing", '"class image a link to nothing, eval"', 2,
     BAD_INPUTS),
    (f"{INC}.train", "class images (folders, CSV, TFRecords)", "empty", "no files ending in .jpg", 2,
     HOSTILE + "test_an_empty_class_folder_is_one_line"),
    (f"{INC}.train", "class images (folders, CSV, TFRecords)", "cut short", '"truncated class image, train"', 2,
     BAD_INPUTS),
    (f"{INC}.train", "class images (folders, CSV, TFRecords)", "wrong type",
     ('"class image that does not decode"', '"TFRecord label out of range"'), 2, BAD_INPUTS),
    (f"{INC}.train", "class images (folders, CSV, TFRecords)", "another trainer's", NA,
     "data belong to no trainer: another layout is files missing or of the wrong type (the rows above)"),
    (f"{INC}.train", "class images (folders, CSV, TFRecords)", "a folder", "a folder, expected a file", 2,
     "tests/test_common_data.py::test_check_image_names_missing_files_and_folders"),
    (f"{INC}.train", "class images (folders, CSV, TFRecords)", "skipped with data.skip_bad_files",
     "files that do not decode: ", 0, SKIPPED),
    (f"{INC}.train", "labels.csv", "missing", "no such CSV file", 2,
     "tests/test_inception_data.py::test_a_folder_or_nothing_where_the_csv_should_be_is_named"),
    (f"{INC}.train", "labels.csv", "empty", "labels.csv'}: no rows", 2, HOSTILE + "test_an_empty_class_folder_is_one_line"),
    (f"{INC}.train", "labels.csv", "cut short", '"labels.csv empty label"', 2, BAD_INPUTS),
    (f"{INC}.train", "labels.csv", "wrong type", ('"labels.csv not UTF-8"', '"labels.csv of one-hot columns"'), 2,
     BAD_INPUTS),
    (f"{INC}.train", "labels.csv", "another trainer's", NA, "a CSV of ids and labels belongs to no trainer"),
    (f"{INC}.train", "labels.csv", "a folder", '"labels.csv is a folder"', 2, BAD_INPUTS),
    (f"{INC}.train", "TF-Slim checkpoint", "missing", '"missing TF-Slim checkpoint"', 2, BAD_INPUTS),
    (f"{INC}.train", "TF-Slim checkpoint", "empty", "holds no checkpoint", 2,
     "tests/test_slim_checkpoint.py::test_bad_checkpoints_are_one_line_errors"),
    (f"{INC}.train", "TF-Slim checkpoint", "cut short", '"vanished_data"', 2,
     "tests/test_slim_checkpoint.py::test_a_corrupt_checkpoint_is_one_line_naming_it_and_assigns_nothing"),
    (f"{INC}.train", "TF-Slim checkpoint", "wrong type", "is unreadable", 2,
     "tests/test_slim_checkpoint.py::test_bad_checkpoints_are_one_line_errors"),
    (f"{INC}.train", "TF-Slim checkpoint", "another trainer's", '"checkpoint of another network"', 2, BAD_INPUTS),
    (f"{INC}.train", "TF-Slim checkpoint", "a folder", "holds no checkpoint", 2,
     "tests/test_slim_checkpoint.py::test_bad_checkpoints_are_one_line_errors"),
    (f"{INC}.train", "labels.txt, class_balance.csv", "a refused rerun", "assert snapshot(workdir) == before", 2,
     "tests/test_refusals_leave_workdir.py::test_a_refused_inception_rerun_leaves_the_workdir_byte_identical"),
    (f"{INC}.train", "mixup, CutMix and RandAugment keys", "alpha below 0",
     ('("data.mixup_alpha", -0.2)', '("data.cutmix_alpha", -1.0)'), 2, CONFIG_VALUE),
    (f"{INC}.train", "mixup, CutMix and RandAugment keys", "probability outside [0, 1]",
     ('("data.mix_prob", 1.5)', '("data.mix_switch_prob", -0.1)'), 2, CONFIG_VALUE),
    (f"{INC}.train", "mixup, CutMix and RandAugment keys", "magnitude out of range",
     ('("data.randaugment_magnitude", 11)', '("data.randaugment_magnitude", -1.0)'), 2, CONFIG_VALUE),
    (f"{INC}.train", "mixup, CutMix and RandAugment keys", "not a number",
     ('("data.mixup_alpha", math.nan)', '("data.randaugment_ops", True)'), 2, CONFIG_VALUE),

    # evaluate and predict: the run they read.
    (EVALUATE + PREDICT, "--workdir", "missing", "config.json does not exist", 2, RUN_CONFIG),
    (EVALUATE, "--workdir", "no checkpoint", '"workdir without a checkpoint"', 2, EVALUATION_PATHS),
    (EVALUATE, "--workdir", "a file", '"workdir is a file"', 2, EVALUATION_PATHS),
    (PREDICT, "--workdir", "no checkpoint", "error: no checkpoint in", 2,
     "tests/test_predict.py::test_bad_photos_and_flags_are_one_line"),
    (PREDICT, "--workdir", "a file", "'config.json'} does not exist", 2,
     HOSTILE + "test_predict_reads_its_run_files_in_one_line"),
    (EVALUATE + PREDICT, "config.json", ("missing", "empty", "cut short", "another trainer's"),
     ('"missing"', '"empty"', '"cut short"', '"another trainer\'s"'), 2, RUN_CONFIG),
    (EVALUATE + PREDICT, "config.json", "wrong type", ('"a list"', "config.json holds no keys (a JSON list"), 2,
     RUN_CONFIG),  # values of other types: a warning (test_run_files.py's test_config_json_values_of_the_wrong_type_...)
    (EVALUATE + PREDICT, "config.json", "a folder", "'config.json'} does not exist", 2,
     HOSTILE + "test_predict_reads_its_run_files_in_one_line"),
    (EVALUATE + PREDICT, "checkpoints and their state file", "missing", "no checkpoint in", 2,
     EVALUATION_PATHS),
    (EVALUATE + PREDICT, "checkpoints and their state file", ("empty", "wrong type"),
     ('"garbage"', '"empty"', "(TensorFlow's list of checkpoints)"), 0, STATE_FILE),
    (EVALUATE + PREDICT, "checkpoints and their state file", "a folder", '"a folder"', 0, STATE_FILE),
    (EVALUATE + PREDICT, "checkpoints and their state file", "cut short", "is corrupt (checksum does not match)", 2,
     CORRUPT_CHECKPOINT),
    (EVALUATE + PREDICT, "checkpoints and their state file", "another trainer's", "does not match this model and config",
     2, CORRUPT_CHECKPOINT),
    (EVALUATE + PREDICT, "checkpoints and their state file", "rotated away while read",
     "vanished while it was read (the run rotated it away)", 0, ROTATED),
    (EVALUATE + PREDICT, "--saved_model", "missing", "SavedModel {empty}/nothing does not exist", 2, EVALUATION_PATHS),
    (EVALUATE + PREDICT, "--saved_model", ("empty", "cut short"), ('"saved_model.pb empty"', '"variables cut short"'),
     2, DAMAGED_SAVED_MODEL),
    (EVALUATE + PREDICT, "--saved_model", "wrong type", "is a file, not a SavedModel", 2, EVALUATION_PATHS),
    (EVALUATE + PREDICT, "--saved_model", "another trainer's", "is the export of the", 2, DAMAGED_SAVED_MODEL),
    (EVALUATE + PREDICT, "--saved_model", "a folder", "is a folder without saved_model.pb", 2, EVALUATION_PATHS),

    # evaluate: the evaluation data, the report, time.
    (EVALUATE, "evaluation data", "missing", ('"image a link to nothing"', '"class image a link to nothing, eval"'), 2,
     BAD_INPUTS),
    (EVALUATE, "evaluation data", "empty", '"empty folder"', 2, BAD_INPUTS),
    (EVALUATE, "evaluation data", "cut short", ('"truncated image, eval"', '"truncated class image, eval"'), 2,
     BAD_INPUTS),
    (EVALUATE, "evaluation data", "wrong type", '"pairs file not UTF-8"', 2, BAD_INPUTS),
    (EVALUATE, "evaluation data", "another trainer's", "class folders differ from the run's classes", 2,
     "tests/test_inception_data.py::test_an_evaluation_checks_the_evaluation_images_only_with_the_runs_classes"),
    (EVALUATE, "evaluation data", "a folder", ('"split file is a folder"', '"pairs file is a folder"'), 2, BAD_INPUTS),
    (EVALUATE, "--report_dir", "in the way", "a file stands where a folder is needed: choose another --report_dir", 2,
     EVALUATION_PATHS),
    (EVALUATE, "--report_dir", "read-only", "it is not writable: make it writable or ", 2,
     "tests/test_cli_paths.py::test_read_only_report_and_output_folders_are_one_line_each"),
    (EVALUATE, "--report_dir", "full disk", "the disk is full: free some space or choose another {flag}", 2,
     HOSTILE + "test_a_report_or_an_output_on_a_full_disk_is_one_line"),
    (EVALUATE, "--report_dir", "left out, a --config.* flag changes the run's config", "eval-data.eval_split=train", 0,
     "tests/test_segmentation_train.py::test_evaluate_workdir_alone_needs_only_the_evaluation_files"),
    (EVALUATE, "signals", "while evaluating", "during the evaluation; nothing was written", 143,
     HOSTILE + "test_a_signal_at_the_safe_points_of_evaluate_and_of_the_trainers_export"),
    (f"{TRI}.evaluate", "initial_roc.json", "missing", NA, "a run without verification pairs has none: the ROC alone"),
    (f"{TRI}.evaluate", "initial_roc.json", "wrong type", "is not the run's baselines (keys far, tar of equal ", 0,
     "tests/test_run_files.py::test_triplet_baselines_of_the_wrong_types_are_set_aside_with_a_warning"),
    (f"{INC}.evaluate", "labels.txt, class_balance.csv", "missing", NA,
     "the classes are the data's (a run from before these files)"),
    (f"{INC}.evaluate", "labels.txt, class_balance.csv", "empty", ('"empty labels.txt"', '"class_balance.csv empty"'),
     2, "tests/test_run_files.py::test_inception_run_files_are_one_line_for_evaluate"),
    (f"{INC}.evaluate", "labels.txt, class_balance.csv", "cut short",
     ('"labels.txt cut short"', '"class_balance.csv cut short"'), 2,
     "tests/test_run_files.py::test_inception_run_files_are_one_line_for_evaluate"),
    (f"{INC}.evaluate", "labels.txt, class_balance.csv", "wrong type", '"class_balance.csv with a header only"', 2,
     "tests/test_run_files.py::test_inception_run_files_are_one_line_for_evaluate"),
    (f"{INC}.evaluate", "labels.txt, class_balance.csv", "another trainer's",
     '"class_balance.csv of fewer classes than labels.txt"', 2,
     "tests/test_run_files.py::test_inception_run_files_are_one_line_for_evaluate"),
    (f"{INC}.evaluate", "labels.txt, class_balance.csv", "a folder", NA,
     "not a file: the classes are the data's, as when missing"),

    # predict: photos, outputs, flags, time.
    (PREDICT, "photos", "missing", "no such file", 2, "tests/test_predict.py::test_bad_photos_and_flags_are_one_line"),
    (PREDICT, "photos", ("empty", "cut short", "wrong type"), ('"b_empty.jpg"', '"c_cut.jpg"', '"d_text.jpg"'), 2,
     "tests/test_predict.py::test_segmentation_writes_every_good_photos_masks_and_names_each_bad_one"),
    (PREDICT, "photos", "another trainer's", NA, "a photo belongs to no trainer"),
    (PREDICT, "photos", "a folder", "no files ending in", 2, "tests/test_predict.py::test_bad_photos_and_flags_are_one_line"),
    (PREDICT, "photos", "too large", "more than --max_pixels=", 2, PREDICT_PIXELS),
    (f"{SEG}.predict", "photos", "one bad among good", "photos did not read (each named above); the masks of ", 2,
     "tests/test_predict.py::test_segmentation_writes_every_good_photos_masks_and_names_each_bad_one"),
    ((f"{TRI}.predict", f"{INC}.predict"), "photos", "one bad among good", "photos did not read (each named above)", 2,
     "tests/test_predict.py::test_inception_and_triplet_give_every_good_photos_result_and_name_each_bad_one"),
    (f"{SEG}.predict", "photos", "over data.eval_max_pixels, with eval.window",
     ("or set eval.window to evaluate", "wide_mask.png"), 0,
     INFERENCE + "test_a_photo_over_eval_max_pixels_is_refused_naming_eval_window_and_tiled_with_it"),
    ((f"{SEG}.train", f"{SEG}.evaluate", f"{SEG}.predict"), "eval.window, eval.stride, eval.scales",
     ("window negative", "stride 0 or over the window", "window over data.eval_max_pixels",
      "scales empty or not positive"),
     ("eval.window=-1 must be an integer >= 0", "eval.stride=48 must be in [1, eval.window=32]",
      "more than data.eval_max_pixels=8,388,608", "eval.scales=() must be a non-empty sequence"), 2,
     INFERENCE + "test_bad_eval_values_are_one_line"),
    (PREDICT, "flags", "wrong type", "--max_pixels=many: invalid literal for int()", 2,
     HOSTILE + "test_a_bad_flag_of_a_command_is_one_line"),
    (f"{SEG}.predict", "flags", "out of range", "--max_pixels=5,000", 2,
     "tests/test_cli_paths.py::test_a_photo_over_max_pixels_is_one_line_before_the_saved_model_loads"),
    (f"{TRI}.predict", "flags", "out of range", ("--threshold=nan is nan", "--threshold=-1 is -1"), 2,
     "tests/test_predict.py::test_thresholds_and_embedding_files_that_would_mislead_are_refused"),
    (f"{INC}.predict", "flags", "out of range", "--top_k=0 must be 1 or more", 2,
     HOSTILE + "test_predict_reads_its_run_files_in_one_line"),
    (PREDICT, "flags", "unknown", "Unknown command line flag 'max_pixel'", 2, HOSTILE + "test_a_bad_flag_of_a_command_is_one_line"),
    (PREDICT, "flags", "no photo", "no photo given", 2,
     "tests/test_hostile.py::test_a_predict_command_without_a_photo_is_one_line_and_exit_code_2"),
    (f"{SEG}.predict", "--output_dir", "in the way", "(File exists); a file stands ", 2, "tests/test_cli_paths.py::test_bad_predict_paths_are_one_line_each_before_the_saved_model_loads"),
    (f"{SEG}.predict", "--output_dir", "read-only", "it is not writable", 2,
     "tests/test_cli_paths.py::test_read_only_report_and_output_folders_are_one_line_each"),
    ((f"{SEG}.predict", f"{TRI}.predict"), ("--output_dir", "--embed_to, --output"), "full disk",
     ("the disk is full: free some space or choose another {flag}", "choose another --embed_to"), 2,
     HOSTILE + "test_a_report_or_an_output_on_a_full_disk_is_one_line"),
    (f"{INC}.predict", "--output", "full disk", "No space left on device", 2,
     "tests/test_workdir.py::test_a_full_disk_fails_the_write_check_in_one_line_and_leaves_no_probe"),
    ((f"{TRI}.predict", f"{INC}.predict"), ("--embed_to, --output", "--output"), ("in the way", "read-only"),
     ("a file stands where a folder is needed", "it is not writable"), 2,
     HOSTILE + "test_predict_reads_its_run_files_in_one_line"),
    ((f"{SEG}.predict", f"{TRI}.predict", f"{INC}.predict"), ("--output_dir", "--embed_to, --output", "--output"),
     "a refused run leaves nothing", ("is damaged (", "assert not new.exists()"), 2, PREDICT_LEAVES_NOTHING),
    (f"{TRI}.predict", "--embed_to, --output", "a name the writer changes", "name a .npy file", 2,
     "tests/test_predict.py::test_thresholds_and_embedding_files_that_would_mislead_are_refused"),
    (PREDICT, "signals", "between photos", "after 1 of 3 photos; 1 written", 130,
     "tests/test_predict.py::test_a_signal_stops_predict_between_photos_saying_what_was_written"),
    (f"{TRI}.predict", "metrics.json", ("empty", "cut short", "wrong type"),
     ('"is empty"', '"is not valid JSON"', '"holds no keys"'), 0,
     "tests/test_run_files.py::test_triplet_json_files_read_back_broken_are_one_line_naming_them"),
    (f"{TRI}.predict", "metrics.json", "another trainer's", "has none (a run without verification pairs)", 0,
     "tests/test_predict.py::test_the_workdirs_threshold_says_its_step_and_when_there_is_none"),
    (f"{TRI}.predict", "metrics.json", ("missing", "a folder"), "cannot be read ({reason}); pass --threshold", 0,
     HOSTILE + "test_predict_reads_its_run_files_in_one_line"),
    (f"{TRI}.predict", "--threshold_from (an export's JSON)",
     ("missing", "empty", "cut short", "not UTF-8", "wrong type", "a folder", "another trainer's", "out of range",
      "with --threshold"),
     ("cannot be read (No such file or directory)", "is empty", "is not valid JSON", "cannot be read (",
      "holds no keys (a JSON list)", "cannot be read (Is a directory)",
      'describes an export of "segmentation", not of triplet', "threshold is 3, not a distance in (0, 2]",
      "give --threshold or --threshold_from, not both"), 2,
     "tests/test_predict.py::test_a_threshold_from_json_that_does_not_serve_is_one_line_before_the_model_loads"),
    (f"{INC}.predict", "labels.txt", ("missing", "empty", "cut short", "a folder"),
     ("does not exist: give the --workdir of an inception_finetune", "no '<id>:<name>' lines", "expected '<id>:<name>'"),
     2, HOSTILE + "test_predict_reads_its_run_files_in_one_line"),
    (f"{INC}.predict", "labels.txt", "wrong type", "not UTF-8 text", 2,
     "tests/test_inception_data.py::test_bad_labels_files_are_one_line_naming_file_and_line"),
    (f"{INC}.predict", "labels.txt", "another trainer's", NA, "only Inception runs write one"),
    (f"{INC}.predict", "assets/class_names.txt", "cut short", "names 2 classes, the model gives 3", 2,
     "tests/test_predict.py::test_inception_class_names_short_or_not_utf8_are_one_line"),
    (f"{INC}.predict", "assets/class_names.txt", "wrong type", "cannot be read (", 2,
     "tests/test_predict.py::test_inception_class_names_short_or_not_utf8_are_one_line"),
    (f"{INC}.predict", "assets/class_names.txt", ("missing", "a folder"), ("missing: the ids", "a folder: no names"), 0,
     HOSTILE + "test_predict_reads_its_run_files_in_one_line"),
    (f"{INC}.predict", "assets/class_names.txt", "empty", "names 0 classes, the model gives 3", 2,
     HOSTILE + "test_predict_reads_its_run_files_in_one_line"),
    (f"{INC}.predict", "assets/class_names.txt", "another trainer's", NA,
     "another trainer's SavedModel is refused first (--saved_model, another trainer's)"),

    # scripts/export.py.
    (EXPORT, "config.json", "missing", "config.json does not exist", 2,
     "tests/test_export.py::test_a_failed_check_or_a_missing_extra_is_one_line_and_leaves_nothing"),
    (EXPORT, "config.json", ("empty", "cut short", "wrong type", "a folder"),
     ("config.json is empty", "config.json is not valid JSON", "config.json holds no keys (a JSON list)",
      "config.json does not exist"), 2,
     HOSTILE + "test_export_reads_the_run_as_evaluate_does"),
    (EXPORT, "config.json", "another trainer's", NA, "export takes any trainer's run: its config.json says whose"),
    (EXPORT, "config.json", ("a trainer not importable here", "names no trainer"),
     ("is a run of the trainer 'gone', whose code is not importable here ", "names no trainer (trainer None)"), 2,
     "tests/test_new_trainer.py::test_export_runs_the_code_of_the_trainer_the_run_names"),
    (EXPORT, "checkpoints and their state file", "missing", "no checkpoint in", 2,
     HOSTILE + "test_export_reads_the_run_as_evaluate_does"),
    (EXPORT, "checkpoints and their state file", ("empty", "wrong type", "a folder"),
     ('"garbage"', "(TensorFlow's list of checkpoints)"), 0, HOSTILE + "test_export_reads_the_run_as_evaluate_does"),
    (EXPORT, "checkpoints and their state file", "cut short", "is corrupt (checksum does not match)", 2,
     HOSTILE + "test_export_reads_the_run_as_evaluate_does"),
    (EXPORT, "checkpoints and their state file", "another trainer's", "does not match this model", 2,
     HOSTILE + "test_export_reads_the_run_as_evaluate_does"),
    (EXPORT, "metrics.json (triplet)", ("empty", "cut short", "wrong type", "a folder"),
     ('"is empty"', '"is not valid JSON"', 'step is \"ten\", not a step', "cannot be read (Is a directory)",
      "the export's threshold carries no step (-1)"), 0, HOSTILE + "test_export_reads_the_run_as_evaluate_does"),
    (EXPORT, "metrics.json (triplet)", ("missing", "another trainer's"),
     ('"missing": (None, -1, None)', '"another trainer\'s": (\'{"step": 30, "eval": {"miou": 0.5}}\', 30, None)'), 0,
     HOSTILE + "test_export_reads_the_run_as_evaluate_does"),
    (EXPORT, "--saved_model", "missing", '"does not exist"', 2, HOSTILE + "test_export_reads_the_run_as_evaluate_does"),
    (EXPORT, "--saved_model", ("empty", "cut short"), "is damaged (", 2, HOSTILE + "test_export_reads_the_run_as_evaluate_does"),
    (EXPORT, "--saved_model", "wrong type", "is a file, not a SavedModel", 2,
     HOSTILE + "test_export_reads_the_run_as_evaluate_does"),
    (EXPORT, "--saved_model", "a folder", "is a folder without saved_model.pb", 2,
     HOSTILE + "test_export_reads_the_run_as_evaluate_does"),
    (EXPORT, "--saved_model", "another trainer's", "is the export of the", 2, DAMAGED_SAVED_MODEL),
    (EXPORT, "the run's saved_model/", "missing", "none: one made of the weights", 0,
     HOSTILE + "test_export_reads_the_run_as_evaluate_does"),
    (EXPORT, "the run's saved_model/", ("empty", "cut short"), "is damaged (", 2,
     HOSTILE + "test_export_reads_the_run_as_evaluate_does"),
    (EXPORT, "the run's saved_model/", "wrong type", "is a file, not a SavedModel", 2,
     HOSTILE + "test_export_reads_the_run_as_evaluate_does"),
    (EXPORT, "the run's saved_model/", "a folder", "is a folder without saved_model.pb", 2,
     HOSTILE + "test_export_reads_the_run_as_evaluate_does"),
    (EXPORT, "the run's saved_model/", "another trainer's", "is the export of the segmentation trainer", 2,
     HOSTILE + "test_export_reads_the_run_as_evaluate_does"),
    (EXPORT, "--output", "in the way", "is an existing folder; an export never replaces a folder", 2,
     "tests/test_cli_paths.py::test_an_export_output_that_would_replace_what_the_export_did_not_make_is_refused"),
    (EXPORT, "--output", "the run's workdir or a folder in it", ("is the run's --workdir", "a folder of the run"), 2,
     "tests/test_cli_paths.py::test_an_export_output_that_would_replace_what_the_export_did_not_make_is_refused"),
    (EXPORT, "--output", "an existing file not an export", "exists and is not an earlier onnx export", 2,
     "tests/test_cli_paths.py::test_an_export_output_that_would_replace_what_the_export_did_not_make_is_refused"),
    (EXPORT, "--output", "a folder where its JSON goes", "where the export's JSON goes, is a folder", 2,
     "tests/test_cli_paths.py::test_an_export_output_that_would_replace_what_the_export_did_not_make_is_refused"),
    (EXPORT, "--output", "read-only", "it is not writable: make it writable or choose another --output", 2,
     HOSTILE + "test_export_reads_the_run_as_evaluate_does"),
    (EXPORT, "--output", "full disk", "free space or choose another folder; nothing was written", 2,
     "tests/test_export.py::test_a_full_disk_is_one_line_and_leaves_nothing"),
    (EXPORT, "flags", "wrong type", "--quantize=int8 is for --format=litert", 2,
     "tests/test_export.py::test_a_failed_check_or_a_missing_extra_is_one_line_and_leaves_nothing"),
    (EXPORT, "flags", "out of range", "is not a side of 1 to", 2,
     "tests/test_cli_paths.py::test_an_export_image_size_out_of_range_is_one_line"),
    (EXPORT, "flags", "unknown", "--format=tflite: value should be one of", 2, HOSTILE + "test_a_bad_flag_of_a_command_is_one_line"),
    (EXPORT, "flags", "an extra not installed", "pip install -r requirements-export.txt", 2,
     "tests/test_export.py::test_a_failed_check_or_a_missing_extra_is_one_line_and_leaves_nothing"),
    (EXPORT, "signals", "between stages", "during the export to {output}; nothing was ", 143,
     "tests/test_export.py::test_a_signal_during_the_export_says_nothing_was_written"),

    # scripts/fetch_slim_checkpoint.py.
    (FETCH, "tarball", "missing", "--from_file {tarball} does not exist", 2,
     HOSTILE + "test_fetch_from_a_file_that_is_not_there_is_one_line"),
    (FETCH, "tarball", "empty", "is truncated or corrupt (empty file)", 2,
     HOSTILE + "test_fetch_from_a_file_that_is_not_there_is_one_line"),
    (FETCH, "tarball", "cut short", "is truncated or corrupt", 2, FETCH_BAD),
    (FETCH, "tarball", "wrong type", "is not TF-Slim's published checkpoint", 2, FETCH_BAD),
    (FETCH, "tarball", "another trainer's", "is not TF-Slim's published checkpoint", 2, FETCH_BAD),
    (FETCH, "tarball", "a folder", "is a folder, not the tarball", 2, HOSTILE + "test_fetch_from_a_file_that_is_not_there_is_one_line"),
    (FETCH, "tarball", "a flipped byte", "CRC check failed", 2,
     "tests/test_fetch_slim_checkpoint.py::test_a_flipped_byte_is_refused_and_installs_nothing"),
    (FETCH, "tarball", "a member escaping the folder", "is a link to an absolute path; refused, nothing extracted", 2,
     FETCH_BAD),
    (FETCH, "--url", "not an address", "is not a download address", 2,
     "tests/test_fetch_slim_checkpoint.py::test_a_bad_url_and_an_interrupted_extraction_are_one_line"),
    (FETCH, "--url", "nothing listening", "check the network, or download it by hand", 2, FETCH_BAD),
    (FETCH, "--url", "the connection dropped", "stopped at", 2,
     "tests/test_fetch_slim_checkpoint.py::test_a_download_cut_short_is_continued_by_a_range_request"),
    (FETCH, "--sha256, --size", "another sha256", "not the expected", 2, FETCH_BAD),
    (FETCH, "--sha256, --size", "another size", "bytes, not the expected", 2, FETCH_BAD),
    (FETCH, "--output_dir", "in the way", "cannot create --output_dir {output_dir} (File exists)", 2,
     HOSTILE + "test_fetch_from_a_file_that_is_not_there_is_one_line"),
    (FETCH, "--output_dir", "read-only", "it is not writable: make it writable or choose", 2,
     "tests/test_fetch_slim_checkpoint.py::test_a_read_only_output_dir_keeps_the_tarball"),
    (FETCH, "--output_dir", "full disk", "full: free some space or choose another --output_dir", 2,
     "tests/test_fetch_slim_checkpoint.py::test_a_full_disk_while_extracting_keeps_the_download"),
    (FETCH, "--output_dir", "a broken checkpoint there", "replacing it with the published one", 0,
     "tests/test_fetch_slim_checkpoint.py::test_a_broken_checkpoint_in_the_output_dir_is_replaced"),
    (FETCH, "--output_dir", "another network's checkpoint there", "is not replaced: move it away", 2, FETCH_BAD),
    (FETCH, "signals", "during the download", "is kept ({kept:,} bytes): run again to continue it", 130,
     "tests/test_fetch_slim_checkpoint.py::test_a_signal_during_the_download_is_one_line_and_keeps_the_part"),
    (FETCH, "signals", "while extracting", "while extracting {small}; nothing was installed", 143,
     "tests/test_fetch_slim_checkpoint.py::test_a_bad_url_and_an_interrupted_extraction_are_one_line"),

    # scripts/launch_workers.py.
    (LAUNCH, "files", "any", NA, "it reads and writes no file: the workers do"),
    (LAUNCH, "flags", "--num_workers missing or not a number",
     ("argument --num_workers: invalid int value", "the following arguments are required: --num_workers"), 2,
     HOSTILE + "test_launch_workers_without_workers_or_a_command_is_one_line"),
    (LAUNCH, "flags", "--num_workers below 1", "must be at least 1", 2,
     HOSTILE + "test_launch_workers_without_workers_or_a_command_is_one_line"),
    (LAUNCH, "flags", "no command", "no command to run", 2,
     HOSTILE + "test_launch_workers_without_workers_or_a_command_is_one_line"),
    (LAUNCH, "flags", "a program that does not exist", "no such program (on PATH or as a path)", 2,
     "tests/test_hostile.py::test_launch_workers_refuses_a_program_that_does_not_exist"),
    (LAUNCH, "several workers", "one fails", "worker 1 exited with code 3: stopping the others", 3,
     "tests/test_multi_worker.py::test_launcher_gives_each_worker_its_tf_config_and_stops_all_when_one_fails"),
    (LAUNCH, "several workers", "one killed", "(?:error|interrupted)", 137,
     "tests/test_multi_worker.py::test_a_killed_worker_resumes_with_every_input_position"),
    (LAUNCH, "several workers", "one stopped", "exiting with code 142 so that the run is restarted", 142,
     "tests/test_multi_worker.py::test_a_stalled_worker_ends_the_run_with_a_retryable_code_and_a_rerun_finishes"),
    (LAUNCH, "several workers", "a signal to the launcher", "interrupted by SIG\\w+ at step", 130,
     "tests/test_multi_worker.py::test_a_killed_worker_resumes_with_every_input_position"),

    # scripts/benchmark.py.
    (BENCHMARK, "--json", "in the way", "is a folder; name the file to write", 2,
     "tests/test_hostile.py::test_benchmark_json_that_cannot_be_written_is_one_line_before_the_run"),
    (BENCHMARK, "--json", "read-only", "choose another --json", 2,
     "tests/test_hostile.py::test_benchmark_json_that_cannot_be_written_is_one_line_before_the_run"),
    (BENCHMARK, "--json", "full disk", "the disk is full: free some space or ", 2,
     HOSTILE + "test_benchmark_honours_a_signal_and_a_full_disk_in_one_line"),
    (BENCHMARK, "--json", "a missing folder", "a missing folder is made", 0,
     "tests/test_hostile.py::test_benchmark_json_that_cannot_be_written_is_one_line_before_the_run"),
    (BENCHMARK, "flags", ("wrong type", "out of range"),
     ("invalid int value: 'x'", "--windows, --steps and --batch_size must be positive"), 2,
     HOSTILE + "test_benchmark_honours_a_signal_and_a_full_disk_in_one_line"),
    (BENCHMARK, "flags", "unknown", "--variants bfloat16: choose from ", 2,
     HOSTILE + "test_benchmark_honours_a_signal_and_a_full_disk_in_one_line"),
    (BENCHMARK, "signals", ("at start-up", "during the run", "after the last safe point"),
     ("during start-up; nothing was written", "during the benchmark; nothing was written",
      "after the benchmark; every figure is printed"), 143,
     HOSTILE + "test_benchmark_honours_a_signal_and_a_full_disk_in_one_line"),

    # scripts/make_real_sets.py (no TensorFlow: Python's own Ctrl-C).
    (REAL_SETS, "files read", "any", NA, "it reads scikit-learn's bundled digits only"),
    (REAL_SETS, "--output_dir", "in the way", "directory); choose another --output_dir", 2,
     HOSTILE + "test_make_real_sets_in_the_way_full_or_stopped_is_one_line"),
    (REAL_SETS, "--output_dir", "read-only", "error: cannot write {folder}", 2,
     "tests/test_hostile.py::test_make_real_sets_bad_sets_and_a_read_only_folder_are_one_line"),
    (REAL_SETS, "--output_dir", "full disk", "No space left on device", 2,
     HOSTILE + "test_make_real_sets_in_the_way_full_or_stopped_is_one_line"),
    (REAL_SETS, ".written.json (a set's record)",
     ("missing", "empty", "cut short", "wrong type", "another trainer's", "a file of the set changed since",
      "other arguments"), ("written again", "kept: written whole before"), 0,
     HOSTILE + "test_make_real_sets_keeps_a_whole_set_and_writes_again_one_changed_since"),
    (REAL_SETS, ".written.json (a set's record)", "a folder", "(Is a directory); choose another --output_dir", 2,
     HOSTILE + "test_make_real_sets_keeps_a_whole_set_and_writes_again_one_changed_since"),
    (REAL_SETS, "flags", "an unknown set", "error: --sets: unknown bogus; valid: ", 2,
     "tests/test_hostile.py::test_make_real_sets_bad_sets_and_a_read_only_folder_are_one_line"),
    (REAL_SETS, "flags", "--train_identities out of range", "must be in 2..70", 2,
     "tests/test_hostile.py::test_make_real_sets_bad_sets_and_a_read_only_folder_are_one_line"),
    (REAL_SETS, "signals", "Ctrl-C", "holds part of the sets; run the command again to write them whole", 130,
     "tests/test_cli_output.py::test_ctrl_c_in_make_real_sets_is_one_line_and_exit_130"),
    (REAL_SETS, "signals", "SIGTERM", "interrupted by SIGTERM: ", 143,
     HOSTILE + "test_make_real_sets_in_the_way_full_or_stopped_is_one_line"),

    # scripts/convert_to_tfrecord.py (segmentation's readers of images, masks and split files).
    (CONVERT, "images and masks", ("missing", "empty", "cut short", "wrong type", "a folder"),
     ("has no mask", "no files ending in", "does not decode as an image", "a folder, expected"), 2,  # the masks' folder
     HOSTILE + "test_convert_to_tfrecord_reads_and_writes_in_one_line"),
    (CONVERT, ("images and masks", "--split_file"), "another trainer's", NA,
     "data belong to no trainer: another layout is files missing or of the wrong type (the rows above)"),
    (CONVERT, "--split_file", ("missing", "empty", "cut short", "wrong type", "a folder"),
     ("no such split file", "split file lists no image ids", "has no image in", "not UTF-8 text",
      "a folder, expected a split file"), 2, HOSTILE + "test_convert_to_tfrecord_reads_and_writes_in_one_line"),
    (CONVERT, "--output_prefix", ("in the way", "read-only", "full disk", "an interrupted or failed run leaves nothing"),
     ("(Is a directory)", "it is not writable", "the disk is full", "nothing was written"), 2,
     HOSTILE + "test_convert_to_tfrecord_reads_and_writes_in_one_line"),
    (CONVERT, "flags", "required flag missing", "--num_classes and --output_prefix are required", 2,
     HOSTILE + "test_convert_to_tfrecord_reads_and_writes_in_one_line"),
    (CONVERT, "flags", "--num_classes below 2", "1 is not integer >= 2", 2, HOSTILE + "test_a_bad_flag_of_a_command_is_one_line"),
    (CONVERT, "signals", "while converting", "after 1 of 3 images; nothing was written", 143,
     HOSTILE + "test_convert_to_tfrecord_reads_and_writes_in_one_line"),
    (CHECK_GPU, "signals", "after the last safe point", "after the check; nothing was written", 130,
     HOSTILE + "test_every_command_honours_a_signal_at_start_up_and_after_its_end"),

    # scripts/new_trainer.py.
    (NEW_TRAINER, "NAME", ("not a package name", "a Python keyword"),
     ("'Roads' is not a package name: lower-case letters, digits and _", "'class' is not a package name"), 2,
     NEW_TRAINER_BAD),
    (NEW_TRAINER, "NAME", "already importable", "'json' is already an importable module (", 2, NEW_TRAINER_BAD),
    (NEW_TRAINER, "--from", ("missing", "unknown"),
     ("the following arguments are required: --from", "not a trainer of {dest} (its trainers: mini, {TAKEN})"), 2,
     NEW_TRAINER_BAD),
    (NEW_TRAINER, "--dest", "in the way", "exists already: choose another name", 2, NEW_TRAINER_BAD),
    (NEW_TRAINER, "--dest", "not a repository of trainers", "is not a repository of trainers", 2, NEW_TRAINER_BAD),
    (NEW_TRAINER, "--dest", ("read-only", "full disk"), ("Read-only file system", "No space left on device"), 2,
     "tests/test_new_trainer.py::test_a_read_only_or_full_destination_is_one_line_and_leaves_nothing"),
    (NEW_TRAINER, "signals", "Ctrl-C", "interrupted by SIGINT; nothing was written", 130, NEW_TRAINER_BAD),

    # scripts/check_gpu.py: exit 1 when no GPU is usable, the cause said.
    (CHECK_GPU, "files", "any", NA, "it reads and writes no file"),
    (CHECK_GPU, "the GPU and TensorFlow's build", "no GPU", "no NVIDIA GPU found", 1,
     "tests/test_gpu_warning.py::test_check_gpu_without_gpu_exits_1"),
    (CHECK_GPU, "the GPU and TensorFlow's build", "no kernels for it", "result: no usable GPU", 1,
     "tests/test_gpu_warning.py::test_check_gpu_prints_the_fix_and_exits_1"),

    # Issue 50, workers:
    (TRAIN, "several workers", "train.jit_compile with a collective in the forward pass off GPUs",
     "compiles its collective there on GPUs only", 2,
     "tests/test_distributed.py::test_two_replicas_with_xla_match_two_without_or_are_refused_in_one_line"),
    # Issue 50, signals: a call that holds the main thread for minutes (a CPU step of a GPU preset, a
    # first trace) is said every 30 s, and so is what a first signal waits for; a second exits at once.
    (TRAIN, "signals", "inside a compiled call of minutes",
     ("SIGINT: the run writes a checkpoint and stops when the compiled call of steps 3 ", "running for 30 s",
      "interrupted by SIGTERM at step "), 143,
     "tests/test_signals_long_call.py::test_a_long_compiled_call_says_what_a_signal_waits_for_and_a_second_exits_at_once"),
    (TRAIN, "signals", "a second signal inside a compiled call of minutes", "second SIGINT: exiting now", 130,
     "tests/test_signals_long_call.py::test_a_long_compiled_call_says_what_a_signal_waits_for_and_a_second_exits_at_once"),
    (TRAIN, "signals", "the same signal twice within half a second", ("signals._REPEAT_S", "# the same signal"),
     130, "tests/test_workdir.py::test_a_second_signal_exits_at_once"),
    (TRAIN, "config values", "sized for a GPU, run on a CPU",
     ("mixed precision without a GPU", "on a CPU take --config=configs/segmentation.py:default or "), 0,
     "tests/test_gpu_warning.py::test_a_gpu_preset_on_a_cpu_says_what_it_costs_and_the_cpu_preset"),
    # Issue 50, predict:
    (f"{SEG}.predict", "--output_dir", "the user's files under its output names",
     ("exists; predict writes only new files", "img00_mask.png", "digests(path)"), 2,
     PREDICT_OUTPUTS + "test_the_issues_command_lines_leave_the_users_files_as_they_were"),
    (f"{SEG}.predict", "--output_dir", "two photos of one name stem",
     ("would both write", "a/img.jpg", "b/img.jpg"), 2,
     PREDICT_OUTPUTS + "test_the_issues_command_lines_leave_the_users_files_as_they_were"),
    (f"{SEG}.predict", "--output_dir", "the photos' own folder, twice",
     ("not 36: the 9 outputs were not read as photos", "exists_line(folder / \"p0_mask.png\")"), 2,
     PREDICT_OUTPUTS + "test_predict_never_writes_over_a_file_or_reads_its_own_outputs"),
    ((f"{TRI}.predict", f"{INC}.predict"), ("--embed_to, --output", "--output"), "the user's file there",
     ('exists_line(kept / "e.npy", "--embed_to")', 'exists_line(kept / "f.tsv", "--embed_to")',
      'exists_line(kept / "top.csv", "--output")'), 2,
     PREDICT_OUTPUTS + "test_predict_never_writes_over_a_file_or_reads_its_own_outputs"),
    (f"{SEG}.predict", "photos", "too large, among good ones",
     ("more than --max_pixels=8,388,608", "photos did not read (each named above); the masks of the other 1"), 2,
     PREDICT_OUTPUTS + "test_a_folder_with_an_oversize_photo_predicts_the_others_and_names_it"),
    (f"{SEG}.predict", "photos", "16-100 Mpixel with eval.window",
     ("streamed_class_ids", "never the photo"), 0,
     INFERENCE + "test_streamed_class_ids_are_the_argmax_of_the_whole_photos_logits"),
    # Issue 50, rows:
    (f"{TRI}.predict", "metrics.json", "eval of another type", "not an evaluation's record; pass --threshold", 0,
     HOSTILE + "test_a_triplet_threshold_that_serves_no_verification_is_said_by_export_and_predict"),
    (f"{TRI}.predict", "--threshold_from (an export's JSON)", ("no export's JSON", "a threshold at or below 0"),
     ("is no export's JSON (its ", "below every distance: no pair would be the same"), 2,
     HOSTILE + "test_a_triplet_threshold_that_serves_no_verification_is_said_by_export_and_predict"),
    (EXPORT, "the run's threshold (triplet)", "at or below 0", "carries its run's verification threshold, which", 0,
     HOSTILE + "test_a_triplet_threshold_that_serves_no_verification_is_said_by_export_and_predict"),
    (EXPORT, "--saved_model", "other outputs under the run's trainer", "gives embeddings, not logits", 2,
     HOSTILE + "test_export_refuses_a_saved_model_of_other_outputs_and_files_it_did_not_make"),
    (EXPORT, "--output", ("an earlier export's name without its JSON", "a file at <output>.json no export wrote"),
     "does not say {foreign} is an earlier onnx export", 2,
     HOSTILE + "test_export_refuses_a_saved_model_of_other_outputs_and_files_it_did_not_make"),
    # Issue 50, anyfolder: where the user stands (cli.own_config, scripts/repository_root.py, deploy/Dockerfile).
    (EVALUATE + (EXPORT,), WHERE, ANOTHER_FOLDER, ("os.path.relpath(triplet_smoke_run.workdir)",
                                                    "run_export.trainer_of(workdir)"), 0,
     "tests/test_cli_paths.py::test_commands_that_read_a_run_work_from_another_folder"),
    (PREDICT, WHERE, ANOTHER_FOLDER, ("--workdir={os.path.relpath(run, elsewhere)}", "cwd=elsewhere"), 0,
     "tests/test_cli_paths.py::test_predict_runs_from_another_folder_with_relative_and_absolute_paths"),
    (EVALUATE + PREDICT, WHERE, "another folder, a relative --config",
     ("does not exist (a relative --config is read from the current ", "give the path of one, e.g. --config={own}"), 2,
     "tests/test_cli_paths.py::test_commands_that_read_a_run_work_from_another_folder"),
    (EXPORT, WHERE, README_EXAMPLE, ('"scripts/export.py", f"--workdir=runs/{NEW}"', "cwd=dest"), 0,
     "tests/test_new_trainer.py::test_a_copys_script_runs_the_copys_new_trainer_from_its_root"),
    (NEW_TRAINER, WHERE, f"{README_EXAMPLE}: the suite", ("NEW, OTHER, TAKEN", "swap = [(example, NEW)]"), 0,
     "tests/test_new_trainer.py::test_the_readme_template_route_in_a_fresh_copy_and_virtual_environment"),
    (NEW_TRAINER, WHERE, f"{README_EXAMPLE}: the container build", ('"pip", "install", "--no-deps", "-e", "."',
                                                                    "image_files(str(root))"), 0,
     "tests/test_deploy.py::test_the_image_files_install_every_trainer_one_added_by_new_trainer_included"),
    # Issue 54, TensorFlow Datasets: each trainer's reader of the shared common/data/tfds_sets.py.
    (TRAIN, TFDS_SURFACE, "unknown or empty name", ("is not a TensorFlow Datasets data set",
                                                      "data.tfds_name must be set for data.source='tfds'"), 2,
     TFDS + "test_a_bad_data_set_split_or_feature_is_one_line"),
    (TRAIN, TFDS_SURFACE, "not prepared, no download", ("is not prepared in", ": run `tfds build mnist "), 2,
     TFDS + "test_a_bad_data_set_split_or_feature_is_one_line"),
    (TRAIN, TFDS_SURFACE, "a split it does not have, or malformed", ("Unknown split 'validation'",
                                                                       "data.tfds_eval_split='test[:50' of"), 2,
     TFDS + "test_a_bad_data_set_split_or_feature_is_one_line"),
    (TRAIN, TFDS_SURFACE, "an empty split", "holds no examples", 2,
     TFDS + "test_a_bad_data_set_split_or_feature_is_one_line"),
    (TRAIN, TFDS_SURFACE, "features of the wrong kind", ("from a feature 'segmentation_mask' (Image); the data set has",
                                                          "from a feature 'label' (ClassLabel)"), 2,
     TFDS + "test_a_bad_data_set_split_or_feature_is_one_line"),
    (TRAIN, TFDS_SURFACE, "the extra not installed", "tfds_sets.MISSING", 2,
     TFDS + "test_without_the_extra_a_tfds_run_says_how_to_install_it"),
    (TRAIN, TFDS_SURFACE, "another split on resume", "was written with another input pipeline (train", 2,
     TFDS + "test_a_run_resumed_after_sigterm_ends_as_a_straight_run_and_a_changed_split_is_refused"),
    (TRAIN, TFDS_SURFACE, "inside tfds.testing.mock_data", "cannot train inside ", 2,
     TFDS + "test_inside_mock_data_a_command_line_says_a_run_needs_a_prepared_data_set"),
    (TRAINER_COMMANDS, "config values", "over its upper bound", ("must be below data.patch_size", "is over its bound"),
     2, "tests/test_config.py::test_an_unbounded_value_says_its_bound_and_why"),
    ((f"{SEG}.train", f"{SEG}.evaluate", f"{SEG}.predict"), "eval.window, eval.stride, eval.scales",
     "stride without a window", "is the step between windows, and eval.window=0", 2,
     "tests/test_config.py::test_eval_stride_without_eval_window_is_one_line"),
]
