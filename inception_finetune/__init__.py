"""Fine-tuning TF-Slim's Inception V4 from its published checkpoints."""
