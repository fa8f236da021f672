"""The declaration of every setting (:class:`Settings`), how it is read from an environment
(:meth:`Settings.from_env`, :class:`SettingsError`) and which variables name it (:func:`variables`).

See :mod:`convlog.settings` for the rules all of them follow."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import AliasChoices, Field, PrivateAttr, SecretStr, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from convlog.pydantic_settings_compat import MappingSource
from convlog.settings.editing import EDITING_EXAMPLE, EditingSpec
from convlog.settings.tokens import TOKENS_FORMAT, parse_tokens
from events.errors import ConfigurationError
from events.producer import DEFAULT_MAX_EVENT_BYTES
from events.sealing.local_kek import MASTER_KEY_FILE, LocalMasterKey
from projectors.tokens import DEFAULT_COUNTED
from projectors.tokens import counted_encodings as _counted_encodings
from projectors.window import (
    DEFAULT_KEEP_TURNS,
    DEFAULT_MAX_TURNS,
    LEGACY_KEEP_TURNS,
    LEGACY_MAX_TURNS,
    WindowPolicy,
)

PREFIX = "CONVLOG_"
MASK = "****"


class SettingsError(ConfigurationError):
    """One or more settings have a value that is not what the declaration expects."""

    code = "invalid_settings"


def _port(default: int | None, description: str) -> Any:
    return Field(default, ge=1, le=65535, description=description)


class Settings(BaseSettings):
    """The configuration of every convlog process. Field ``x`` is ``CONVLOG_X`` unless its
    ``validation_alias`` names other variables."""

    model_config = SettingsConfigDict(
        env_prefix=PREFIX, env_ignore_empty=True, frozen=True, populate_by_name=True, extra="forbid"
    )

    # -- the log and the read models
    kafka_bootstrap: str | None = Field(None, description="Kafka bootstrap servers (unset: the embedded log)")
    database_url: str | None = Field(
        None, description="Postgres URL for the read models (unset: the embedded Postgres)"
    )
    data_dir: Path = Field(Path(".convlog"), description="embedded log file, embedded Postgres, local services' data")
    # Kafka's topic-name rule; the embedded log's file is named after the topic, so no path
    # separator may escape the data directory either.
    topic: str = Field(
        "convlog.events", pattern=r"^[A-Za-z0-9._-]{1,249}$", description="the event topic (created if missing)"
    )
    partitions: int = Field(
        12, ge=1, le=10_000, description="partitions for a new topic / embedded log (an existing one keeps its own)"
    )
    max_event_bytes: int = Field(
        DEFAULT_MAX_EVENT_BYTES,
        ge=1,
        description="largest encoded event the producer accepts (and the projector applies)",
    )
    # -- keys: crypto-shredding (docs/erasure.md)
    master_key: SecretStr | None = Field(
        None,
        description="the local master key: base64 of 32 bytes, or several comma-separated, the current first "
        "(unset: DATA_DIR/master.key, created mode 0600)",
    )
    keys_topic: str | None = Field(
        None, pattern=r"^[A-Za-z0-9._-]{1,249}$", description="the compacted keys topic (unset: TOPIC.keys)"
    )
    sealing: bool = Field(
        default=True,
        description="seal content under per-conversation keys before it enters the log (docs/erasure.md); off: "
        "plain records, which an erase cannot shred",
    )
    keys_compaction_lag_s: int = Field(
        3600,
        ge=1,
        description="a new keys topic's max.compaction.lag.ms and segment.ms: how long a destroyed key's wrapped "
        "bytes may stay in the topic",
    )
    kek_factory: str | None = Field(
        None,
        pattern=r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$",
        description="`module:callable` returning the KeyWrapper of a KMS (unset: the local master key)",
    )
    # -- projection
    window_max_turns: int = Field(DEFAULT_MAX_TURNS, ge=1, description="window hysteresis: at most this many turns")
    window_keep_turns: int = Field(
        DEFAULT_KEEP_TURNS, ge=1, description="window hysteresis: dropping to this many (<= the maximum)"
    )
    token_encodings: str = Field(
        ",".join(DEFAULT_COUNTED),
        description="tiktoken encodings the projector counts and stores, comma-separated (`o200k_base`, "
        "`cl100k_base`); a context for a model on another one counts its messages when read (cached)",
    )
    kafka_ack_timeout_s: float = Field(
        30.0,
        gt=0,
        description="how long an append waits for Kafka's acknowledgement before it answers 503 (retriable; it may "
        "still be written: retry with the same Idempotency-Key)",
    )
    kafka_session_timeout_ms: int = Field(
        10_000, ge=1, description="consumer-group session timeout of the projector and the summarizer"
    )
    projector_instance_id: str | None = Field(
        None, description="static group membership: a restarted projector takes its partitions back at once"
    )
    version_poll_s: float = Field(
        1.0, ge=0.01, description="how often `project` / `serve` check which read-models version is live"
    )
    # A frozen projector (stopped, paused, partitioned away) must not block its partitions' next
    # owner on the row locks of its transaction: its sessions bound themselves (0: no bound).
    projector_lock_timeout_s: float = Field(
        10.0, ge=0, description="a projector statement waiting that long for a lock fails and is retried"
    )
    projector_statement_timeout_s: float = Field(
        60.0, ge=0, description="a projector statement running that long is cancelled and retried"
    )
    projector_idle_in_transaction_timeout_s: float = Field(
        30.0,
        ge=0,
        description="a projector transaction stalled on its client that long (idle, or inside a COPY) is ended, "
        "releasing its locks",
    )
    projector: Literal["on", "off"] = Field(
        "on",
        description="`off`: `convlog serve` runs no projector (API only, needs Kafka; `convlog project` runs apart)",
    )
    # -- the HTTP API
    http_host: str = Field("127.0.0.1", description="where `convlog serve` listens")
    http_port: int = _port(8080, "the port `convlog serve` listens on")
    shutdown_grace_s: int = Field(
        10, ge=0, description="on SIGTERM/SIGINT, how long `convlog serve` lets requests in flight finish"
    )
    http_access_log: bool = Field(
        default=False,
        description="a log line per request (`http.request`: route template, status, duration, tenant, token id); "
        "off by default: it is a measurable share of a request's cost, and the request metrics count every request",
    )
    http_keep_alive_s: int = Field(5, ge=1, description="a connection idle that long after a response is closed")
    http_header_timeout_s: float = Field(
        10.0,
        ge=0.1,
        description="a connection without a complete request head that long after connecting or its last response "
        "is closed",
    )
    http_body_timeout_s: float = Field(
        30.0,
        ge=0.1,
        description="a request whose body has not wholly arrived that long after its head is answered 408 "
        "`body_timeout` and its connection closed",
    )
    api_tokens: SecretStr | None = Field(
        None, description=f"`tenant:token` pairs, comma-separated ({TOKENS_FORMAT}), `app` tokens; unset: none"
    )
    api_tokens_file: Path | None = Field(None, description="a TOML file of hashed tokens with roles (docs/http-api.md)")
    api_tokens_reload_s: float = Field(5.0, gt=0, description="how often a changed token file is read again")
    app_tokens_erase: bool = Field(default=True, description="`false`: app tokens may not erase (403 forbidden_role)")
    openai_user_id: str = Field(
        "default",
        min_length=1,
        description="the convlog user of an OpenAI Conversations API request (`/v1/conversations`) without a "
        "`Convlog-User-Id` header",
    )
    window_image_turns: int = Field(2, ge=0, description="only the last N turns keep their images")
    context_editing: EditingSpec = Field(
        None, description=f"a context request's default editing, as query parameters (`{EDITING_EXAMPLE}`)"
    )
    default_encoding: str = Field(
        "o200k_base", description="tiktoken encoding for models the table does not know (counts are then an estimate)"
    )
    # -- summaries
    summarizer: Literal["on", "off"] = Field(
        "on", description="`off`: `convlog serve` runs no summarizer (`convlog summarize` runs apart)"
    )
    summarizer_start: Literal["earliest", "latest"] = Field(
        "earliest",
        description="where a summarizer that never ran starts: `earliest` reads the whole log, `latest` its end",
    )
    summarizer_instance_id: str | None = Field(None, description="static group membership for `convlog summarize`")
    llm_base_url: str | None = Field(
        None, description="OpenAI-compatible endpoint for summaries (unset: the offline summarizer)"
    )
    llm_api_key: SecretStr | None = Field(
        None,
        validation_alias=AliasChoices("CONVLOG_LLM_API_KEY", "OPENAI_API_KEY"),
        description="the endpoint's API key (else `OPENAI_API_KEY`)",
    )
    llm_model: str = Field("gpt-4o-mini", min_length=1, description="the summary model")
    llm_timeout_s: float = Field(60.0, ge=0.1, description="per summary request")
    llm_max_retries: int = Field(2, ge=0, description="the client's own retries (exponential backoff)")
    summary_max_tokens: int = Field(400, ge=16, description="a summary's size limit (o200k_base tokens), enforced")
    # -- operations
    metrics_port: int | None = Field(
        None, ge=0, le=65535, description="`convlog project` / `summarize` serve Prometheus metrics there"
    )
    metrics_host: str = Field("127.0.0.1", description="the metrics endpoint's address")
    log_level: Literal["debug", "info", "warning", "error", "critical"] | None = Field(
        None, description="structured logs on stderr; unset: `info` (`warning` for one-shot commands)"
    )
    retention_idle_days: int | None = Field(
        None, ge=1, description="`convlog serve` runs retention daily for conversations idle this long"
    )
    retention_first_run_s: float = Field(60.0, ge=0.0, description="the first retention run, after the start")
    retention_archive_dir: Path | None = Field(None, description="retention archives (unset: DATA_DIR/retention)")
    # -- local services (development and CI)
    services_kafka_port: int | None = _port(None, "the local Kafka (unset: as formatted, else 19092)")
    services_kafka_controller_port: int | None = _port(None, "its controller listener (unset: port + 1)")
    services_postgres_port: int = _port(15432, "the local Postgres")
    services_kafka_version: str | None = Field(None, description="the Kafka version Maven resolves (unset: the pom's)")
    services_kafka_pom: Path | None = Field(None, description="the pom that lists the broker's jars")
    services_kafka_jvm_opts: str | None = Field(None, description="extra JVM options for the local broker")
    services_pg_bin: Path | None = Field(None, description="directory of the Postgres binaries (initdb, postgres)")
    services_pg_os_user: str | None = Field(None, description="the account Postgres runs as when started by root")
    java_home: Path | None = Field(
        None, validation_alias="JAVA_HOME", description="the JDK for the local Kafka (unset: `java` on PATH)"
    )

    # the variable each field was read from, by :meth:`from_env`
    _read_from: dict[str, str] = PrivateAttr(default_factory=dict)

    @classmethod
    def settings_customise_sources(  # pydantic-settings' hook: its signature, most of it unused here
        cls,
        settings_cls: type[BaseSettings],  # noqa: ARG003
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,  # noqa: ARG003
        dotenv_settings: PydanticBaseSettingsSource,  # noqa: ARG003
        file_secret_settings: PydanticBaseSettingsSource,  # noqa: ARG003
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return (init_settings,)  # code gives values; only :meth:`from_env` reads an environment

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        """The settings in ``env`` (default: this process's environment). Raises
        :class:`SettingsError` naming every bad variable."""
        env = os.environ if env is None else env
        values = MappingSource(cls, env)()
        try:
            settings = cls(**values)
        except ValidationError as e:
            raise SettingsError(_explain(e, env)) from None
        settings._read_from.update({name: var for name in cls.model_fields if (var := _set_variable(name, env))})
        return settings

    @field_validator("projector", "summarizer", "summarizer_start", "log_level", mode="before")
    @classmethod
    def _case_insensitive(cls, value: object) -> object:
        return value.strip().lower() if isinstance(value, str) else value

    @field_validator("llm_base_url", mode="before")
    @classmethod
    def _blank_is_unset(cls, value: object) -> object:
        return (value.strip() or None) if isinstance(value, str) else value

    @field_validator("token_encodings")
    @classmethod
    def _known_encodings(cls, value: str) -> str:
        try:
            return ",".join(_counted_encodings(value))
        except ConfigurationError as e:
            raise ValueError(str(e)) from None

    @field_validator("master_key")
    @classmethod
    def _master_key_format(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None:
            try:
                LocalMasterKey.from_setting(value.get_secret_value())
            except ConfigurationError as e:
                raise ValueError(str(e).removeprefix("CONVLOG_MASTER_KEY: ")) from None
        return value

    @field_validator("api_tokens")
    @classmethod
    def _tokens_format(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None:
            parse_tokens(value.get_secret_value())
        return value

    @model_validator(mode="after")
    def _window_consistent(self) -> Settings:
        if self.window_keep_turns > self.window_max_turns:
            raise ValueError(
                f"window turns: need CONVLOG_WINDOW_KEEP_TURNS ({self.window_keep_turns}) <= "
                f"CONVLOG_WINDOW_MAX_TURNS ({self.window_max_turns})"
            )
        return self

    # -- what the composition root passes down

    @property
    def embedded_log_path(self) -> Path:
        return self.data_dir / "log" / f"{self.topic}.log"

    def window_policy(self) -> WindowPolicy:
        """The policy a new read-models version is made with (a version keeps its own)."""
        return WindowPolicy(max_turns=self.window_max_turns, keep_turns=self.window_keep_turns)

    def legacy_window_policy(self) -> WindowPolicy:
        """The policy versions made before they recorded theirs (migration 0006) were projected
        with: each turn count the operator set (environment or code), else the default then, 8 -> 6."""
        explicit = self.model_fields_set | self._read_from.keys()
        max_turns = self.window_max_turns if "window_max_turns" in explicit else LEGACY_MAX_TURNS
        keep_turns = self.window_keep_turns if "window_keep_turns" in explicit else LEGACY_KEEP_TURNS
        if keep_turns > max_turns:  # only one set, below the other's old default: not what ran before
            return self.window_policy()
        return WindowPolicy(max_turns=max_turns, keep_turns=keep_turns)

    def counted_encodings(self) -> tuple[str, ...]:
        """``CONVLOG_TOKEN_ENCODINGS``: what the projector counts (the others are counted when read)."""
        return _counted_encodings(self.token_encodings)

    def token_tenants(self) -> dict[str, str]:
        """``CONVLOG_API_TOKENS`` as {token: tenant}."""
        return parse_tokens(self.api_tokens.get_secret_value() if self.api_tokens else "")

    @property
    def keys_file_path(self) -> Path:
        """The embedded key records, beside the embedded log."""
        return self.data_dir / "log" / f"{self.topic}.keys"

    @property
    def master_key_path(self) -> Path:
        return self.data_dir / MASTER_KEY_FILE

    @property
    def keys_topic_name(self) -> str:
        return self.keys_topic or f"{self.topic}.keys"

    @property
    def retention_archive(self) -> Path:
        return self.retention_archive_dir or self.data_dir / "retention"

    def as_env(self) -> dict[str, str]:
        """Variables that give another process exactly these settings (not merely inherited
        ones): every ``CONVLOG_*`` setting, an unset one as the empty string."""
        named = {variable(name): name for name in type(self).model_fields}
        return {var: _raw(getattr(self, name)) for var, name in named.items() if var.startswith(PREFIX)}

    def subprocess_env(self) -> dict[str, str]:
        """This process's environment (``PATH``, ...) with :meth:`as_env` on top."""
        return {**os.environ, **self.as_env()}


def variables(name: str) -> tuple[str, ...]:
    """The environment variables field ``name`` is read from, the first one set winning."""
    alias = Settings.model_fields[name].validation_alias
    if isinstance(alias, AliasChoices):
        return tuple(str(choice) for choice in alias.choices)
    return (alias,) if isinstance(alias, str) else (PREFIX + name.upper(),)


def variable(name: str) -> str:
    return variables(name)[0]


def _set_variable(name: str, env: Mapping[str, str]) -> str | None:
    return next((var for var in variables(name) if env.get(var)), None)


def _secret(name: str) -> bool:
    return Settings.model_fields[name].annotation in (SecretStr, SecretStr | None)


def _explain(error: ValidationError, env: Mapping[str, str]) -> str:
    by_alias = {variable(name): name for name in Settings.model_fields}
    lines = []
    for problem in error.errors():
        loc = str(problem["loc"][0]) if problem["loc"] else ""
        name = by_alias.get(loc, loc)
        if name not in Settings.model_fields:  # a check across settings: its message names them
            lines.append(problem["msg"].removeprefix("Value error, "))
            continue
        var = _set_variable(name, env) or variable(name)
        shown = MASK if _secret(name) else repr(env.get(var, problem["input"]))
        expected = problem["msg"].removeprefix("Value error, ")
        lines.append(f"{var}={shown}: {expected[:1].lower()}{expected[1:]}")
    return "invalid settings: " + "; ".join(lines) if len(lines) > 1 else lines[0]


def _raw(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, SecretStr):
        return value.get_secret_value()
    return str(value)
