"""GRPO on TRL: the training rows, game-mode rollouts, the trainer, its callbacks, the run itself from
the output directory's checks to the adapter and its card, and the evaluation before and after.

``grpo_train.py`` is the entry point; this package is what it is built from.
"""
