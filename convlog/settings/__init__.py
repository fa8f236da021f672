"""Every setting convlog reads, declared once: name, type, default, range and meaning.

Settings come from ``CONVLOG_*`` environment variables (plus ``OPENAI_API_KEY`` and
``JAVA_HOME``, read under their own names); an unset or empty variable means the default.
pydantic-settings does the reading and the type and range checks, so no module parses a
variable by hand and no module but this one reads the environment: the composition root
builds :class:`Settings` once (:meth:`Settings.from_env`) and passes it — or the plain option
objects the lower layers take, such as :meth:`Settings.window_policy` — down.

A malformed or out-of-range value is one :class:`SettingsError` naming the variable, the value
(masked for secrets) and what was expected; the CLI turns it into exit code 2. ``convlog
config`` prints :func:`describe`: each setting's effective value and where it came from.

``Settings(...)`` built in code (tests, benchmarks) reads no environment: the defaults and the
values given. The configuration table of docs/configuration.md is checked against this declaration by a test.
"""

from __future__ import annotations

from convlog.settings.declared import MASK, PREFIX, Settings, SettingsError, variable, variables
from convlog.settings.describing import Described, describe, mask_password, show, unknown_variables
from convlog.settings.tokens import TOKENS_FORMAT, parse_tokens
from events.producer import DEFAULT_MAX_EVENT_BYTES

__all__ = [
    "DEFAULT_MAX_EVENT_BYTES",
    "MASK",
    "PREFIX",
    "TOKENS_FORMAT",
    "Described",
    "Settings",
    "SettingsError",
    "describe",
    "mask_password",
    "parse_tokens",
    "show",
    "unknown_variables",
    "variable",
    "variables",
]
