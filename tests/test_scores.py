"""atari_game.scores against its sources: the reference table, human_normalized, and the Atari-5 estimate checked on
Rainbow's published scores.

tests/data/rainbow_scores.csv holds Rainbow's per-game scores with no-op starts from the appendix table of Hessel et al.
2018, "Rainbow: Combining Improvements in Deep Reinforcement Learning" (AAAI), for the 54 games that table reports: it
has no James Bond, River Raid or Up'n Down (jamesbond, riverraid, up_n_down). The numbers were taken from the
"Rainbow (noop)" column of RAINBOW.csv in github.com/maitchison/Atari-5 (commit 118cad5), and checked equal, all 54,
against the "Original Reported Scores" column of examples/atari/reproduction/rainbow/README.md in github.com/pfnet/pfrl
(commit 5e67f4a), a transcription made independently of the first. (Atari-5's RAINBOW.csv also has an Up'n Down of
103,600 and its "fixed" copy a River Raid of 22,500: numbers not in the paper's table, so left out here.)

tests/data/reference_scores_atari5.csv holds, for all 57 games, the "Random" and "Human" columns of Atari-Human.csv in
github.com/maitchison/Atari-5 (commit 118cad5), the table that repository normalizes scores with: numbers as written
there, games renamed to ROM ids by resolve_game ("James bond" is jamesbond, "up n down" up_n_down), its "DQN_Random" and
"Human_Top" columns left out. It is a transcription other than DQN Zoo's, and not a copy of it: 27 of its random scores
have two decimals (Alien 227.75, where DQN Zoo has 227.8), as has its Surround human score (6.53, for 6.5). So a number
written there with two decimals is checked to round to ours (to within 0.05, inclusive: it has Krull 1598.05 and Name
This Game 2292.35 for our 1598.0 and 2292.3, so its two decimals are themselves rounded), and any other number is
checked equal. Two of its random scores differ from ours by more, and are listed in ATARI5_DIFFERENCES: Video Pinball (0
there, DQN Zoo's 16,256.9 here: see atari_game/scores.py) and Space Invaders (148.3 there; 148.0 in both DQN Zoo's
dqn_zoo/atari_data.py, commit 359945d, and google-research/reincarnating_rl's atari_scores.py, commit 095f135). The
other 112 of its 114 numbers agree with ours.
"""

import csv
import math
from pathlib import Path

import numpy as np
import pytest

from atari_game.game import resolve_game
from atari_game.scores import (
    ATARI5_COEFFICIENTS,
    ATARI5_STATED_ERROR,
    ATARI_5,
    ATARI_57,
    HUMAN_SCORES,
    RANDOM_SCORES,
    atari5_median,
    human_normalized,
)

RAINBOW_CSV = Path(__file__).parent / "data" / "rainbow_scores.csv"
RAINBOW_MISSING = {"jamesbond", "riverraid", "up_n_down"}


def rainbow_scores() -> dict[str, float]:
    """Rainbow's score on each game of tests/data/rainbow_scores.csv, by ROM id."""
    with RAINBOW_CSV.open(newline="") as file:
        rows = list(csv.DictReader(file))
    assert rows and list(rows[0]) == ["algorithm", "game", "run_seed", "score"]
    assert {(row["algorithm"], row["run_seed"]) for row in rows} == {("Rainbow", "0")}
    scores = {row["game"]: float(row["score"]) for row in rows}
    assert len(scores) == len(rows), "a game is listed twice"
    return scores


# --- the table ---------------------------------------------------------------------------------------------------


def test_the_57_games_are_ale_py_rom_ids_sorted():
    assert len(ATARI_57) == len(set(ATARI_57)) == 57 and list(ATARI_57) == sorted(ATARI_57)
    assert [resolve_game(game) for game in ATARI_57] == list(ATARI_57)
    assert set(RANDOM_SCORES) == set(HUMAN_SCORES) == set(ATARI_57)
    assert set(ATARI_5) < set(ATARI_57) and len(ATARI_5) == 5 and set(ATARI5_COEFFICIENTS) == set(ATARI_5)


def test_human_beats_random_on_every_game():
    # Human <= random would flip the sign of a game's HNS; the table has no such game (not even Video Pinball).
    assert [game for game in ATARI_57 if not HUMAN_SCORES[game] > RANDOM_SCORES[game]] == []


