"""Input readers that take plain values, never the config: listings (listing), text files and
duplicates (text_inputs), up-front image checks (image_checks),
class labels (class_labels), TFRecord shards (tfrecords), streamed .npy (npy),
the sources' shared pieces (sources) and pipelines' (pipeline), normalization. Imports
common.contract and common.runtime."""
