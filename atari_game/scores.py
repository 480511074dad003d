"""Reference scores of the 57 Atari games: human-normalized scores, and the Atari-5 estimate of their median.

A human-normalized score (HNS) puts a game's score on the scale where a uniformly random policy scores 0 and a
professional human games tester scores 1: ``(score - random) / (human - random)``. Papers report the median HNS over
the 57 games of the Arcade Learning Environment; `atari5_median` estimates it from five games.

Sources:

* The random and human scores (no-op starts: each episode begins with 1 to 30 no-op actions, and is cut at 108,000
  frames) are the table of DeepMind's DQN Zoo, ``dqn_zoo/atari_data.py`` in github.com/google-deepmind/dqn_zoo
  (the same table at commits 402ba5c8 and 359945dc), written here as our own table. Its random scores are those of
  Mnih et al. 2015, "Human-level control through deep reinforcement learning" (Nature; Extended Data Table 2) for
  49 games, and of van Hasselt et al. 2016 ("Deep RL with Double Q-learning") for the rest. Its human scores are
  the later papers' column, Wang et al. 2016 ("Dueling Network Architectures") and van Hasselt et al. 2016, as
  collected in Badia et al. 2020 ("Agent57", ICML), not Nature's, which differ in places (Nature: Breakout 31.8,
  Pong 9.3; here 30.5 and 14.6), as most papers since do. Its random scores agree with google-research/
  reincarnating_rl ``reincarnating_rl/atari_scores.py`` for 56 of the 57 games (not Video Pinball).
* The Atari-5 estimate is the regression of Aitchison, Sweetser & Hutter 2023, "Atari-5: Distilling the Arcade
  Learning Environment down to Five Games" (ICML 2023; arXiv 2210.02019). The model is fitted by ``atari5.py`` in
  github.com/maitchison/Atari-5 (commit 118cad5; its ``transform`` and ``fit_model``); the fitted coefficients and
  the relative error are the ``'Atari_5'`` entry of ``AtariScoreNormalizer.SUBSETS`` in ``tools/plot_util.py`` of
  the first author's github.com/maitchison/PPO (commit d3e3228). Refitting that model on the repository's
  ``dataset.csv`` (least squares, no intercept, the 44 agents scored on all five games) gives the same five
  coefficients to 14 significant digits.

Traps, checked against the sources:

* Names: this table's keys are ale-py ROM ids (``atari_game.game.resolve_game``), and so are DQN Zoo's. Other tables
  spell them otherwise: "James Bond" / ``JamesBond`` (``jamesbond``), "Montezuma's Revenge" (``montezuma_revenge``),
  "Up'n Down" / ``UpNDown`` / ``upndown`` (``up_n_down``), "Q*bert" / ``QBert`` (``qbert``), "River Raid" /
  ``RiverRaid`` (``riverraid``), "H.E.R.O." (``hero``), "Pitfall!" (``pitfall``, not ``pitfall2``), and the Atari-5
  repository drops every space and underscore (``battlezone``, ``namethisgame``). `human_normalized`,
  `atari5_median` and ``atari-game report`` take any spelling ``resolve_game`` takes: all of these, so a paper's
  table can be read as it is written.
* Video Pinball: DQN Zoo's random score is 16,256.9 against a human 17,667.9, a span of 1,411 points, so its HNS is
  ill-conditioned: Rainbow's 533,936.5 is an HNS of 367 here. Other tables take its random score as 0.0
  (reincarnating_rl's ``atari_scores.py``; the ``Random`` column of ``Atari-Human.csv`` in the Atari-5 repository,
  whose ``DQN_Random`` column has 15,720.98), where the same score is an HNS of 30.2. DQN Zoo's own comment: the
  random score "is sometimes greater than the human score under other evaluation methods". Never mix two tables.
* No game here has human <= random (which would flip the sign of its HNS); Double Dunk's span is the smallest in
  points (-18.6 to -16.4), so there one point of score is 0.45 of HNS.
"""

from __future__ import annotations

import math
import types
from collections.abc import Mapping
from typing import overload

import numpy as np

from atari_game.game import resolve_game

