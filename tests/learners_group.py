"""A test's 2 learners in a gloo group on 127.0.0.1 (tests/test_learners.py): a module of its own, so that the
processes torch.multiprocessing spawns for it import only torch and atari_game, not the test's Ray cluster."""

import torch
import torch.distributed as dist

from atari_game import learners


def ranks_in_a_group(rank, port, results):
    """One of 2 learners in a gloo group on 127.0.0.1: what `Learners`' collectives give it, into `results`."""
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    try:
        me = learners.Learners(rank=rank, count=2, num_envs=4)
        generator = torch.Generator().manual_seed(0)
        # A minibatch of 6 samples of a rollout of 3 steps x 4 envs, and a linear model's squared error on it.
        values, inputs = torch.randn(12, generator=generator), torch.randn(12, 5, generator=generator)
        minibatch, model = torch.tensor([11, 0, 5, 6, 9, 2]), torch.nn.Linear(5, 1)
        torch.manual_seed(0)
        model.reset_parameters()
        mine = values.view(3, 4)[:, me.envs].reshape(-1), inputs.view(3, 4, 5)[:, me.envs].reshape(-1, 5)
        local = me.share(minibatch)
        [mean], [std] = me.mean_std([mine[0][local]])
        ((model(mine[1][local]).squeeze(-1) - mine[0][local]) ** 2).sum().div(len(minibatch)).backward()
        summed = me.sum_gradients(model.parameters(), torch.tensor([float(len(local))]))
        results[rank] = {
            "mean_std": (mean.item(), std.item()),
            "gradient": model.weight.grad.tolist(),
            "count": summed.item(),
        }
        me.check_identical(model, "before the change")
        if rank == 1:  # one learner's weights off by one bit
            with torch.no_grad():
                model.bias.copy_(torch.nextafter(model.bias, model.bias + 1))
        try:
            me.check_identical(model, "after the change")
        except RuntimeError as error:
            results[f"error {rank}"] = str(error)
    finally:
        dist.destroy_process_group()
