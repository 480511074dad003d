"""--precision: what auto chooses, what bf16 computes, and that a run's checkpoint and --resume keep the choice.

Whether bf16 learns as well as fp32 is measured by runs (docs/results.md), not here; these tests pin down the
mechanism. Where a test needs bf16 chosen whatever CPU runs it, it tells `choose_precision` that the device has
bfloat16 and that the probe found it faster.
"""

import csv

import pytest
import torch

from atari_game import dqn, iqn, networks, ppo
from atari_game.algorithms import parse_args
from atari_game.checkpoints import load_checkpoint
from atari_game.networks import ImpalaCNN, NatureCNN, choose_precision, probe_ms
from atari_game.run_log import RunLog

CPU = torch.device("cpu")


# The trainers set torch's thread count for the process: the tests after these get theirs back.
pytestmark = pytest.mark.usefixtures("torch_threads")


def hardware(monkeypatch, native: bool | None, fp32_ms: float = 10.0, bf16_ms: float = 5.0) -> list[bool]:
    """Make `choose_precision` see a device with (or without, or not known to have) native bfloat16 and a probe
    that times the two precisions as given; returns the list of the probes run (bf16 or not), in order."""
    probes: list[bool] = []

    def probe(trunk: NatureCNN, device: torch.device, bf16: bool) -> float:
        probes.append(bf16)
        return bf16_ms if bf16 else fp32_ms

    monkeypatch.setattr(networks, "native_bf16", lambda device: native)
    monkeypatch.setattr(networks, "probe_ms", probe)
    return probes


@pytest.mark.parametrize(
    ("native", "fp32_ms", "bf16_ms", "chosen", "probed"),
    [
        (False, 10.0, 5.0, "fp32", False),  # AVX2 only: emulated bf16 is slower, and not probed
        (True, 10.0, 5.0, "bf16", True),  # AVX512-BF16, AMX or a CUDA device with bf16: faster, taken
        (True, 10.0, 9.5, "fp32", True),  # native but not 10 % faster: not worth its rounding
        (None, 10.0, 5.0, "bf16", True),  # flags unknown (not Linux): the probe decides
    ],
)
def test_auto_takes_bf16_only_where_the_device_has_it_and_the_probe_finds_it_faster(
    monkeypatch, native, fp32_ms, bf16_ms, chosen, probed
):
    probes = hardware(monkeypatch, native, fp32_ms, bf16_ms)
    trunk = NatureCNN()
    precision, about = choose_precision("auto", trunk, CPU)
    assert precision == chosen and trunk.bf16 == (chosen == "bf16")
    assert probes == ([False, True] if probed else [])
    assert about.startswith(f"precision {chosen} (auto: ")
    if probed:  # the log says what the probe measured
        assert f"{fp32_ms:.1f} ms fp32, {bf16_ms:.1f} ms bf16" in about


def test_fp32_and_bf16_are_taken_as_asked_and_bf16_without_hardware_says_it_is_slow(monkeypatch):
    probes = hardware(monkeypatch, native=False)
    trunk = NatureCNN()
    assert choose_precision("fp32", trunk, CPU) == ("fp32", "precision fp32") and not trunk.bf16
    precision, about = choose_precision("bf16", trunk, CPU)
    assert precision == "bf16" and trunk.bf16
    assert about == "precision bf16 (cpu may have no native bfloat16, which makes bf16 slower than fp32)"
    assert choose_precision("bf16", trunk, CPU, resumed=True)[1] == (
        "precision bf16 (the run's own, kept by --resume; cpu may have no native bfloat16, which makes bf16 slower "
        "than fp32)"
    )
    assert probes == []


def test_the_probe_leaves_the_seeded_generator_and_the_network_alone():
    torch.manual_seed(3)
    trunk = NatureCNN()
    weights = {name: tensor.clone() for name, tensor in trunk.state_dict().items()}
    generator = torch.get_rng_state()
    assert probe_ms(trunk, CPU, bf16=True, batch=4, repeats=1) > 0
    assert probe_ms(trunk, CPU, bf16=False, batch=4, repeats=1) > 0
    # The run's weights are drawn from torch's generator after the probe, as without it; nothing is learned.
    assert torch.equal(torch.get_rng_state(), generator)
    assert all(torch.equal(trunk.state_dict()[name], tensor) for name, tensor in weights.items())
    assert all(parameter.grad is None for parameter in trunk.parameters()) and not trunk.bf16


@pytest.mark.parametrize("trunk_class", [NatureCNN, ImpalaCNN], ids=["nature", "impala"])
def test_a_bf16_trunk_computes_in_bfloat16_and_hands_back_float32(trunk_class):
    torch.manual_seed(0)
    trunk = trunk_class()
    obs = torch.randint(0, 256, (6, 4, 84, 84), dtype=torch.uint8)
    fp32 = trunk(obs)
    trunk.bf16 = True
    bf16 = trunk(obs)
    bf16.sum().backward()
    # Float32 features (the heads, losses and targets stay fp32), rounded by bfloat16's 8-bit mantissa on the way:
    # different bits, within a few percent of fp32's.
    assert bf16.dtype == fp32.dtype == torch.float32 and bf16.shape == fp32.shape == (6, trunk.features)
    assert not torch.equal(bf16, fp32)
    assert (bf16 - fp32).norm() < 0.05 * fp32.norm()
    # The master weights and their gradients stay float32.
    assert all(
        p.dtype == torch.float32 and p.grad is not None and p.grad.dtype == torch.float32 for p in trunk.parameters()
    )


