"""A Kafka Metadata request over a plain socket (stdlib only): is a broker serving, which brokers
and topics does it know, and who leads and follows each partition.

The local services use it to wait for readiness and to report status without starting a Kafka
client (and without an event loop: the cluster's leader look-ups run from threads and fixtures).
Metadata v4 is the oldest version Kafka 4.x still serves and carries all we read.
"""

from __future__ import annotations

import socket
import struct
from dataclasses import dataclass

from convlog.embedded.processes import ServiceError


@dataclass(frozen=True, slots=True)
class PartitionState:
    """One partition as a broker's metadata shows it (leader -1: none right now)."""

    topic: str
    partition: int
    leader: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class ClusterMetadata:
    cluster_id: str  # which cluster answered: a local service refuses a broker of another one
    brokers: tuple[int, ...]
    controller: int
    topics: tuple[str, ...]
    partitions: tuple[PartitionState, ...]

    def partition(self, topic: str, partition: int) -> PartitionState | None:
        return next((p for p in self.partitions if (p.topic, p.partition) == (topic, partition)), None)


def _kafka_call(sock: socket.socket, api_key: int, version: int, body: bytes, correlation: int) -> bytes:
    client = b"convlog-devservices"
    header = struct.pack(">hhih", api_key, version, correlation, len(client)) + client
    request = header + body
    sock.sendall(struct.pack(">i", len(request)) + request)
    size = struct.unpack(">i", _recv(sock, 4))[0]
    response = _recv(sock, size)
    if struct.unpack(">i", response[:4])[0] != correlation:
        raise ServiceError("Kafka answered with a wrong correlation id")
    return response[4:]


def _recv(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise ConnectionError("Kafka closed the connection")
        data += chunk
    return data


def cluster_metadata(host: str, port: int, timeout: float = 5.0, topics: list[str] | None = None) -> ClusterMetadata:
    """The metadata of ``topics`` (all topics when None) as the broker at host:port knows it."""
    if topics is None:
        wanted = struct.pack(">i", -1)
    else:
        wanted = struct.pack(">i", len(topics)) + b"".join(
            struct.pack(">h", len(t.encode())) + t.encode() for t in topics
        )
    with socket.create_connection((host, port), timeout=timeout) as sock:
        body = _kafka_call(sock, 18, 0, b"", 1)  # ApiVersions v0
        if struct.unpack(">h", body[:2])[0] != 0:
            raise ServiceError("Kafka ApiVersions failed")
        body = _kafka_call(sock, 3, 4, wanted + struct.pack(">b", 0), 2)  # Metadata v4, no auto-create
    pos = 4  # throttle_time_ms

    def take(fmt: str) -> int:
        nonlocal pos
        (value,) = struct.unpack_from(fmt, body, pos)
        pos += struct.calcsize(fmt)
        return int(value)

    def string() -> str:
        nonlocal pos
        n = take(">h")
        text = body[pos : pos + max(n, 0)].decode()
        pos += max(n, 0)
        return text

    def ids() -> tuple[int, ...]:
        return tuple(take(">i") for _ in range(take(">i")))

    brokers = []
    for _ in range(take(">i")):
        brokers.append(take(">i"))
        string(), take(">i"), string()  # host, port, rack
    cluster_id = string()
    controller = take(">i")
    names, partitions = [], []
    for _ in range(take(">i")):
        error = take(">h")  # an unknown topic comes back with an error code: not listed
        name = string()
        if error == 0:
            names.append(name)
        take(">b")  # is_internal
        for _ in range(take(">i")):
            take(">h")
            index, leader = take(">i"), take(">i")
            replicas = ids()
            partitions.append(PartitionState(name, index, leader, replicas, ids()))
    return ClusterMetadata(cluster_id, tuple(sorted(brokers)), controller, tuple(names), tuple(partitions))


def kafka_metadata(host: str, port: int, timeout: float = 5.0) -> tuple[list[int], list[str]]:
    """(broker ids, topic names) from a Metadata v4 request: proof that the broker serves requests."""
    metadata = cluster_metadata(host, port, timeout)
    return list(metadata.brokers), list(metadata.topics)