def test_tables_are_read_only():
    with pytest.raises(TypeError):
        RANDOM_SCORES["pong"] = 0.0  # type: ignore[index]
    with pytest.raises(TypeError):
        ATARI5_COEFFICIENTS["qbert"] = 1.0  # type: ignore[index]


# Random scores transcribed from google-research/reincarnating_rl reincarnating_rl/atari_scores.py (commit 095f135),
# human scores from the "Human" column of Atari-Human.csv in maitchison/Atari-5 (commit 118cad5): two tables other
# than DQN Zoo's, which the module follows.
INDEPENDENT_RANDOM = {
    "alien": 227.8,
    "battle_zone": 2360.0,
    "double_dunk": -18.6,
    "hero": 1027.0,
    "jamesbond": 29.0,
    "kung_fu_master": 258.5,
    "montezuma_revenge": 0.0,
    "ms_pacman": 307.3,
    "private_eye": 24.9,
    "skiing": -17098.1,
    "surround": -10.0,
    "up_n_down": 533.4,
    "yars_revenge": 3092.9,
}
INDEPENDENT_HUMAN = {
    "alien": 7127.7,
    "battle_zone": 37187.5,
    "double_dunk": -16.4,
    "hero": 30826.4,
    "jamesbond": 302.8,
    "kung_fu_master": 22736.3,
    "montezuma_revenge": 4753.3,
    "ms_pacman": 6951.6,
    "private_eye": 69571.3,
    "skiing": -4336.9,
    "up_n_down": 11693.2,
    "video_pinball": 17667.9,
    "yars_revenge": 54576.9,
}


@pytest.mark.parametrize("game", sorted(INDEPENDENT_RANDOM))
def test_random_scores_match_an_independent_table(game):
    assert RANDOM_SCORES[game] == INDEPENDENT_RANDOM[game]


@pytest.mark.parametrize("game", sorted(INDEPENDENT_HUMAN))
def test_human_scores_match_an_independent_table(game):
    assert HUMAN_SCORES[game] == INDEPENDENT_HUMAN[game]


ATARI5_CSV = Path(__file__).parent / "data" / "reference_scores_atari5.csv"
# (game, column): (ours, Atari-5's), where Atari-5's Atari-Human.csv differs from DQN Zoo's table by more than rounding.
ATARI5_DIFFERENCES = {
    ("space_invaders", "random"): (148.0, 148.3),
    ("video_pinball", "random"): (16256.9, 0.0),
}


def test_every_random_and_human_score_equals_an_independent_transcription():
    with ATARI5_CSV.open(newline="") as file:
        rows = list(csv.DictReader(file))
    assert rows and list(rows[0]) == ["game", "random", "human"]
    games = [row["game"] for row in rows]
    assert len(games) == len(set(games)) and sorted(games) == list(ATARI_57), "not the 57 games, once each"
    differences, compared = {}, 0
    for row in rows:
        for column, ours in (("random", RANDOM_SCORES), ("human", HUMAN_SCORES)):
            written = row[column]
            # Two decimals there, one here: Atari-5's number must round to ours. Otherwise they must be equal.
            tolerance = 0.05 + 1e-9 if len(written.partition(".")[2]) == 2 else 0.0
            if not math.isclose(ours[row["game"]], float(written), rel_tol=0.0, abs_tol=tolerance):
                differences[row["game"], column] = (ours[row["game"]], float(written))
            compared += 1
    assert compared == 114
    assert differences == ATARI5_DIFFERENCES


def test_video_pinball_random_score_is_dqn_zoos_not_zero():
    # reincarnating_rl and Atari-5's "Random" column say 0.0; DQN Zoo says 16,256.9, which gives a very different HNS.
    assert RANDOM_SCORES["video_pinball"] == 16256.9
    assert human_normalized("VideoPinball", 533936.5) == pytest.approx((533936.5 - 16256.9) / 1411.0)


# --- human_normalized ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("game", ATARI_57)
def test_hns_is_0_at_random_and_1_at_human(game):
    random, human = RANDOM_SCORES[game], HUMAN_SCORES[game]
    assert human_normalized(game, random) == 0.0 and human_normalized(game, human) == 1.0
    both = human_normalized(game, np.array([[random, human]]))
    assert isinstance(both, np.ndarray) and both.dtype == np.float64 and both.tolist() == [[0.0, 1.0]]


