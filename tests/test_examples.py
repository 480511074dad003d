"""The README's main command (the demo) runs and says what it promises."""

import re
import subprocess
import sys
from pathlib import Path

DEMO = Path(__file__).parent.parent / "examples" / "demo.py"


def test_demo_prints_throughput_and_episode_statistics():
    result = subprocess.run(
        [sys.executable, str(DEMO), "--workers", "2", "--steps", "200"], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert "Breakout: 2 workers x 200 steps = 400 agent steps" in result.stdout
    assert re.search(r"throughput: [\d,]+ agent steps/s", result.stdout)
    assert re.search(r"episodes \(one life each\): \d+, reward mean", result.stdout)


def test_demo_refuses_an_unknown_game_or_a_negative_seed_with_a_usage_error():
    for args, expected in [
        (["--game", "Breakot"], "unknown game 'Breakot' (closest: Breakout"),
        (["--seed", "-1"], "argument --seed: the seed must be an integer >= 0, got '-1'"),
    ]:
        result = subprocess.run([sys.executable, str(DEMO), *args], capture_output=True, text=True)
        assert result.returncode == 2
        assert expected in result.stderr and "Traceback" not in result.stderr
