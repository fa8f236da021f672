"""``python -m devservices`` with a three-node cluster: ``status``, ``env`` and
``down`` find the cluster ``up --brokers 3`` recorded, and ``down`` stops every node. Run against
the session's cluster (laid out as the dev services lay theirs out) instead of a second one."""

from __future__ import annotations

import pytest

from devservices.cli import main
from devservices.kafka_cluster import KafkaCluster

pytestmark = [pytest.mark.kafka, pytest.mark.slow]


def test_the_commands_without_a_flag_find_and_stop_the_recorded_cluster(
    healthy_cluster: KafkaCluster, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("CONVLOG_DATA_DIR", str(healthy_cluster.data_dir.parent.parent))
    monkeypatch.delenv("CONVLOG_SERVICES_KAFKA_PORT", raising=False)  # the ports the cluster recorded

    assert main(["up", "--kafka-only", "--brokers", "3"]) == 0
    assert "already running" in capsys.readouterr().out
    assert main(["env", "--kafka-only"]) == 0
    assert capsys.readouterr().out == f"export CONVLOG_KAFKA_BOOTSTRAP={healthy_cluster.bootstrap}\n"
    assert main(["status", "--kafka-only", "--check"]) == 0
    status = capsys.readouterr().out
    assert all(f"node {n.node_id}  running   {n.bootstrap}" in status for n in healthy_cluster.nodes), status
    assert main(["up", "--kafka-only", "--brokers", "1"]) == 1, "a single broker cannot start beside the cluster"
    assert "down --kafka-only` first" in capsys.readouterr().err

    assert main(["down", "--kafka-only"]) == 0
    assert not any(node.running for node in healthy_cluster.nodes)
    assert main(["status", "--kafka-only", "--check"]) == 3
