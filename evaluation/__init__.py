"""Full-game evaluation: a player plays whole games of Wordle on held-out secrets, turn by turn.

- ``play.py``     the players (a model, the solver, random baselines) of ``wordle.game``'s loop
- ``constrain.py`` constrained decoding: a logits processor for ``generate`` and a regex for vLLM
- ``metrics.py``  win rate, guesses, invalid/inconsistent/repeat rates and reward means, with 95% CIs
- ``report.py``   JSON, Markdown, PNG plots, emoji replays and a rich table
- ``run.py``      the model and its baselines end to end (what ``evaluate.py`` and ``grpo_train.py`` call)

Whether a reply parses, is a word or wins is decided by ``wordle/`` alone, exactly as the rewards
decide it; the reward means are the reward functions themselves, called on each state played.
"""

from evaluation.metrics import compute_metrics, mean_ci, wilson
from evaluation.play import (
    ModelPlayer,
    RandomAllowedPlayer,
    RandomCandidatePlayer,
    SolverPlayer,
)
from wordle.game import Game, GameView, Player, Turn, classify_reply, play

__all__ = [
    "Game",
    "GameView",
    "ModelPlayer",
    "Player",
    "RandomAllowedPlayer",
    "RandomCandidatePlayer",
    "SolverPlayer",
    "Turn",
    "classify_reply",
    "compute_metrics",
    "mean_ci",
    "play",
    "wilson",
]
