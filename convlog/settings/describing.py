"""What ``convlog config`` and the documentation print of the settings: each one's effective
value, secrets and passwords masked, where it came from (:func:`describe`), and the
``CONVLOG_*`` variables that are no setting (:func:`unknown_variables`)."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

from pydantic import SecretStr

from convlog.settings.declared import MASK, PREFIX, Settings, variable, variables
from convlog.settings.tokens import parse_tokens


def show(value: object) -> str:
    """A value as the documentation and ``convlog config`` print it (``unset`` for None)."""
    if value is None:
        return "unset"
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def _masked(name: str, value: object) -> str:
    if value is None:
        return "unset"
    if isinstance(value, SecretStr):
        if name == "api_tokens":  # tenants are not secret, their tokens are
            return ",".join(f"{tenant}:{MASK}" for tenant in parse_tokens(value.get_secret_value()).values())
        return MASK
    if name == "database_url" and isinstance(value, str):
        return mask_password(value)
    return show(value)


def mask_password(url: str) -> str:
    """A Postgres URL or ``key=value`` conninfo with its password (``user:pw@``, ``password=``) masked."""
    try:
        parts = urlsplit(url)
        password = parts.password
    except ValueError:  # not a URL Python can split (a broken IPv6 host): show none of it
        return "<unparsable database URL>"
    if password is not None:
        userinfo, _, hosts = parts.netloc.rpartition("@")
        url = urlunsplit(parts._replace(netloc=f"{userinfo.partition(':')[0]}:{MASK}@{hosts}"))
    return _PASSWORD_PARAMETER.sub(rf"\1{MASK}", url)


_PASSWORD_PARAMETER = re.compile(r"(\bpassword\s*=\s*)('(?:[^'\\]|\\.)*'|[^&\s]+)", re.IGNORECASE)


def unknown_variables(env: Mapping[str, str] | None = None) -> list[str]:
    """``CONVLOG_*`` variables in ``env`` (default: this process's) that are no setting: typos, or
    knobs of something else (the test suite's)."""
    env = os.environ if env is None else env
    declared = {var for name in Settings.model_fields for var in variables(name)}
    return sorted(var for var in env if var.startswith(PREFIX) and var not in declared)


@dataclass(frozen=True, slots=True)
class Described:
    """One line of ``convlog config``."""

    variable: str
    value: str  # secrets masked
    source: str  # "default", "environment" or "set in code"
    doc: str


def describe(settings: Settings) -> list[Described]:
    """Each setting's effective value (secrets masked) and where it came from."""
    lines = []
    for name, field in Settings.model_fields.items():
        read_from = settings._read_from.get(name)
        if read_from is not None:
            source = "environment" + ("" if read_from == variable(name) else f" ({read_from})")
        else:
            source = "set in code" if name in settings.model_fields_set else "default"
        lines.append(Described(variable(name), _masked(name, getattr(settings, name)), source, field.description or ""))
    return lines
