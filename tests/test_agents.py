"""The trained agents kept in agents/: each small, loadable as it is, scored on the Results page, and scoring there
again when evaluated anew (the report regenerated from them)."""

import json
import math
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from atari_game import cli
from atari_game.algorithms import get_algorithm
from atari_game.checkpoints import load_checkpoint
from atari_game.report import write_report

ROOT = Path(__file__).parent.parent
AGENTS = sorted((ROOT / "agents").glob("*.pt"))
RESULTS = ROOT / "docs" / "results"


def committed_evaluation(agent: Path) -> Path:
    """The evaluation of `agent` behind the Results page: `atari-game evaluate agents/X.pt --out docs/results`'s."""
    [path] = RESULTS.glob(f"agents-{agent.stem}-evaluation-*.json")
    return path


def test_there_are_agents_to_watch():
    assert AGENTS, "agents/ holds the trained agents of the Results page"


@pytest.mark.parametrize("agent", AGENTS, ids=lambda path: path.stem)
def test_an_agent_is_at_most_4_mb_in_fp16_and_loads_as_it_is(agent: Path):
    assert agent.stat().st_size <= 4_000_000
    saved = load_checkpoint(agent)
    algorithm = get_algorithm(saved["algorithm"])
    assert {tensor.dtype for tensor in saved[algorithm.network_key].values() if tensor.is_floating_point()} == {
        torch.float16
    }
    network, config = algorithm.load(saved, torch.device("cpu"))
    assert config.protocol and saved["frames"] > 0
    obs = torch.randint(0, 256, (2, 4, 84, 84), dtype=torch.uint8).numpy()
    assert all(0 <= action < 18 for action in algorithm.batch_policy(network)(obs))
    assert committed_evaluation(agent).is_file()
    assert agent.name in (ROOT / "docs" / "results.md").read_text()


@pytest.mark.slow
def test_each_agent_scores_again_what_the_results_page_says_and_the_report_regenerates(tmp_path: Path):
    # The same command as the page's, anew: 30 games under the agent's protocol, evaluation seed 0, labelled as the
    # page's. Another CPU may round a convolution otherwise and a game then goes its own way, so the score is compared
    # within its standard errors, not to the point.
    for agent in AGENTS:
        committed = json.loads(committed_evaluation(agent).read_text())
        cli.main(["evaluate", str(agent), "--algorithm", committed["algorithm"], "--out", str(tmp_path)])
        again = json.loads((tmp_path / committed_evaluation(agent).name).read_text())
        assert (again["game"], again["protocol"], len(again["episodes"])) == (
            committed["game"],
            committed["protocol"],
            len(committed["episodes"]),
        )
        assert abs(again["mean"] - committed["mean"]) <= 3 * math.hypot(again["sem"], committed["sem"]), agent.stem
    # The report over the new evaluations: the committed one's agents, each on its games.
    report = write_report([tmp_path], tmp_path / "report")
    committed = write_report([committed_evaluation(agent) for agent in AGENTS], tmp_path / "committed")
    assert (tmp_path / "report" / "report.md").is_file()
    rows = [[(row["game"], row["algorithm"], row["runs"]) for row in made["games"]] for made in (report, committed)]
    assert list(report["algorithms"]) == list(committed["algorithms"]) and rows[0] == rows[1]


@pytest.mark.slow
def test_the_readme_s_command_watches_an_agent_play_as_it_is_written(tmp_path: Path):
    # The README's one command, from the repository root as a user runs it; only the video goes elsewhere.
    [command] = re.findall(r"^atari-game play .*?\.mp4$", (ROOT / "README.md").read_text(), re.MULTILINE | re.DOTALL)
    words = shlex.split(command.replace("\\\n", " "))
    assert words[-2] == "--record" and (ROOT / words[words.index("--checkpoint") + 1]).is_file()
    video = tmp_path / words[-1]
    result = subprocess.run(
        [sys.executable, "-m", "atari_game", *words[1:-1], str(video)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"{words[2]}, trained agent (epsilon 0.01): one game scored ")
    assert video.stat().st_size > 10_000