def test_hns_takes_any_spelling_and_array_scores():
    expected = (5380.4 - 307.3) / (6951.6 - 307.3)
    for spelling in ("MsPacman", "ms_pacman", "mspacman", "ALE/MsPacman-v5", "MsPacmanNoFrameskip-v4"):
        hns = human_normalized(spelling, 5380.4)
        assert isinstance(hns, float) and hns == pytest.approx(expected, rel=1e-15)
    assert human_normalized("Pong", np.array([-20, 21])).tolist() == pytest.approx([(0.7) / 35.3, 41.7 / 35.3])


@pytest.mark.parametrize("game", ["Pitfall2", "Adventure"])
def test_hns_refuses_a_game_outside_the_57(game):
    with pytest.raises(ValueError, match=rf"{game}.*no reference scores.*ATARI_57"):
        human_normalized(game, 0.0)


def test_hns_refuses_an_unknown_game():
    with pytest.raises(ValueError, match="NotAGame"):
        human_normalized("NotAGame", 0.0)


# --- Atari-5 -------------------------------------------------------------------------------------------------------

# The fitted weights as printed in maitchison/PPO tools/plot_util.py (commit d3e3228), AtariScoreNormalizer.SUBSETS.
PUBLISHED_WEIGHTS = {
    "battle_zone": 0.3819751237831753,
    "double_dunk": 0.0679099488887574,
    "name_this_game": 0.310804148620847,
    "phoenix": 0.12412619402774641,
    "qbert": 0.08048518286466755,
}


def test_atari5_matches_the_regression_computed_by_hand():
    hns = {"BattleZone": 1.5, "DoubleDunk": -0.2, "NameThisGame": 0.8, "Phoenix": 12.0, "Qbert": 0.0}
    # In percent, negative HNS clipped to 0: 150, 0, 80, 1200, 0.
    log_median = (
        0.3819751237831753 * math.log10(151)
        + 0.0679099488887574 * math.log10(1)
        + 0.310804148620847 * math.log10(81)
        + 0.12412619402774641 * math.log10(1201)
        + 0.08048518286466755 * math.log10(1)
    )
    assert atari5_median(hns) == pytest.approx((10**log_median - 1) / 100, rel=1e-12)
    assert dict(ATARI5_COEFFICIENTS) == PUBLISHED_WEIGHTS
    assert atari5_median(dict.fromkeys(ATARI_5, 0.0)) == 0.0


def test_atari5_on_rainbow_lies_within_the_stated_error_of_its_median():
    scores = rainbow_scores()
    assert set(ATARI_57) - set(scores) == RAINBOW_MISSING and set(scores) <= set(ATARI_57)
    # The median HNS by hand: normalize, sort, and average the two middle values (54 games).
    hns = sorted((scores[g] - RANDOM_SCORES[g]) / (HUMAN_SCORES[g] - RANDOM_SCORES[g]) for g in scores)
    middle = len(hns) // 2
    median = (hns[middle - 1] + hns[middle]) / 2 if len(hns) % 2 == 0 else hns[middle]
    assert median == pytest.approx(2.2705, abs=1e-4)  # Frostbite 2.231 and Kung-Fu Master 2.310
    five = {g: (scores[g] - RANDOM_SCORES[g]) / (HUMAN_SCORES[g] - RANDOM_SCORES[g]) for g in ATARI_5}
    estimate = atari5_median(five)
    assert estimate == pytest.approx(2.2479, abs=1e-4)
    assert abs(estimate - median) <= ATARI5_STATED_ERROR * median
    # All 54 scores in at once: the other games are ignored.
    assert atari5_median({g: human_normalized(g, s) for g, s in scores.items()}) == pytest.approx(estimate)


def test_atari5_names_a_missing_game():
    hns = {"battle_zone": 1.0, "double_dunk": 1.0, "name_this_game": 1.0, "qbert": 1.0}
    with pytest.raises(ValueError, match=r"no human-normalized score for phoenix;"):
        atari5_median(hns)
    with pytest.raises(ValueError, match=r"for double_dunk, name_this_game, phoenix, qbert;"):
        atari5_median({"BattleZone": 1.0})


def test_atari5_refuses_a_game_twice_and_a_non_finite_score():
    hns = dict.fromkeys(ATARI_5, 1.0)
    with pytest.raises(ValueError, match="qbert is given twice"):
        atari5_median({**hns, "QBert": 1.0})
    with pytest.raises(ValueError, match="phoenix is not finite"):
        atari5_median({**hns, "phoenix": math.nan})
