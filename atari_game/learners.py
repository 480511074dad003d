"""Data-parallel learners on Ray Train: ``--learners K`` with ``--ray ADDRESS``.

`RayGamePool` brings every observation of every env to one learner; here the learner goes to the data instead
(decentralized data-parallel training, DD-PPO: Wijmans et al. 2020). Ray Train's `TorchTrainer` places K learner
processes on the cluster, spread over its nodes, in a torch.distributed process group (gloo on CPUs, NCCL on GPUs),
keeps their checkpoints and restarts the group from the last one when a learner dies. Each learner plays its share
of the envs, a contiguous block seeded as one learner would seed it (learner r of K: envs ``r * n / K`` to
``(r + 1) * n / K - 1``), in a local `GamePool` over the CPUs Ray gave it, and learns with a replica of the
networks; only gradients (and a few numbers) cross the network.

The trainers (`atari_game.ppo`, `atari_game.dqn`) take a `Learners`, this process's place among them (one learner
without Ray Train: ``Learners()``). Only rank 0 writes the log, progress.csv, the checkpoints and the video, so the
run directory must be on storage its node sees (on a cluster, a shared file system, as Ray Train's checkpoints need).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import hashlib
import importlib
import shutil
import signal
import tempfile
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, TypeVar

import torch
import torch.distributed as dist
from torch import nn

from atari_game.extras import install_command
from atari_game.ray_pool import connect, free_cpus
from atari_game.worker import available_cores

#: Times Ray Train restarts the learners after one dies, each time from the last checkpoint, before the run stops.
MAX_RESTARTS = 3

#: Seconds the Ray cluster may take to say how many CPUs it has free, before the run stops with an error.
ANSWER_WAIT = 30.0

#: What the ray extra installs for Ray Train, and the error that names it.
MISSING = f"--learners needs Ray Train, which is not installed (or lacks its dependencies): {install_command('ray')}"


class LearnersFailed(RuntimeError):
    """The learners stopped: one died more often than `MAX_RESTARTS`, or raised an error (the message says which)."""


@dataclasses.dataclass
class Learners:
    """This process's place among the run's learners: learner `rank` of `count`, for a run of `num_envs` envs in all;
    `on_ray_train` when Ray Train placed it (and holds its checkpoints), with `cpus` CPUs for its envs and torch;
    `restart`, the checkpoint.pt Ray Train restarts it from after a learner died (None on a first start).

    The collectives (`all_sum`, `sum_gradients`, `gather`, `first`) are the identity for one learner; `sync_seconds`
    counts the seconds spent in them (waiting for the slowest learner included) since it was last set to 0.
    """

    rank: int = 0
    count: int = 1
    num_envs: int = 0
    on_ray_train: bool = False
    cpus: int = 0
    restart: Path | None = None
    sync_seconds: float = 0.0

    @property
    def lead(self) -> bool:
        """Whether this learner writes the run's files (rank 0)."""
        return self.rank == 0

    @property
    def envs(self) -> slice:
        """This learner's envs among the run's ``num_envs``."""
        share = self.num_envs // self.count
        return slice(self.rank * share, (self.rank + 1) * share)

    @property
    def cores(self) -> int:
        """The CPUs this learner's env workers and torch use: Ray Train's grant, else this machine's."""
        return self.cpus or available_cores()

    def file_name(self, name: str) -> str:
        """`name` (``replay.npz``) for one learner, ``replay-1-of-2.npz`` for learner 1 of 2: a learner's own file."""
        stem, dot, suffix = name.partition(".")
        return name if self.count == 1 else f"{stem}-{self.rank}-of-{self.count}{dot}{suffix}"

    def share(self, indices: torch.Tensor) -> torch.Tensor:
        """The rows of this learner's flattened rollout (``n_steps x num_envs / count``, step-major) that a minibatch
        of the run's (`indices` into ``n_steps x num_envs``) holds, in its order; the learners' shares may differ in
        size."""
        step, env = indices // self.num_envs, indices % self.num_envs
        mine = (env >= self.envs.start) & (env < self.envs.stop)
        return step[mine] * (self.num_envs // self.count) + env[mine] - self.envs.start

    def _collective(self, tensor: torch.Tensor) -> torch.Tensor:
        """`tensor` summed over the learners, in place, with its time counted."""
        start = time.perf_counter()
        dist.all_reduce(tensor)
        self.sync_seconds += time.perf_counter() - start
        return tensor

    def all_sum(self, tensor: torch.Tensor) -> torch.Tensor:
        """`tensor` summed over the learners (itself for one learner)."""
        return self._collective(tensor) if self.count > 1 else tensor

    def mean_std(self, groups: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        """The mean and standard deviation (Bessel-corrected, as `torch.std`) of each group over the learners' shares
        of it (`groups[i]`: this learner's), in two passes of one all-reduce each: as accurate as one learner's."""
        sums = self.all_sum(torch.stack([torch.stack([group.sum(), group.new_tensor(len(group))]) for group in groups]))
        means, counts = sums[:, 0] / sums[:, 1], sums[:, 1]
        deviations = [((group - mean) ** 2).sum() for group, mean in zip(groups, means, strict=True)]
        return means, (self.all_sum(torch.stack(deviations)) / (counts - 1)).sqrt()

    def sum_gradients(self, parameters: Iterable[nn.Parameter], statistics: torch.Tensor) -> torch.Tensor:
        """Sum the gradients of `parameters` over the learners, and `statistics` with them, in one all-reduce of one
        flat buffer; return the summed `statistics`. Every learner then holds the very same gradient, bit for bit."""
        if self.count == 1:
            return statistics
        gradients = [parameter.grad for parameter in parameters if parameter.grad is not None]
        flat = self._collective(torch.cat([*(gradient.reshape(-1) for gradient in gradients), statistics]))
        offset = 0
        for gradient in gradients:
            gradient.copy_(flat[offset : offset + gradient.numel()].view_as(gradient))
            offset += gradient.numel()
        return flat[offset:]

    def gather(self, items: list[Any]) -> list[Any]:
        """All the learners' `items` (each a list of picklable values), in rank order, on every learner."""
        if self.count == 1:
            return items
        gathered: list[Any] = [None] * self.count
        dist.all_gather_object(gathered, items)
        return [item for part in gathered for item in part]

    def first(self, value: Any) -> Any:
        """Rank 0's `value` on every learner: a choice all must share (the precision a probe chose)."""
        if self.count == 1:
            return value
        chosen = [value]
        dist.broadcast_object_list(chosen, src=0)
        return chosen[0]

    def check_identical(self, network: nn.Module, when: str) -> None:
        """A `RuntimeError` unless every learner's `network` holds the same weights, bit for bit (their digests
        compared): the updates are the same by construction, so a difference is a bug (`when`: where it was found)."""
        if self.count == 1:
            return
        digest = hashlib.blake2b(digest_size=16)
        for tensor in network.state_dict().values():
            digest.update(tensor.detach().cpu().contiguous().view(torch.uint8).numpy().tobytes())
        digests = self.gather([digest.hexdigest()])
        if len(set(digests)) > 1:
            raise RuntimeError(
                f"the learners' weights differ {when} (digests by rank: {digests}): a bug, please report"
            )

    def report(self, checkpoint: Path, frames: int) -> None:
        """Hand the checkpoint rank 0 has just written at `checkpoint` to Ray Train, which keeps a copy to restart a
        failed group from; every learner calls it at the same point (nothing without Ray Train)."""
        if not self.on_ray_train:
            return
        import ray.train

        with tempfile.TemporaryDirectory() as directory:
            if self.lead:
                shutil.copy2(checkpoint, Path(directory) / checkpoint.name)
            kept = ray.train.Checkpoint.from_directory(directory) if self.lead else None
            ray.train.report({"frames": frames}, checkpoint=kept)


# --- the driver: what `atari-game train --learners K --ray ADDRESS` runs ----------------------------------

#: A trainer's config (`atari_game.ppo.Config`, `atari_game.dqn.Config`), handed to its ``train`` in each learner.
ConfigT = TypeVar("ConfigT")


def learners_problem(learners: int, ray: str, num_envs: int) -> str:
    """What keeps `learners` learners from running ("" if nothing, or none asked for): no --ray, envs that do not
    divide among them, or no Ray Train installed (its import tried: a few seconds)."""
    if not learners:
        return ""
    if not ray:
        return (
            f"--learners {learners} needs --ray ADDRESS, the cluster Ray Train places the learners on (--ray local: "
            "this machine): add --ray, or drop --learners for one learner here"
        )
    if num_envs % learners:
        return f"--num-envs {num_envs} must divide among --learners {learners} (each plays num_envs / learners envs)"
    try:
        importlib.import_module("ray.train.torch")
    except ImportError:
        return MISSING
    return ""


def train_on_learners(
    config: ConfigT, train: Callable[[ConfigT, Learners], Path], run_dir: Path, learners: int, address: str
) -> Path:
    """Run `train` (a trainer's ``train``) as `learners` learner processes placed by Ray Train on the Ray cluster at
    `address`, each with a share of the CPUs there are free (at most a node's), spread over the nodes; return
    `run_dir`, where rank 0 wrote the run's files and Ray Train keeps its checkpoints (``ray_train/``).

    A learner that dies restarts the group from the last checkpoint, up to `MAX_RESTARTS` times; then, or on an error
    in a learner, or at once with too few free CPUs, `LearnersFailed` says why.
    """
    import ray.train
    from ray.train.torch import TorchTrainer

    from atari_game.rendezvous import LoopbackTorchConfig

    connected_here = not importlib.import_module("ray").is_initialized()
    ray_module = connect(address)
    try:
        # Ray's count of free CPUs, asked in a thread of its own: a GCS that never answers it (seen after a Ray Train
        # run in the same process) stops the run with an error instead of a hang.
        asking = concurrent.futures.ThreadPoolExecutor(max_workers=1)
        try:
            free = int(asking.submit(free_cpus, address).result(timeout=ANSWER_WAIT))
        except concurrent.futures.TimeoutError:
            raise LearnersFailed(
                f"the Ray cluster at {address} did not say how many CPUs it has free within {ANSWER_WAIT:g} s: "
                "check it with `ray status`, or restart it"
            ) from None
        finally:
            asking.shutdown(wait=False)
        if free < learners:
            raise LearnersFailed(
                f"--learners {learners} needs a CPU for each learner, and the Ray cluster at {address} has {free} free "
                f"(of {ray_module.cluster_resources().get('CPU', 0):g}): use --learners {max(free, 1)} or fewer, or "
                "add nodes"
            )
        smallest_node = min(node["Resources"].get("CPU", 0) for node in ray_module.nodes() if node["Alive"])
        cpus = int(max(1, min(smallest_node, free // learners)))
        gpus = ray_module.cluster_resources().get("GPU", 0) >= learners
        trainer = TorchTrainer(
            learner_process,
            train_loop_config={"config": config, "train": train, "cpus": cpus, "gpu": gpus},
            torch_config=LoopbackTorchConfig(backend="nccl" if gpus else "gloo"),
            scaling_config=ray.train.ScalingConfig(
                num_workers=learners, use_gpu=gpus, resources_per_worker={"CPU": cpus}, placement_strategy="SPREAD"
            ),
            run_config=ray.train.RunConfig(
                name="ray_train",
                storage_path=str(run_dir.resolve()),
                failure_config=ray.train.FailureConfig(max_failures=MAX_RESTARTS),
                checkpoint_config=ray.train.CheckpointConfig(num_to_keep=1),
            ),
        )
        ctrl_c = signal.getsignal(signal.SIGINT)
        try:
            trainer.fit()
        except ray.train.TrainingFailedError as error:
            raise LearnersFailed(f"the learners failed: {error}".strip()) from None
        except SystemExit:  # Ray Train's Ctrl-C handler aborted the run, and Ray's wait ends so: stopped by Ctrl-C
            raise KeyboardInterrupt from None
        finally:
            # Ray Train leaves its own Ctrl-C handler (one that aborts its run) installed after the run: the caller's
            # back, for a notebook's or a script's next Ctrl-C.
            if threading.current_thread() is threading.main_thread():
                signal.signal(signal.SIGINT, ctrl_c)
    finally:
        if connected_here:
            ray_module.shutdown()
    return run_dir


def learner_process(loop_config: dict[str, Any]) -> None:
    """One learner, as Ray Train runs it: its place among the learners, then the trainer's ``train``; restarted by
    Ray Train, it resumes from the checkpoint Ray Train kept."""
    import ray.train
    from ray.train.torch import get_device

    context = ray.train.get_context()
    config = loop_config["config"]
    learners = Learners(
        rank=context.get_world_rank(),
        count=context.get_world_size(),
        num_envs=config.num_envs,
        on_ray_train=True,
        cpus=loop_config["cpus"],
    )
    if loop_config["gpu"]:
        config = dataclasses.replace(config, device=str(get_device()))
    torch.set_num_threads(learners.cores)
    # A restart after a learner died goes on from the checkpoint Ray Train kept (a local directory: read in place).
    kept = ray.train.get_checkpoint()
    with kept.as_directory() if kept else contextlib.nullcontext(None) as directory:
        if directory:
            learners.restart = Path(directory) / "checkpoint.pt"
            config = dataclasses.replace(config, resume=True)
        loop_config["train"](config, learners)
