"""Every Python block in the README runs, so the documentation cannot drift from the code."""

import re
from pathlib import Path

import pytest

README = (Path(__file__).parent.parent / "README.md").read_text()
BLOCKS = re.findall(r"```python\n(.*?)```", README, flags=re.DOTALL)


def test_the_readme_has_python_examples():
    assert len(BLOCKS) >= 4


@pytest.mark.parametrize("block", BLOCKS, ids=[f"block{i}" for i in range(len(BLOCKS))])
def test_readme_block_runs(block):
    # Run as a script runs, so that a block's `if __name__ == "__main__":` part runs too.
    exec(compile(block, "README.md", "exec"), {"__name__": "__main__"})