def tiny(trainer, run_dir, precision: str):
    """A config of a few seconds' run of `trainer` (atari_game.ppo, .dqn or .iqn) in `run_dir`."""
    if trainer is ppo:
        return ppo.Config(
            total_frames=512, num_envs=2, n_steps=16, n_epochs=1, n_minibatches=2, checkpoint_every=256,
            video=False, run_dir=str(run_dir), precision=precision,
        )  # fmt: skip
    return trainer.Config(
        total_frames=192, num_envs=2, batch_size=4, buffer_size=64, learning_starts=12, log_every=96,
        checkpoint_every=96, video=False, run_dir=str(run_dir), precision=precision,
    )  # fmt: skip


def weights(run_dir) -> dict[str, torch.Tensor]:
    saved = torch.load(run_dir / "checkpoint.pt")
    return saved.get("agent") or saved["q_network"]


@pytest.mark.slow
@pytest.mark.parametrize("trainer", [ppo, dqn, iqn], ids=["ppo", "dqn", "iqn"])
def test_fp32_runs_repeat_bit_for_bit_and_bf16_runs_compute_other_bits(tmp_path, monkeypatch, trainer):
    hardware(monkeypatch, native=True)
    for name, precision in (("a", "fp32"), ("b", "fp32"), ("c", "bf16")):
        trainer.train(tiny(trainer, tmp_path / name, precision))
    a, b, c = (weights(tmp_path / name) for name in "abc")
    assert all(torch.equal(a[name], b[name]) for name in a)
    assert not all(torch.equal(a[name], c[name]) for name in a)
    assert all(c[name].dtype == torch.float32 and c[name].isfinite().all() for name in c)


@pytest.mark.slow
@pytest.mark.parametrize("trainer", [ppo, dqn, iqn], ids=["ppo", "dqn", "iqn"])
def test_the_checkpoint_records_the_choice_and_resume_keeps_it_on_any_machine(tmp_path, monkeypatch, trainer):
    hardware(monkeypatch, native=True)  # auto chooses bf16 here
    run_dir = tmp_path / "run"
    trainer.train(tiny(trainer, run_dir, "auto"))
    saved = torch.load(run_dir / "checkpoint.pt")
    assert saved["config"]["precision"] == "bf16"  # what auto chose, not "auto"
    with (run_dir / "progress.csv").open() as file:
        assert {row["precision"] for row in csv.DictReader(file) if row["frames_per_second"]} == {"bf16"}

    # Resumed where auto would now choose fp32 (another machine), the run goes on in bf16; --eval and play use it.
    probes = hardware(monkeypatch, native=False)
    resumed = parse_args(trainer.ALGORITHM.name, ["--run-dir", str(run_dir), "--resume", "--total-frames", "1000000"])
    assert resumed.precision == "bf16"
    loaded = trainer.ALGORITHM.load(load_checkpoint(run_dir / "checkpoint.pt"), CPU)
    assert loaded[0].trunk.bf16 and probes == []


@pytest.mark.slow
def test_a_checkpoint_from_before_precision_resumes_in_fp32(tmp_path, monkeypatch):
    hardware(monkeypatch, native=True)
    run_dir = tmp_path / "run"
    ppo.train(tiny(ppo, run_dir, "bf16"))
    saved = torch.load(run_dir / "checkpoint.pt")
    del saved["config"]["precision"]  # as the checkpoints written before --precision
    torch.save(saved, run_dir / "checkpoint.pt")
    assert parse_args("ppo", ["--run-dir", str(run_dir), "--resume", "--total-frames", "1024"]).precision == "fp32"
    assert not ppo.ALGORITHM.load(load_checkpoint(run_dir / "checkpoint.pt"), CPU)[0].trunk.bf16


def test_an_unknown_precision_is_a_usage_error_naming_the_choices(capsys):
    with pytest.raises(SystemExit) as exit:
        parse_args("ppo", ["--precision", "fp16"])
    assert exit.value.code == 2
    error = capsys.readouterr().err.splitlines()[-1]  # argparse quotes the choices or not, by Python version
    assert "argument --precision: invalid choice: 'fp16' (choose from" in error
    assert all(choice in error for choice in ("auto", "fp32", "bf16"))


def test_a_resumed_log_drops_the_rows_after_the_checkpoint(tmp_path):
    # A run stopped after logging up to 300 frames, with its checkpoint at 200: the resumed run plays 201-300 again.
    log = RunLog(tmp_path, ("loss",))
    for frames in (100, 200, 300):
        log.game_ended(frames, float(frames), 10)
        log.update(frames, frames / 10, {"loss": 0.5})
    log.close()
    log = RunLog(tmp_path, ("loss",), resumed_at=200)
    assert log.games == [(100, 100.0, 10), (200, 200.0, 10)]
    log.update(300, 31.0, {"loss": 0.25})
    log.close()
    with (tmp_path / "progress.csv").open() as file:
        rows = list(csv.DictReader(file))
    assert [(row["frames"], row["game_return"], row["loss"]) for row in rows] == [
        ("100", "100.0", ""), ("100", "", "0.5"), ("200", "200.0", ""), ("200", "", "0.5"), ("300", "", "0.25"),
    ]  # fmt: skip
    assert not (tmp_path / "progress.tmp").exists()


def test_a_new_log_starts_empty_even_over_an_old_one(tmp_path):
    old = RunLog(tmp_path, ("loss",))
    old.update(100, 1.0, {"loss": 0.5})
    old.close()
    log = RunLog(tmp_path, ("loss",))
    log.close()
    assert log.games == [] and (tmp_path / "progress.csv").read_text().splitlines() == [
        "frames,seconds,game_return,game_length,loss"
    ]
