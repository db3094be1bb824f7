"""The trackers a run reports to (``--report_to``): the project and run names they file it under, and wandb offline
unless the user is logged in. Where each writes, and how to open it: docs/trackers.md.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from settings.config import Resolved

logger = logging.getLogger(__name__)

# The project trackers file a run under, unless the user names one: transformers' default is "huggingface" for all.
PROJECT = "wordle-grpo"
HF_DEFAULT_PROJECT = "huggingface"  # TrainingArguments.project's default: counts as not set


def name_the_run(resolved: Resolved, resuming: bool = False) -> None:
    """Trackers file the run under ``wordle-grpo``, named after its output directory, unless the user named them.

    transformers (5.x) gives trackio ``args.project`` and ``args.run_name`` (none: a random name), wandb
    ``$WANDB_PROJECT`` and ``args.run_name``. A named run also lets trackio, which transformers closes at the end
    of training, reopen the same run for the final evaluation (``training.before_after``) instead of a new one.
    TensorBoard needs nothing: it writes under ``output_dir/runs/`` unless ``$TENSORBOARD_LOGGING_DIR`` says
    otherwise.
    """
    args = resolved.training
    if not args.report_to:
        return
    wandb = "wandb" in args.report_to
    named = args.run_name is not None
    if not named:
        # wandb's own variable for the name would lose to an explicit run_name, so it is the user's choice here.
        chosen = os.environ.get("WANDB_NAME") if wandb else None
        args.run_name = chosen or Path(args.output_dir).resolve().name
    if args.project == HF_DEFAULT_PROJECT:
        # Neither transformers nor trackio reads TRACKIO_PROJECT itself; a user who set it meant it.
        args.project = os.environ.get("TRACKIO_PROJECT", PROJECT)
    if wandb:
        os.environ.setdefault("WANDB_PROJECT", PROJECT)
    projects = (("trackio", args.project), ("wandb", os.environ.get("WANDB_PROJECT")))
    where = [f"{tracker} project {project!r}" for tracker, project in projects if tracker in args.report_to]
    logger.info("tracking run %r%s", args.run_name, "".join(f", {w}" for w in where))
    if "trackio" in args.report_to and not (named or resuming) and args.run_name in _trackio_runs(args.project):
        # trackio continues a run of the same name: a new run into a directory named as an earlier one's would
        # add its steps to that run's curves.
        logger.warning(
            "trackio: project %r already holds a run named %r, and this run's logs will continue it: pass "
            "--run_name to keep them apart",
            args.project,
            args.run_name,
        )


def _trackio_runs(project: str) -> list[str]:
    """The names of the runs this machine's trackio holds in ``project`` (none: a project not yet created)."""
    import trackio  # only a run that reports to trackio needs it

    try:
        return [run.name for run in trackio.Api().runs(project)]
    except ValueError:  # trackio's answer for a project it does not hold
        return []


def offline_wandb_unless_logged_in(resolved: Resolved) -> None:
    """wandb would otherwise stop to ask for a login; runs stay offline (``wandb sync`` later) unless the user has one."""
    logged_in = os.environ.get("WANDB_API_KEY") or "api.wandb.ai" in _read(Path.home() / ".netrc")
    if "wandb" in resolved.training.report_to and not logged_in and "WANDB_MODE" not in os.environ:
        os.environ["WANDB_MODE"] = "offline"
        logger.info("wandb: no login found, logging offline under ./wandb (upload later with `wandb sync`)")


def _read(path: Path) -> str:
    return path.read_text(errors="replace") if path.is_file() else ""
