"""The trainer's wiring to TRL: profiles and arguments, data, models, callbacks, the embedded tiny model.

``grpo_train.py`` is the entry point; this package holds what it is built from. It builds on
``wordle/`` and ``rewards/`` and neither of them knows about it.
"""
