"""Training: datasets, the epoch loop, a whole run (`fit`), DDP, checkpoints and plots.

Plain functions (`train_one_epoch`, `evaluate`, `lr_at`) and a checkpoint that is a dict; no Trainer.
"""
