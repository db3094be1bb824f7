"""The machine a run is on: its device and memory, and the processes a launcher started.

It knows nothing of Wordle, GRPO or the configuration: everything above builds on it.
"""