# ROM id: (random, human), no-op starts; see the module docstring for where each number comes from.
_REFERENCE = {
    "alien": (227.8, 7127.7),
    "amidar": (5.8, 1719.5),
    "assault": (222.4, 742.0),
    "asterix": (210.0, 8503.3),
    "asteroids": (719.1, 47388.7),
    "atlantis": (12850.0, 29028.1),
    "bank_heist": (14.2, 753.1),
    "battle_zone": (2360.0, 37187.5),
    "beam_rider": (363.9, 16926.5),
    "berzerk": (123.7, 2630.4),
    "bowling": (23.1, 160.7),
    "boxing": (0.1, 12.1),
    "breakout": (1.7, 30.5),
    "centipede": (2090.9, 12017.0),
    "chopper_command": (811.0, 7387.8),
    "crazy_climber": (10780.5, 35829.4),
    "defender": (2874.5, 18688.9),
    "demon_attack": (152.1, 1971.0),
    "double_dunk": (-18.6, -16.4),
    "enduro": (0.0, 860.5),
    "fishing_derby": (-91.7, -38.7),
    "freeway": (0.0, 29.6),
    "frostbite": (65.2, 4334.7),
    "gopher": (257.6, 2412.5),
    "gravitar": (173.0, 3351.4),
    "hero": (1027.0, 30826.4),
    "ice_hockey": (-11.2, 0.9),
    "jamesbond": (29.0, 302.8),
    "kangaroo": (52.0, 3035.0),
    "krull": (1598.0, 2665.5),
    "kung_fu_master": (258.5, 22736.3),
    "montezuma_revenge": (0.0, 4753.3),
    "ms_pacman": (307.3, 6951.6),
    "name_this_game": (2292.3, 8049.0),
    "phoenix": (761.4, 7242.6),
    "pitfall": (-229.4, 6463.7),
    "pong": (-20.7, 14.6),
    "private_eye": (24.9, 69571.3),
    "qbert": (163.9, 13455.0),
    "riverraid": (1338.5, 17118.0),
    "road_runner": (11.5, 7845.0),
    "robotank": (2.2, 11.9),
    "seaquest": (68.4, 42054.7),
    "skiing": (-17098.1, -4336.9),
    "solaris": (1236.3, 12326.7),
    "space_invaders": (148.0, 1668.7),
    "star_gunner": (664.0, 10250.0),
    "surround": (-10.0, 6.5),
    "tennis": (-23.8, -8.3),
    "time_pilot": (3568.0, 5229.2),
    "tutankham": (11.4, 167.6),
    "up_n_down": (533.4, 11693.2),
    "venture": (0.0, 1187.5),
    "video_pinball": (16256.9, 17667.9),  # ill-conditioned: see the module docstring
    "wizard_of_wor": (563.5, 4756.5),
    "yars_revenge": (3092.9, 54576.9),
    "zaxxon": (32.5, 9173.3),
}

#: The 57 games of the Arcade Learning Environment benchmark, as sorted ale-py ROM ids.
ATARI_57: tuple[str, ...] = tuple(sorted(_REFERENCE))
#: A uniformly random policy's score on each of `ATARI_57` (no-op starts): HNS 0. Read-only.
RANDOM_SCORES: Mapping[str, float] = types.MappingProxyType({game: _REFERENCE[game][0] for game in ATARI_57})
#: A professional human games tester's score on each of `ATARI_57` (no-op starts): HNS 1. Read-only.
HUMAN_SCORES: Mapping[str, float] = types.MappingProxyType({game: _REFERENCE[game][1] for game in ATARI_57})

#: The five games whose HNS `atari5_median` takes.
ATARI_5: tuple[str, ...] = ("battle_zone", "double_dunk", "name_this_game", "phoenix", "qbert")
#: The Atari-5 regression's weight of each game of `ATARI_5` (no intercept), as fitted by its authors. Read-only.
ATARI5_COEFFICIENTS: Mapping[str, float] = types.MappingProxyType(
    {
        "battle_zone": 0.3819751237831753,
        "double_dunk": 0.0679099488887574,
        "name_this_game": 0.310804148620847,
        "phoenix": 0.12412619402774641,
        "qbert": 0.08048518286466755,
    }
)
#: The relative error of `atari5_median` that its authors state: 0.104, i.e. 10.4% of the 57-game median.
#: It is the 10-fold cross-validated mean absolute error of the fitted log10(1 + median HNS in percent), times ln 10
#: (``relative_error = cv_mae * np.log(10) * 100`` in ``atari5.py``): a typical error over the 44 published
#: agents the model was fitted on, not a bound. The paper's abstract rounds it to "within 10% of their true values".
ATARI5_STATED_ERROR: float = 0.104


