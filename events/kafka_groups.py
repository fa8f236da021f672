"""A consumer group's members, and removing static ones (Kafka's ``RemoveMembersFromConsumerGroup``).

A consumer with a ``group.instance.id`` (static membership, KIP-345) does not leave its group
when it stops: the group keeps its partitions for the session timeout, so that the same member
restarted within it takes them back without a rebalance. Right for a rolling restart; a member
scaled down for good then holds its partitions that long for nothing. Kafka's admin tools remove
such members by instance id (``LeaveGroup`` v3, a request aiokafka does not carry: it is defined
here in aiokafka's own protocol types), and the group rebalances at once. The members are
listed with ``DescribeGroups`` v4, the first version that names their instance ids (aiokafka
carries v0-v3).

aiokafka's protocol types, its low-level client and its member-assignment codec are not its
documented API: this module is the one place that uses them, for the aiokafka versions in
:data:`VERSIONS` (pyproject.toml's range; tests/compat/test_aiokafka_compat.py checks the
installed aiokafka against it, with the wire bytes relied on).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from aiokafka.client import AIOKafkaClient
from aiokafka.coordinator.protocol import ConsumerProtocolMemberAssignment
from aiokafka.errors import KafkaError, for_code
from aiokafka.protocol.api import Request, RequestStruct, Response
from aiokafka.protocol.types import Array, Boolean, Bytes, Int16, Int32, Schema, String

from events.kafka_log import convert_kafka_error

DISTRIBUTION = "aiokafka"
VERSIONS = ">=0.12,<0.15"  # written for 0.14; pyproject.toml's range (undocumented modules: the next minor is unknown)

_GROUP_COORDINATOR = 0  # FindCoordinator's key type for consumer groups
_UNKNOWN_MEMBER_ID = ""  # a member named by its instance id alone


class _LeaveGroupResponseV3(Response):  # type: ignore[misc]  # aiokafka.protocol is untyped to mypy here
    API_KEY = 13
    API_VERSION = 3
    SCHEMA = Schema(
        ("throttle_time_ms", Int32),
        ("error_code", Int16),
        (
            "members",
            Array(("member_id", String("utf-8")), ("group_instance_id", String("utf-8")), ("error_code", Int16)),
        ),
    )


class _LeaveGroupRequestV3(RequestStruct):  # type: ignore[misc]  # the same
    API_KEY = 13
    API_VERSION = 3
    RESPONSE_TYPE = _LeaveGroupResponseV3
    SCHEMA = Schema(
        ("group_id", String("utf-8")),
        ("members", Array(("member_id", String("utf-8")), ("group_instance_id", String("utf-8")))),
    )


class _RemoveStaticMembers(Request[_LeaveGroupRequestV3]):  # type: ignore[misc]  # the same
    """``LeaveGroup`` v3 (Kafka 2.4+; the oldest version Kafka 4 serves that names members)."""

    API_KEY: ClassVar[int] = 13

    def __init__(self, group: str, instance_ids: Sequence[str]) -> None:
        self._group = group
        self._instance_ids = list(instance_ids)

    def build(self, request_struct_class: type[_LeaveGroupRequestV3]) -> _LeaveGroupRequestV3:
        return request_struct_class(self._group, [(_UNKNOWN_MEMBER_ID, i) for i in self._instance_ids])


class _DescribeGroupsResponseV4(Response):  # type: ignore[misc]  # the same
    API_KEY = 15
    API_VERSION = 4
    SCHEMA = Schema(
        ("throttle_time_ms", Int32),
        (
            "groups",
            Array(
                ("error_code", Int16),
                ("group", String("utf-8")),
                ("state", String("utf-8")),
                ("protocol_type", String("utf-8")),
                ("protocol", String("utf-8")),
                (
                    "members",
                    Array(
                        ("member_id", String("utf-8")),
                        ("group_instance_id", String("utf-8")),
                        ("client_id", String("utf-8")),
                        ("client_host", String("utf-8")),
                        ("member_metadata", Bytes),
                        ("member_assignment", Bytes),
                    ),
                ),
                ("authorized_operations", Int32),
            ),
        ),
    )


class _DescribeGroupsRequestV4(RequestStruct):  # type: ignore[misc]  # the same
    API_KEY = 15
    API_VERSION = 4
    RESPONSE_TYPE = _DescribeGroupsResponseV4
    SCHEMA = Schema(("groups", Array(String("utf-8"))), ("include_authorized_operations", Boolean))


class _DescribeGroup(Request[_DescribeGroupsRequestV4]):  # type: ignore[misc]  # the same
    """``DescribeGroups`` v4 (Kafka 2.4+): the members with their instance ids."""

    API_KEY: ClassVar[int] = 15

    def __init__(self, group: str) -> None:
        self._group = group

    def build(self, request_struct_class: type[_DescribeGroupsRequestV4]) -> _DescribeGroupsRequestV4:
        return request_struct_class(groups=[self._group], include_authorized_operations=False)


@dataclass(frozen=True, slots=True)
class GroupMember:
    instance_id: str | None  # None: a dynamic member
    member_id: str
    client_id: str
    host: str
    partitions: tuple[int, ...]  # of the topic the group reads, as its leader assigned them


@dataclass(frozen=True, slots=True)
class GroupState:
    group: str
    state: str  # Kafka's: Stable, PreparingRebalance, CompletingRebalance, Empty, Dead
    members: tuple[GroupMember, ...]


async def describe_group(bootstrap: str, group: str, *, client_id: str = "convlog-members") -> GroupState:
    """``group``'s state and members (a group nobody ever joined: ``Dead``, no members). Raises
    :class:`~events.errors.LogError` when it cannot be asked."""
    client = AIOKafkaClient(bootstrap_servers=bootstrap, client_id=client_id)
    action = f"describing consumer group {group}"
    try:
        await client.bootstrap()
        coordinator = await client.coordinator_lookup(_GROUP_COORDINATOR, group)
        response = await client.send(coordinator, _DescribeGroup(group))
    except KafkaError as e:
        raise convert_kafka_error(e, action=action) from e
    finally:
        await client.close()
    [(error_code, _, state, _, _, members, _)] = response.groups
    if error_code:
        raise convert_kafka_error(for_code(error_code)(), action=action)
    return GroupState(group, state, tuple(sorted((_member(*m) for m in members), key=_order)))


def _member(
    member_id: str, instance_id: str | None, client_id: str, host: str, _: bytes, assignment: bytes
) -> GroupMember:
    partitions: tuple[int, ...] = ()
    if assignment:  # empty while the group rebalances
        decoded = ConsumerProtocolMemberAssignment.decode(assignment)
        partitions = tuple(sorted(p for _, ps in decoded.assignment for p in ps))
    return GroupMember(instance_id, member_id, client_id, host, partitions)


def _order(m: GroupMember) -> tuple[str, str]:
    return (m.instance_id or "", m.member_id)


async def remove_static_members(
    bootstrap: str, group: str, instance_ids: Sequence[str], *, client_id: str = "convlog-members"
) -> dict[str, str | None]:
    """Remove the members ``instance_ids`` from ``group`` at once. Per instance id: None when it
    was removed, else why not (Kafka's error name: ``UnknownMemberIdError`` when it is not a
    member). Raises :class:`~events.errors.LogError` when the group cannot be asked (retriable
    when Kafka is unavailable)."""
    client = AIOKafkaClient(bootstrap_servers=bootstrap, client_id=client_id)
    action = f"removing members {', '.join(instance_ids)} from consumer group {group}"
    try:
        await client.bootstrap()
        coordinator = await client.coordinator_lookup(_GROUP_COORDINATOR, group)
        response = await client.send(coordinator, _RemoveStaticMembers(group, instance_ids))
    except KafkaError as e:
        raise convert_kafka_error(e, action=action) from e
    finally:
        await client.close()
    return _outcome(response, action)


def _outcome(response: Any, action: str) -> dict[str, str | None]:
    if response.error_code:  # the group as a whole: none, not coordinated here, ...
        raise convert_kafka_error(for_code(response.error_code)(), action=action)
    per_member: Mapping[str, int] = {instance: code for _, instance, code in response.members}
    return {i: (for_code(c).__name__ if c else None) for i, c in per_member.items()}
