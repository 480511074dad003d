"""Named protocols: each sets exactly the options its paper fixes, in a Game, a GamePool, gym.make and the trainers;
an option given against it is refused by name with the paper's reason; the free options stay free."""

import gymnasium
import pytest
import torch

from atari_game import PROTOCOLS, Game, GameOptions, GamePool, ppo
from atari_game.algorithms import parse_args
from atari_game.protocols import apply_protocol, get_protocol
from atari_game.run_config import full_action_space, game_options


def test_machado_plays_with_sticky_actions_all_18_actions_and_no_life_loss_signal():
    game = Game("Breakout", protocol="machado")
    assert game.ale.getFloat("repeat_action_probability") == 0.25
    assert game.ale.getInt("max_num_frames_per_episode") == 108_000
    assert game.n_actions == 18
    options = game.options
    assert (options.life_loss, options.noop_max, options.fire_reset) == ("ignore", 0, False)
    assert options.protocol == "machado"


def test_nature_trains_with_30_noop_starts_and_a_lost_life_terminal_on_the_minimal_action_set():
    game = Game("Breakout", protocol="nature", fire_reset=True)  # fire_reset: not fixed by the protocol
    assert game.ale.getFloat("repeat_action_probability") == 0.0
    assert game.n_actions == 4
    assert (game.options.life_loss, game.options.noop_max, game.options.fire_reset) == ("terminal", 30, True)
    # Scored games are whole games of at most 5 minutes, with epsilon 0.05.
    nature = get_protocol("nature")
    assert (nature.evaluate["life_loss"], nature.evaluate["max_episode_frames"], nature.eval_epsilon) == (
        "ignore",
        18_000,
        0.05,
    )


def test_an_option_against_the_protocol_is_refused_naming_it_both_values_and_why():
    expected = (
        "sticky_actions=0.0 conflicts with protocol 'machado', which sets sticky_actions=0.25 (sticky actions with "
        "probability 0.25"
    )
    for make in (
        lambda: Game("Pong", protocol="machado", sticky_actions=0.0),
        lambda: GamePool(2, "Pong", protocol="machado", sticky_actions=0.0),
        lambda: gymnasium.make("atari_game/Pong-v0", protocol="machado", sticky_actions=0.0),
    ):
        with pytest.raises(ValueError) as error:
            make()
        assert str(error.value).startswith(expected)
        assert str(error.value).endswith("leave sticky_actions out, or drop the protocol")
    # The same value as the protocol's is no conflict.
    assert Game("Pong", protocol="machado", sticky_actions=0.25).options.sticky_actions == 0.25


def test_options_built_directly_are_checked_against_their_protocol_too():
    with pytest.raises(ValueError, match="life_loss='reset' conflicts with protocol 'nature'"):
        GameOptions(game="Pong", protocol="nature", noop_max=30)  # life_loss is the dataclass default, "reset"


def test_an_unknown_protocol_names_the_closest_and_every_valid_one():
    with pytest.raises(ValueError) as error:
        Game("Pong", protocol="machdo")
    assert str(error.value) == (
        "protocol: unknown protocol 'machdo' (did you mean 'machado'?); the protocols are machado, nature"
    )


def test_every_fixed_option_and_epsilon_cites_its_source_and_is_a_valid_game_option():
    for protocol in PROTOCOLS.values():
        fixed = {**protocol.train, **protocol.evaluate}
        assert set(fixed) | {"eval_epsilon"} <= set(protocol.sources), protocol.name
        for phase in (protocol.train, protocol.evaluate):
            GameOptions.from_kwargs(game="Breakout", **phase)  # each set of options builds a game


def test_apply_protocol_fills_in_the_phase_asked_for():
    assert apply_protocol("nature", {"fire_reset": True}, "evaluate")["life_loss"] == "ignore"
    assert apply_protocol("nature", {"fire_reset": True})["life_loss"] == "terminal"
    with pytest.raises(ValueError, match="noop_max=0 conflicts with protocol 'nature'"):
        apply_protocol("nature", {"noop_max": 0}, "evaluate")
    # A phase misspelt is refused, not taken for "evaluate".
    with pytest.raises(ValueError, match=r"phase must be one of \('train', 'evaluate'\), got 'evalute'"):
        apply_protocol("nature", {}, "evalute")


def test_the_trainers_take_a_protocol_and_its_network_chooses_among_its_actions(tmp_path):
    config = parse_args("ppo", ["--game", "Pong", "--protocol", "machado", "--run-dir", str(tmp_path / "run")])
    assert (config.protocol, config.life_loss, config.noop_max, config.fire_reset) == ("machado", "ignore", 0, False)
    assert game_options(config)["protocol"] == "machado"
    assert GameOptions.from_kwargs(**game_options(config)).sticky_actions == 0.25
    assert full_action_space(config)
    agent = ppo.build_agent(config.game, torch.device("cpu"), full_action_space(config))
    assert agent.actor.out_features == 18
    # The defaults' free options stay: nature leaves fire_reset to the trainer.
    config = parse_args("ppo", ["--game", "Pong", "--protocol", "nature", "--run-dir", str(tmp_path / "run")])
    assert (config.life_loss, config.noop_max, config.fire_reset) == ("terminal", 30, True)
    assert not full_action_space(config)


def test_a_trainer_flag_against_the_protocol_is_a_usage_error_naming_both(tmp_path, capsys):
    with pytest.raises(SystemExit) as stopped:
        parse_args("ppo", ["--protocol", "machado", "--life-loss", "terminal", "--run-dir", str(tmp_path / "run")])
    assert stopped.value.code == 2
    assert (
        "error: --life-loss terminal conflicts with --protocol machado, which sets --life-loss ignore "
        "(an episode ends at game over only" in capsys.readouterr().err
    )
    with pytest.raises(SystemExit):
        parse_args("ppo", ["--protocol", "deepmind", "--run-dir", str(tmp_path / "run")])
    assert "argument --protocol: unknown protocol 'deepmind'; the protocols are machado, nature, or none" in (
        capsys.readouterr().err
    )
