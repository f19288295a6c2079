"""Input readers that take plain values, never the config: listings and up-front image checks, text
files, TFRecord shards, streamed .npy, normalization. Imports common.contract and common.runtime."""
