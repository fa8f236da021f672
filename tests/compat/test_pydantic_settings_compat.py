"""What convlog/pydantic_settings_compat.py relies on in pydantic-settings, for the versions it
declares: ``parse_env_vars`` normalises a mapping as the environment source reads
``os.environ``, and the source's ``_load_env_vars`` hook is what its values come from."""

from __future__ import annotations

from collections.abc import Mapping

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from convlog import pydantic_settings_compat
from convlog.pydantic_settings_compat import EnvSettingsSource, parse_env_vars
from tests.compat.versions import assert_within


def test_the_installed_pydantic_settings_is_the_one_written_for() -> None:
    assert_within(pydantic_settings_compat.DISTRIBUTION, pydantic_settings_compat.VERSIONS)


def test_parse_env_vars_normalises_a_mapping() -> None:
    """As convlog's settings read it: case-insensitive, an empty value unset."""
    env = {"APP_Name": "x", "APP_EMPTY": ""}
    assert parse_env_vars(env, False, True, None) == {"app_name": "x"}
    assert parse_env_vars(env, False, False, None) == {"app_name": "x", "app_empty": ""}


class _Example(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="APP_")
    name: str = "default"
    size: int = Field(1, ge=1)


class _FromMapping(EnvSettingsSource):
    def __init__(self, env: Mapping[str, str]) -> None:
        self._given = env
        super().__init__(_Example)

    def _load_env_vars(self) -> Mapping[str, str | None]:
        return parse_env_vars(self._given, self.case_sensitive, self.env_ignore_empty, self.env_parse_none_str)


def test_the_load_env_vars_hook_gives_the_sources_values() -> None:
    source = _FromMapping({"app_name": "given", "APP_SIZE": "3", "OTHER": "ignored"})
    assert source() == {"name": "given", "size": "3"}
    assert _FromMapping({})() == {}
    assert _Example(**_FromMapping({"APP_SIZE": "2"})()) == _Example(size=2)
