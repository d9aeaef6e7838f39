"""How the Ray runtime names what it creates, so that a restarted server finds it again.

One replica start (a gang) is one placement group ``engine.<owner>.<token>`` and one detached
actor per rank, ``engine.<owner>.<token>.<rank>-of-<ranks>``, all in the ``modelyard`` namespace.
The engine handle's id is ``<owner>.<token>.<ranks>``: everything needed to reach every rank by
name, with no other record.
"""

from __future__ import annotations

from dataclasses import dataclass

from modelyard.runtimes.base import EngineHandle

PREFIX = "engine"
# The Ray node label that names a worker (``modelyard worker join --name``; the host name by default).
WORKER_LABEL = "modelyard.io/worker"


@dataclass(frozen=True)
class GangName:
    owner: str
    launch_token: str
    ranks: int

    @property
    def group(self) -> str:
        return f"{PREFIX}.{self.owner}.{self.launch_token}"

    def actor(self, rank: int) -> str:
        return f"{self.group}.{rank}-of-{self.ranks}"

    def handle(self) -> EngineHandle:
        label = f"ray gang {self.launch_token[:8]}" + (f" ({self.ranks} ranks)" if self.ranks > 1 else "")
        return EngineHandle(runtime="ray", id=f"{self.owner}.{self.launch_token}.{self.ranks}", label=label)

    @classmethod
    def from_handle(cls, handle: EngineHandle) -> GangName:
        owner, token, ranks = handle.id.rsplit(".", 2)
        return cls(owner=owner, launch_token=token, ranks=int(ranks))


def parse_actor_name(name: str, owner: str) -> tuple[GangName, int] | None:
    """(gang, rank) of an actor name of ``owner``'s engines; None for any other name."""
    head = f"{PREFIX}.{owner}."
    if not name.startswith(head):
        return None
    token, _, rank_text = name[len(head) :].partition(".")
    rank, _, ranks = rank_text.partition("-of-")
    if not (token and rank.isdigit() and ranks.isdigit()):
        return None
    return GangName(owner=owner, launch_token=token, ranks=int(ranks)), int(rank)
