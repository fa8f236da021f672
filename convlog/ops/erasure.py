"""``convlog erase``: an operator erases a user, or one conversation of a user (docs/erasure.md).

The same erase as the API's (:meth:`~events.producer.ConversationProducer.erase_user`,
:meth:`~events.producer.ConversationProducer.erase_conversation`): keys destroyed first, then
one ``ConversationErased`` per conversation naming the subject and who asked — the audit
record. First a survey of what is known of the subject: its conversations (the read models'
and the key store's), its live keys, whether it is erased already (nothing is done then), and
how many of its records are plain (a NULL ``key_id`` in the read models: written before
sealing, or by a producer that does not seal) — the log keeps those readable, and only a topic
rewrite removes them.

The log is opened for writing before anything else: on the embedded log a running ``convlog
serve`` holds it, and the erase is refused before a key is destroyed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from prometheus_client import CollectorRegistry, write_to_textfile
from prometheus_client.parser import text_string_to_metric_families

from convlog.resources import live_read_models, opened_keys
from convlog.settings import Settings
from convlog.wiring import make_producer, open_event_log
from events.appending import Appended
from events.errors import LogLockedError
from events.keys import ConversationKey
from events.producer import ConversationProducer
from events.sealing.keys import UserSubject
from events.sealing.ports import KeyStore
from pgstore.pool import PgPool, pg_errors
from pgstore.subjects import known_conversations
from query_api.metrics import ErasureMetrics

PLAIN_RECORDS_DOC = "docs/erasure.md#plain-records"


@dataclass(frozen=True, slots=True)
class Subject:
    """A user of a tenant, or one conversation of theirs."""

    tenant_id: str
    user_id: str
    conversation_id: str | None = None

    def __post_init__(self) -> None:
        self.user()  # the ids a record key refuses are refused here (InvalidKeyError)
        self.conversation()

    @property
    def kind(self) -> str:
        return "user" if self.conversation_id is None else "conversation"

    def user(self) -> UserSubject:
        return UserSubject(self.tenant_id, self.user_id)

    def conversation(self) -> ConversationKey | None:
        if self.conversation_id is None:
            return None
        return ConversationKey(self.tenant_id, self.user_id, self.conversation_id)

    def __str__(self) -> str:
        key = self.conversation()
        return f"conversation {key}" if key else f"user {self.user_id!r} of tenant {self.tenant_id!r}"


@dataclass(frozen=True, slots=True)
class Survey:
    """What is known of the subject before erasing it."""

    subject: Subject
    in_read_models: tuple[ConversationKey, ...]
    conversations: tuple[ConversationKey, ...]  # every one the erase covers: the read models' and the keys'
    live_keys: int
    erased_in_read_models: bool  # every conversation the read models hold is erased
    plain_messages: int
    plain_summaries: int

    @property
    def known(self) -> bool:
        return bool(self.conversations) or self.live_keys > 0

    @property
    def already(self) -> bool:
        """Erased before: no key left to destroy and nothing left in the read models."""
        return self.known and self.live_keys == 0 and self.erased_in_read_models

    @property
    def plain_records(self) -> int:
        return self.plain_messages + self.plain_summaries

    def plan(self) -> list[str]:
        names = ", ".join(c.conversation_id for c in self.conversations)
        lines = [
            f"erase {self.subject}",
            f"  conversations: {len(self.conversations)}{' (' + names + ')' if names else ''}",
            f"  keys to destroy: {self.live_keys}",
        ]
        if self.plain_records:
            lines.append(f"  plain records: {self.plain_records} (cannot be shredded: see {PLAIN_RECORDS_DOC})")
        return lines


@dataclass(frozen=True, slots=True)
class ErasureReport:
    survey: Survey
    erased: tuple[tuple[ConversationKey, Appended], ...]  # the erase events appended
    destroyed_key_ids: tuple[str, ...]
    already: bool

    def lines(self) -> list[str]:
        survey = self.survey
        if self.already:
            lines = [f"already erased: {survey.subject} (no key left to destroy, read models erased); nothing done"]
        else:
            lines = [
                f"erased {survey.subject}: {len(self.erased)} conversation(s), "
                f"{len(self.destroyed_key_ids)} key(s) destroyed"
            ]
            lines += [f"  {key.conversation_id}  erase event p{a.partition}@{a.offset}" for key, a in self.erased]
        if survey.plain_records:
            lines.append(
                f"{survey.plain_records} plain record(s) of this subject ({survey.plain_messages} message(s), "
                f"{survey.plain_summaries} summary(ies)) were written unsealed: the read models no longer serve "
                "them, but the log keeps them readable and no key destruction can shred them. To remove them, "
                f"rewrite the topic ({PLAIN_RECORDS_DOC})."
            )
        return lines


async def survey(pool: PgPool, schema: str, keys: KeyStore | None, subject: Subject) -> Survey:
    with pg_errors(f"read the read models of {subject}"):
        rows = await known_conversations(pool, schema, subject.tenant_id, subject.user_id, subject.conversation_id)
    user, one = subject.user(), subject.conversation()
    in_models = tuple(ConversationKey(user.tenant_id, user.user_id, r.conversation_id) for r in rows)
    infos = [i for i in (keys.infos() if keys else ()) if i.user == user and (one is None or i.conversation == one)]
    keyed = {i.conversation for i in infos if i.conversation is not None}
    return Survey(
        subject=subject,
        in_read_models=in_models,
        conversations=tuple(sorted({*in_models, *keyed}, key=str)),
        live_keys=sum(1 for i in infos if i.destroyed_at is None),
        erased_in_read_models=all(r.erased for r in rows),
        plain_messages=sum(r.plain_messages for r in rows),
        plain_summaries=sum(r.plain_summaries for r in rows),
    )


async def erase_surveyed(
    producer: ConversationProducer,
    found: Survey,
    *,
    reason: str,
    requested_by: str,
    metrics: ErasureMetrics | None = None,
) -> ErasureReport:
    """Erase what ``found`` surveyed; nothing when it was erased already (a no-op answer)."""
    if found.already:
        return ErasureReport(found, (), (), already=True)
    one = found.subject.conversation()
    if one is not None:
        done = await producer.erase_conversation(one, reason=reason, requested_by=requested_by)
        report = ErasureReport(found, ((one, done.appended),), done.destroyed_key_ids, done.already)
    else:
        user = await producer.erase_user(
            found.subject.user(), conversations=found.in_read_models, reason=reason, requested_by=requested_by
        )
        report = ErasureReport(found, user.erased, user.destroyed_key_ids, user.already)
    if metrics is not None:
        metrics.erased(found.subject.kind, destroyed_keys=len(report.destroyed_key_ids), already=report.already)
    return report


async def run_erase(
    settings: Settings,
    subject: Subject,
    *,
    reason: str,
    requested_by: str,
    confirm: Callable[[Survey], bool],
    metrics: ErasureMetrics | None = None,
) -> tuple[Survey, ErasureReport | None]:
    """Survey the subject, ask ``confirm`` (unless unknown or erased already), erase. The
    report is None when the subject is unknown or ``confirm`` said no."""
    try:
        event_log = await open_event_log(settings)  # first: before a key is destroyed
    except LogLockedError as e:
        raise LogLockedError(
            f"{e}: `convlog erase` appends the erase events, and the embedded log has one writer — "
            "stop `convlog serve` first, or erase through its API (DELETE /v1/users/{user_id}, "
            "DELETE /v1/users/{user_id}/conversations/{conversation_id})"
        ) from e
    try:
        async with live_read_models(settings) as handle, opened_keys(settings) as keys:
            found = await survey(handle.pool, handle.schema, keys, subject)
            if not found.known or (not found.already and not confirm(found)):
                return found, None
            producer = make_producer(event_log, settings, producer="convlog-erase", keys=keys)
            report = await erase_surveyed(producer, found, reason=reason, requested_by=requested_by, metrics=metrics)
            return found, report
    finally:
        await event_log.close()


def textfile_metrics(path: Path) -> tuple[CollectorRegistry, ErasureMetrics]:
    """The erasure counters carried on from ``path`` (a Prometheus text file, for node_exporter's
    textfile collector: a one-shot command has no endpoint to scrape), 0 when it is missing."""
    registry = CollectorRegistry()
    metrics = ErasureMetrics(registry)
    erasures: dict[str, float] = {"user": 0.0, "conversation": 0.0}
    keys = 0.0
    if path.exists():
        for family in text_string_to_metric_families(path.read_text(encoding="utf-8")):
            for sample in family.samples:
                if sample.name == "convlog_erasures_total" and sample.labels.get("subject") in erasures:
                    erasures[sample.labels["subject"]] += sample.value
                elif sample.name == "convlog_keys_destroyed_total":
                    keys += sample.value
    for subject, count in erasures.items():
        metrics.add(subject, count, 0.0)
    metrics.add("user", 0.0, keys)
    return registry, metrics


def write_textfile_metrics(path: Path, registry: CollectorRegistry) -> None:
    """Written to a temporary file and renamed over ``path``, as the textfile collector asks."""
    write_to_textfile(str(path), registry)
