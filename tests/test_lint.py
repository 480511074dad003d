"""The code stays ruff clean (the rules are in pyproject.toml)."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).parent.parent


def ruff(*args):
    return subprocess.run([sys.executable, "-m", "ruff", *args, str(ROOT)], capture_output=True, text=True)


def test_ruff_check_and_format():
    check, form = ruff("check"), ruff("format", "--check")
    assert check.returncode == 0, check.stdout
    assert form.returncode == 0, form.stdout
