"""What events/kafka_groups.py relies on in aiokafka's undocumented protocol modules, for the
versions it declares: requests defined with aiokafka's protocol types encode to Kafka's wire
bytes, a response decodes from them, and a member's assignment round-trips."""

from __future__ import annotations

from aiokafka.coordinator.protocol import ConsumerProtocolMemberAssignment

from events import kafka_groups
from events.kafka_groups import (
    _DescribeGroup,
    _DescribeGroupsRequestV4,
    _LeaveGroupRequestV3,
    _LeaveGroupResponseV3,
    _RemoveStaticMembers,
)
from tests.compat.versions import assert_within


def test_the_installed_aiokafka_is_the_one_written_for() -> None:
    assert_within(kafka_groups.DISTRIBUTION, kafka_groups.VERSIONS)


def test_the_requests_encode_to_kafkas_wire_bytes() -> None:
    leave = _RemoveStaticMembers("g", ["i1"]).build(_LeaveGroupRequestV3)
    # group_id (int16 length + bytes), then the members array (int32 count): member_id "", instance id "i1"
    assert leave.encode() == b"\x00\x01g" + b"\x00\x00\x00\x01" + b"\x00\x00" + b"\x00\x02i1"
    describe = _DescribeGroup("g").build(_DescribeGroupsRequestV4)
    assert describe.encode() == b"\x00\x00\x00\x01\x00\x01g" + b"\x00"  # the groups, include_authorized_operations
    assert (_LeaveGroupRequestV3.API_KEY, _LeaveGroupRequestV3.API_VERSION) == (13, 3)


def test_a_response_decodes_from_kafkas_wire_bytes() -> None:
    wire = b"\x00\x00\x00\x00" + b"\x00\x00" + b"\x00\x00\x00\x01" + b"\x00\x00" + b"\x00\x02i1" + b"\x00\x19"
    response = _LeaveGroupResponseV3.decode(wire)
    assert (response.error_code, response.members) == (0, [("", "i1", 25)])  # 25: UnknownMemberId


def test_a_members_assignment_round_trips() -> None:
    encoded = ConsumerProtocolMemberAssignment(0, [("t", [2, 0])], b"").encode()
    assert ConsumerProtocolMemberAssignment.decode(encoded).assignment == [("t", [2, 0])]
