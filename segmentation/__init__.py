"""Semantic segmentation: a fully-convolutional encoder-decoder trained on patches, evaluated on whole images."""
