"""Numeric settings: one reader, clear errors naming the variable."""

from __future__ import annotations

import pytest

from convlog.settings import Settings, env_number
from convlog.summarizing import SummarizerSettings
from events.errors import ConfigurationError


def test_unset_gives_the_default_and_values_keep_its_type() -> None:
    assert env_number({}, "X", 7, minimum=1) == 7
    assert env_number({"X": ""}, "X", 2.5, minimum=0.0) == 2.5
    assert env_number({"X": "12"}, "X", 7, minimum=1) == 12
    assert env_number({"X": "0.25"}, "X", 1.0, minimum=0.01) == 0.25


@pytest.mark.parametrize(
    ("raw", "default", "message"),
    [
        ("ten", 7, "X must be an integer, got 'ten'"),
        ("1.5", 7, "X must be an integer, got '1.5'"),
        ("soon", 1.0, "X must be a number, got 'soon'"),
        ("0", 7, "X must be >= 1, got 0"),
    ],
)
def test_a_bad_value_names_the_setting(raw: str, default: float, message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        env_number({"X": raw}, "X", default, minimum=1)


def test_settings_refuse_a_bad_partition_count() -> None:
    with pytest.raises(ConfigurationError, match="CONVLOG_PARTITIONS must be >= 1"):
        Settings.from_env({"CONVLOG_PARTITIONS": "0"})


def test_the_summarizer_start_is_earliest_unless_set_to_latest() -> None:
    assert SummarizerSettings.from_env({}).start == "earliest"
    assert SummarizerSettings.from_env({"CONVLOG_SUMMARIZER_START": " Latest "}).start == "latest"
    with pytest.raises(ConfigurationError, match="CONVLOG_SUMMARIZER_START must be earliest or latest"):
        SummarizerSettings.from_env({"CONVLOG_SUMMARIZER_START": "now"})
