"""How the learners of a Ray cluster on loopback meet: Ray Train's torch backend, with its rendezvous on 127.0.0.1.

Ray Train's rendezvous store (torch's ``TCPStore``, in the first learner) listens on every interface. Where the first
learner's node is at a loopback address (``--ray local``, the tests' clusters), `LoopbackTorchConfig` serves it on a
socket bound to 127.0.0.1 and keeps gloo's and NCCL's sockets on loopback, so that a local run opens no door; on any
other cluster it is Ray Train's `TorchConfig`. Imported only with Ray Train (``atari_game.learners``).
"""

from __future__ import annotations

import dataclasses
import ipaddress
import os
import socket
import sys
from datetime import timedelta
from typing import Any

import ray
import torch.distributed as dist
from ray.train.torch import TorchConfig

#: The loopback interface's name, for gloo's and NCCL's sockets.
LOOPBACK_INTERFACE = "lo0" if sys.platform == "darwin" else "lo"

#: The store the first learner serves, kept for the group's life (the group talks to it until it is destroyed).
_served: list[dist.TCPStore] = []


def serve_store(timeout_s: float) -> int:
    """In the first learner: start the group's rendezvous store on a socket bound to 127.0.0.1; return its port."""
    listening = socket.create_server(("127.0.0.1", 0))
    port = listening.getsockname()[1]
    # The store takes the bound socket (its descriptor, closed with it) instead of listening on every interface.
    timeout = timedelta(seconds=timeout_s)
    store = dist.TCPStore(
        "127.0.0.1", port, is_master=True, timeout=timeout, wait_for_workers=False, master_listen_fd=listening.detach()
    )
    _served[:] = [store]
    return port


def join_group(backend: str | None, world_rank: int, world_size: int, port: int, timeout_s: float) -> None:
    """In each learner: join the torch.distributed group through the store at 127.0.0.1:`port`."""
    os.environ["GLOO_SOCKET_IFNAME"] = os.environ["NCCL_SOCKET_IFNAME"] = LOOPBACK_INTERFACE
    timeout = timedelta(seconds=timeout_s)
    store = _served[0] if world_rank == 0 else dist.TCPStore("127.0.0.1", port, is_master=False, timeout=timeout)
    dist.init_process_group(backend, store=store, rank=world_rank, world_size=world_size, timeout=timeout)


def on_loopback(address: str) -> bool:
    """Whether `address` (a node's IP address) is a loopback one: 127.0.0.0/8, ::1, ::ffff:127.0.0.1."""
    ip = ipaddress.ip_address(address)
    return (getattr(ip, "ipv4_mapped", None) or ip).is_loopback


class LoopbackTorchBackend(TorchConfig().backend_cls):  # type: ignore[misc]  # Ray Train's torch backend
    """Ray Train's torch backend, with the group's rendezvous on 127.0.0.1 when the first learner is on loopback."""

    def on_start(self, worker_group: Any, backend_config: TorchConfig) -> None:
        if not on_loopback(worker_group.execute_single(0, ray.util.get_node_ip_address)):
            return super().on_start(worker_group, backend_config)
        timeout_s = backend_config.timeout_s
        port = worker_group.execute_single(0, serve_store, timeout_s=timeout_s)
        group = {"backend": backend_config.backend, "world_size": len(worker_group), "timeout_s": timeout_s}
        joins = [
            worker_group.execute_single_async(rank, join_group, world_rank=rank, port=port, **group)
            for rank in range(len(worker_group))
        ]
        ray.get(joins)


@dataclasses.dataclass
class LoopbackTorchConfig(TorchConfig):
    """`TorchConfig` (`backend` given: "gloo" or "nccl") whose group meets on 127.0.0.1 on a cluster on loopback."""

    @property
    def backend_cls(self) -> type:
        return LoopbackTorchBackend
