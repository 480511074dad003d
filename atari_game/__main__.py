"""`python -m atari_game` is the `atari-game` command."""

from atari_game.cli import main

main()
