"""What every stage's trainer adds to TRL's (GRPO's and the supervised warm start's): the peak memory in each training
log, so that it reaches the log history, the progress line and every ``report_to`` tracker alike; saved files that
hold the trained adapter alone; a checkpoint that a full disk cannot leave half-written; and the progress bar that
writes each log as one readable line."""

from __future__ import annotations

import functools
import shutil
from collections.abc import Callable
from pathlib import Path

from transformers import ProgressCallback, TrainerCallback

from runtime import distributed
from runtime.device import peak_memory_mb
from settings.errors import ConfigError, disk_full_reason, is_disk_full

REFERENCE = "ref"  # the adapter name TRL gives its reference copy of a continued adapter


class Watched:
    """A mixin before TRL's trainer class: ``class WordleGRPOTrainer(Watched, GRPOTrainer)``. ``watch_games(check,
    steps)`` adds validation games (a ``training.rollout.GameCheck``) to the logs every ``steps`` steps, and once
    before the first: the learning curve."""

    check: Callable | None = None
    check_steps = 0

    def watch_games(self, check: Callable | None, steps: int) -> None:
        self.check, self.check_steps = check, steps
        if check is not None and steps:
            self.add_callback(_CheckAtStart(self))

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        if "loss" in logs:
            # The fullest process, on the device it trains on (use_cpu on a GPU machine measures RSS).
            logs["peak_memory_mb"] = distributed.max_over_processes(peak_memory_mb(self.args.device.type))
            step = self.state.global_step
            if self.check is not None and self.check_steps and step % self.check_steps == 0:
                logs.update(self.check(self))
        super().log(logs, start_time)

    def _save(self, output_dir: str | None = None, state_dict: dict | None = None) -> None:
        # GRPO continuing an adapter with beta > 0 gives the model a frozen copy of it, "ref", TRL's reference. Saved
        # files hold the adapter that trains alone: the card's adapter, and on --resume the reference is rebuilt
        # from the adapter the run continues, not read back from a checkpoint.
        model = self.accelerator.unwrap_model(self.model)
        if REFERENCE not in (getattr(model, "peft_config", None) or {}):
            return super()._save(output_dir, state_dict)
        model.save_pretrained = functools.partial(model.save_pretrained, selected_adapters=[model.active_adapter])
        try:
            return super()._save(output_dir, state_dict)
        finally:
            del model.save_pretrained  # the instance's: the class's method is back

    def _save_checkpoint(self, model, trial) -> None:
        try:
            super()._save_checkpoint(model, trial)
        except Exception as exc:  # torch's and safetensors' writers say it in their own words (is_disk_full)
            if not is_disk_full(exc):
                raise
            # Half a checkpoint: --resume would skip it, and it holds space the rerun needs. The earlier
            # checkpoints are whole (transformers rotates them out only after a save succeeds).
            folder = Path(self.args.output_dir) / f"checkpoint-{self.state.global_step}"
            if self.args.should_save:
                shutil.rmtree(folder, ignore_errors=True)
            earlier = any(folder.parent.glob("checkpoint-*/trainer_state.json"))
            then = (
                "the earlier ones are intact: free space, then rerun with --resume"
                if earlier
                else "there is no earlier one: free space, then rerun without --resume"
            )
            raise ConfigError(
                f"the disk filled while saving {folder.name} in {folder.parent} ({disk_full_reason(exc)}); removed that "
                f"half-written checkpoint, {then}"
            ) from None


# A stage's log line: (the log, its step, max_steps, the device it trains on) -> the line, or None to leave the log to
# transformers' own rendering (the end-of-training summary).
LineFormat = Callable[[dict[str, float], int, int, str], "str | None"]


class RunProgress(ProgressCallback):
    """transformers' progress bar, with each log written as one readable line instead of a raw dict."""

    def __init__(self, line: LineFormat) -> None:
        super().__init__()
        self.line = line

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not state.is_world_process_zero or self.training_bar is None or logs is None:
            return
        line = self.line(logs, state.global_step, state.max_steps, args.device.type)
        if line is None:
            super().on_log(args, state, control, logs=logs, **kwargs)
        else:
            self.training_bar.write(line)


class _CheckAtStart(TrainerCallback):
    """The periodic game check once before the first step, so the learning curve starts at step 0; and a log at each
    check's step, whatever ``logging_steps`` says, since the check rides on that step's log."""

    def __init__(self, trainer: Watched) -> None:
        self.trainer = trainer

    def on_train_begin(self, args, state, control, **kwargs):
        if state.global_step == 0:
            self.trainer.log(self.trainer.check(self.trainer))

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step % self.trainer.check_steps == 0:
            control.should_log = True
        return control
