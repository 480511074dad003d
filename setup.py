"""For tooling that looks for a setup.py: the package's metadata and build settings live in pyproject.toml."""

from setuptools import setup

setup()
