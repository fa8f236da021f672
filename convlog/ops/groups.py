"""``convlog members list|remove``: the members of convlog's consumer groups.

The groups' names are :mod:`convlog.resources`', below both the processes that join the groups
(:mod:`convlog.runtime`) and this command that removes members from them, so that both use the same.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from convlog.resources import live_read_models, projector_group, summarizer_group
from convlog.settings import Settings
from events.errors import ConfigurationError
from events.kafka_groups import GroupState, describe_group, remove_static_members
from pgstore.pool import database_identity, retrying

Role = Literal["projector", "summarizer"]
ROLES: tuple[Role, ...] = ("projector", "summarizer")


@dataclass(frozen=True, slots=True)
class Removal:
    group: str
    outcome: dict[str, str | None]  # instance id -> None (removed) or why not

    @property
    def all_removed(self) -> bool:
        return all(why is None for why in self.outcome.values())

    def lines(self) -> list[str]:
        out = [f"consumer group {self.group}:"]
        for instance, why in self.outcome.items():
            if why is None:
                out.append(f"  {instance}: removed; its partitions are assigned again now")
            elif why == "UnknownMemberIdError":
                out.append(f"  {instance}: not a member (never joined, already removed, or its session expired)")
            else:
                out.append(f"  {instance}: not removed ({why})")
        return out


async def group_of(settings: Settings, role: Role) -> str:
    """The group ``role``'s processes of this deployment join: for the projector, the live
    read-models version's (it follows a switch to the next one)."""
    async with live_read_models(settings) as handle:
        database = await retrying(lambda: database_identity(handle.pool), action="identifying the database")
        if role == "projector":
            return projector_group(settings.topic, database, handle.schema)
        return summarizer_group(settings.topic, database)


async def remove_members(settings: Settings, role: Role, instance_ids: Sequence[str]) -> Removal:
    """Remove static members (by ``CONVLOG_PROJECTOR_INSTANCE_ID`` / ``CONVLOG_SUMMARIZER_INSTANCE_ID``)
    stopped for good from their group: their partitions go to the other members at once instead
    of after the session timeout."""
    if not settings.kafka_bootstrap:
        raise ConfigurationError("members are Kafka consumer group members: set CONVLOG_KAFKA_BOOTSTRAP")
    ids = [i.strip() for i in instance_ids]
    if not ids or any(not i for i in ids):
        raise ConfigurationError("name each member by its instance id (a non-empty string)")
    group = await group_of(settings, role)
    return Removal(group, await remove_static_members(settings.kafka_bootstrap, group, list(dict.fromkeys(ids))))


async def list_members(settings: Settings, role: Role) -> GroupState:
    """The members of ``role``'s group of this deployment, with the partitions each was assigned."""
    if not settings.kafka_bootstrap:
        raise ConfigurationError("members are Kafka consumer group members: set CONVLOG_KAFKA_BOOTSTRAP")
    return await describe_group(settings.kafka_bootstrap, await group_of(settings, role))


def render_members(state: GroupState) -> str:
    lines = [f"consumer group {state.group}: {state.state}, {len(state.members)} member(s)"]
    if state.members:
        lines.append(f"  {'instance id':<24} {'host':<16} partitions")
    for m in state.members:
        partitions = ", ".join(map(str, m.partitions)) or "-"
        lines.append(f"  {m.instance_id or '(dynamic)':<24} {m.host.lstrip('/'):<16} {partitions}")
    return "\n".join(lines)
