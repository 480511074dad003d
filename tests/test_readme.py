"""The README keeps its promises: a few screens, the two commands, an example of each API that runs as a saved script
(tests/test_docs.py runs every block), links that lead somewhere, and no measurement log.

A script in the README that starts processes must be under the main guard: tests/test_docs.py runs it saved to a
file, as a user runs it, and an unguarded one fails there with atari_game's RuntimeError.
"""

import re
from pathlib import Path

ROOT = Path(__file__).parent.parent
README = (ROOT / "README.md").read_text()
BLOCKS = re.findall(r"^```python\n(.*?)^```", README, flags=re.DOTALL | re.MULTILINE)
GUARD = 'if __name__ == "__main__":'

# The two commands of the quick start: a fresh machine's first run, and CI's (.ci/run runs the second exactly).
QUICK_START = (
    'pip install torch==2.13.0 && pip install -e ".[train]" && '
    "python examples/ppo.py --game Breakout --total-frames 800000"
)
TEST_COMMAND = 'pip install torch==2.13.0 && pip install -e ".[test,train,sb3,ray,docs]" && python -m pytest'


def test_the_readme_is_a_few_screens():
    assert len(README.splitlines()) <= 150


def test_the_readme_keeps_the_two_commands_as_lines_to_copy():
    lines = README.splitlines()
    assert QUICK_START in lines and TEST_COMMAND in lines
    assert (ROOT / ".ci" / "run").read_text().strip().splitlines()[-1] == TEST_COMMAND


def test_the_readme_shows_game_worker_and_pool_each_in_a_guarded_script():
    # Each API in a block of its own, started under the guard (a Game alone would need none, a Worker does).
    worker = [block for block in BLOCKS if "Worker(" in block and "Game(" in block]
    pool = [block for block in BLOCKS if "GamePool(" in block]
    assert len(worker) == 1 and len(pool) == 1
    for block in worker + pool:
        main = block.index(GUARD)
        assert "main()" in block[main:] and not re.search(r"^(?!def |if |from |import |\s|$)", block, re.MULTILINE)


def test_every_relative_link_and_image_of_the_readme_exists():
    targets = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", README)
    relative = [target for target in targets if not re.match(r"[a-z]+://", target)]
    assert len(relative) >= 15  # the picture, every docs page a reader starts from, the changelog
    missing = [target for target in relative if not (ROOT / target).is_file()]
    assert not missing, f"README links to files that do not exist: {missing}"


def test_every_guide_is_linked_from_the_readme():
    guides = {f"docs/guides/{page.name}" for page in (ROOT / "docs" / "guides").glob("*.md")}
    assert guides and guides <= set(re.findall(r"\]\((docs/guides/[\w-]+\.md)\)", README))


def test_the_readme_holds_no_measurement_log():
    # No dates, no commit hashes, no dated runs: where things stand lives in docs/performance.md, history in git.
    assert not re.search(r"\b20\d\d-\d\d-\d\d\b", README)
    hashes = [word for word in re.findall(r"\b[0-9a-f]{7,40}\b", README) if re.search(r"[a-f]", word)]
    assert not [word for word in hashes if re.search(r"\d", word)], hashes
    assert "How it got here" not in README