@overload
def human_normalized(game: str, score: float) -> float: ...
@overload
def human_normalized(game: str, score: np.ndarray) -> np.ndarray: ...
def human_normalized(game: str, score: float | np.ndarray) -> float | np.ndarray:
    """The human-normalized score (HNS) of `score` on `game`: ``(score - random) / (human - random)``.

    Args:
        game: one of the 57 games of `ATARI_57`, in any spelling `atari_game.game.resolve_game` takes
            (``"MsPacman"``, ``"ms_pacman"``, ``"ALE/MsPacman-v5"``).
        score: an episode's (or a mean) undiscounted game score, or an array of them.

    Returns:
        0.0 at ``RANDOM_SCORES[game]``, 1.0 at ``HUMAN_SCORES[game]``: a float for a scalar score, a float64 array
        of the same shape for an array.

    Raises:
        ValueError: `game` is not a game ale-py knows, or is one without reference scores (not in `ATARI_57`).
    """
    rom = resolve_game(game)
    if rom not in _REFERENCE:
        raise ValueError(
            f"game: {game!r} ({rom}) has no reference scores: random and human scores are known only for the 57 "
            f"games listed in atari_game.scores.ATARI_57"
        )
    random, human = _REFERENCE[rom]
    # A scalar stays a Python float; anything with a shape becomes a float64 array.
    if np.ndim(score):
        return (np.asarray(score, dtype=np.float64) - random) / (human - random)
    return (float(score) - random) / (human - random)


def atari5_median(hns: Mapping[str, float]) -> float:
    """The Atari-5 estimate of the median HNS over the 57 games, from the HNS of the five games of `ATARI_5`.

    The regression of Aitchison, Sweetser & Hutter (2023), on HNS in percent (``x = 100 * hns``)::

        log10(1 + median) = sum(c[g] * log10(1 + max(x[g], 0)) for g in ATARI_5)

    with `ATARI5_COEFFICIENTS` as ``c`` and no intercept, so five scores at random play give 0. The estimate is
    within `ATARI5_STATED_ERROR` (relative) of the true median on a typical published agent.

    Args:
        hns: the human-normalized score (as `human_normalized` gives it: 1.0 is human) of each of the five games,
            keyed by name in any spelling `atari_game.game.resolve_game` takes; other games are ignored, so the HNS
            of all 57 games will do (each game once: one given twice, under two spellings, is refused).

    Returns:
        The estimated 57-game median HNS (1.0 is human), never below 0.

    Raises:
        ValueError: a game of `ATARI_5` is missing (the message names it) or has a score that is not finite; any
            game is given twice under two spellings; or a key is not a game ale-py knows.
    """
    # Key the scores by ROM id, so that "BattleZone" and "battle_zone" both count.
    scores: dict[str, float] = {}
    for name, value in hns.items():
        rom = resolve_game(name)
        if rom in scores:
            raise ValueError(f"hns: {rom} is given twice (as {name!r} and another spelling)")
        scores[rom] = float(value)
    missing = [game for game in ATARI_5 if game not in scores]
    if missing:
        raise ValueError(
            f"hns: no human-normalized score for {', '.join(missing)}; the Atari-5 estimate needs all of "
            f"{', '.join(ATARI_5)}"
        )
    not_finite = [game for game in ATARI_5 if not math.isfinite(scores[game])]
    if not_finite:
        raise ValueError(f"hns: the score of {', '.join(not_finite)} is not finite: {[scores[g] for g in not_finite]}")
    # The authors' transform: HNS in percent, clipped at 0, then log10(1 + x); a weighted sum, transformed back.
    log_median = sum(c * math.log10(1.0 + max(100.0 * scores[game], 0.0)) for game, c in ATARI5_COEFFICIENTS.items())
    return (10.0**log_median - 1.0) / 100.0
