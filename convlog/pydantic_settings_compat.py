"""The one place that names pydantic-settings' unstable API: reading settings from a mapping.

``Settings.from_env`` (convlog/settings/declared.py) reads a given mapping, not only ``os.environ`` (tests
pass one; a rebuild worker's is built by ``Settings.as_env``). pydantic-settings has no public
way to: its environment source is subclassed and its ``_load_env_vars`` hook (the one its own
dotenv source overrides) returns the mapping as ``parse_env_vars`` (in ``sources.utils``, not
exported) normalises it — keys lower-cased unless case-sensitive, empty values dropped when
asked. Both are named here only, for the pydantic-settings
versions in :data:`VERSIONS` (pyproject.toml's range; tests/compat/test_pydantic_settings_compat.py
checks the installed pydantic-settings against it, with this behaviour).
"""

from __future__ import annotations

from collections.abc import Mapping

from pydantic_settings import BaseSettings, EnvSettingsSource
from pydantic_settings.sources.utils import parse_env_vars

__all__ = ["DISTRIBUTION", "VERSIONS", "EnvSettingsSource", "MappingSource", "parse_env_vars"]

DISTRIBUTION = "pydantic-settings"
VERSIONS = ">=2.6,<2.17"  # written for 2.16; pyproject.toml's range (an unexported helper and a private hook)


class MappingSource(EnvSettingsSource):
    """pydantic-settings' environment source over a given mapping instead of ``os.environ``."""

    def __init__(self, settings_cls: type[BaseSettings], env: Mapping[str, str]) -> None:
        self._env = env
        super().__init__(settings_cls)

    def _load_env_vars(self) -> Mapping[str, str | None]:
        return parse_env_vars(self._env, self.case_sensitive, self.env_ignore_empty, self.env_parse_none_str)
