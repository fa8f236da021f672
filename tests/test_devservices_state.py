"""The local services' state file: damaged, it is a clear error naming it, not a traceback."""

from __future__ import annotations

from pathlib import Path

import pytest

from convlog.embedded.processes import ServiceError
from convlog.settings import Settings
from devservices.cli import kafka_handle, kafka_layout, main


@pytest.mark.parametrize("content", ["{not json", "[19092]"])
def test_a_damaged_broker_state_file_is_a_service_error_naming_it(tmp_path: Path, content: str) -> None:
    state = tmp_path / "services" / "kafka" / "convlog-kafka.json"
    state.parent.mkdir(parents=True)
    state.write_text(content)
    with pytest.raises(ServiceError, match=r"convlog-kafka\.json"):
        kafka_handle(Settings(data_dir=tmp_path))


def test_env_prints_the_three_node_bootstrap_for_the_layout_up_recorded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("CONVLOG_DATA_DIR", str(tmp_path))
    monkeypatch.delenv("CONVLOG_SERVICES_KAFKA_PORT", raising=False)
    assert main(["env", "--kafka-only"]) == 0  # nothing recorded: the single broker, as before
    assert capsys.readouterr().out == "export CONVLOG_KAFKA_BOOTSTRAP=127.0.0.1:19092\n"
    cluster = "export CONVLOG_KAFKA_BOOTSTRAP=127.0.0.1:19092,127.0.0.1:19094,127.0.0.1:19096\n"
    assert main(["env", "--kafka-only", "--brokers", "3"]) == 0
    assert capsys.readouterr().out == cluster
    (tmp_path / "services").mkdir()
    (tmp_path / "services" / "kafka-layout.json").write_text('{"brokers": 3}')  # as `up --brokers 3` leaves it
    assert main(["env", "--kafka-only"]) == 0
    assert capsys.readouterr().out == cluster
    assert kafka_layout(Settings(data_dir=tmp_path)) == 3


def test_a_damaged_layout_record_is_a_service_error_naming_it(tmp_path: Path) -> None:
    (tmp_path / "services").mkdir()
    (tmp_path / "services" / "kafka-layout.json").write_text('{"brokers": 2}')
    with pytest.raises(ServiceError, match=r"kafka-layout\.json"):
        kafka_layout(Settings(data_dir=tmp_path))
