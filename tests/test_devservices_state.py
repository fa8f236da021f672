"""The local services' state file: damaged, it is a clear error naming it, not a traceback."""

from __future__ import annotations

from pathlib import Path

import pytest

from convlog.local.devservices import kafka_handle
from convlog.local.processes import ServiceError
from convlog.settings import Settings


@pytest.mark.parametrize("content", ["{not json", "[19092]"])
def test_a_damaged_broker_state_file_is_a_service_error_naming_it(tmp_path: Path, content: str) -> None:
    state = tmp_path / "services" / "kafka" / "convlog-kafka.json"
    state.parent.mkdir(parents=True)
    state.write_text(content)
    with pytest.raises(ServiceError, match=r"convlog-kafka\.json"):
        kafka_handle(Settings(data_dir=tmp_path))
