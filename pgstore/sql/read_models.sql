-- The read models of one projection version, created in their own schema ({schema}), so a
-- rebuild can run beside the live version (blue/green). Every column is derived from the
-- events alone, except where marked "operational": a rebuild reproduces the rest exactly.

CREATE SCHEMA {schema};

-- Next offset to apply per partition, written in the same transaction as the rows.
CREATE TABLE {schema}.positions (
    partition   integer PRIMARY KEY,
    next_offset bigint  NOT NULL CHECK (next_offset >= 0)
);

CREATE TABLE {schema}.conversations (
    conversation_key    text PRIMARY KEY,  -- tenant:user:conversation, escaped (events/keys.py)
    tenant_id           text        NOT NULL,
    user_id             text        NOT NULL,
    conversation_id     text        NOT NULL,
    title               text,
    metadata            jsonb       NOT NULL,
    started_at          timestamptz NOT NULL,
    last_activity_at    timestamptz,           -- last user message: lists sort by it (seed 000)
    last_event_at       timestamptz NOT NULL,
    message_count       integer     NOT NULL,
    turn_count          integer     NOT NULL,
    next_seq            bigint      NOT NULL,
    epoch               integer     NOT NULL,  -- bumps on clear and erase
    clear_count         integer     NOT NULL,
    erased_at           timestamptz,
    open_tool_calls     text[]      NOT NULL,
    answered_tool_calls text[]      NOT NULL,
    last_partition      integer     NOT NULL,
    last_offset         bigint      NOT NULL,
    first_offset        bigint      NOT NULL,  -- reading the conversation from the log starts here
    -- What the fold decided about the context's range (projectors/context_range.py; migration
    -- 0008 adds these, last, to versions made before): readers read them, never a rule.
    summary_seq         bigint,                -- the current summary (NULL: none)
    summary_covers_seq  bigint,                -- the seq of the message it covers through
    summary_covers_turn integer,               -- and that message's turn
    turns_before_epoch  integer     NOT NULL,  -- turn_count when the current epoch began
    redacted_questions  bigint[]    NOT NULL,  -- the current epoch's redacted user messages
    context_start       bigint      NOT NULL,  -- a context's non-system messages start here
    usable_turns        integer     NOT NULL,  -- the usable turns from there on
    sealed              bytea,                 -- title and metadata, sealed (migration 0009)
    key_id              text
);
CREATE INDEX conversations_by_activity
    ON {schema}.conversations (tenant_id, user_id, last_activity_at DESC NULLS LAST, conversation_id);

-- Where the raw history window starts (projectors/window.py).
CREATE TABLE {schema}.windows (
    conversation_key text PRIMARY KEY,
    epoch            integer  NOT NULL,
    start_seq        bigint,
    turn_starts      bigint[] NOT NULL
);

-- Every message in log order: the audit source. content and tool_calls are json, not jsonb: json
-- keeps the text written (key order included), so the live context serves the bytes as_of
-- rebuilds from the log and the producer sent (jsonb would serve a text part's "text" key
-- before its "type", sorting keys). Versions made before are jsonb: they keep working and serving jsonb's
-- order; a rebuild makes the json form (projectors/versions.py compares the two forms by value).
CREATE TABLE {schema}.transcript (
    conversation_key        text        NOT NULL,
    seq                     bigint      NOT NULL,
    partition               integer     NOT NULL,
    "offset"                bigint      NOT NULL,
    event_id                text        NOT NULL,
    message_id              text        NOT NULL,
    role                    text        NOT NULL,
    content                 json,
    name                    text,
    tool_calls              json,
    tool_call_id            text,
    reasoning_content       text,
    thinking_duration_ms    bigint,
    finish_reason           text,
    model                   text,
    usage                   jsonb,
    metadata                jsonb       NOT NULL,
    occurred_at             timestamptz NOT NULL,
    epoch                   integer     NOT NULL,
    turn                    integer     NOT NULL,
    flag                    text,                  -- kept for audit, never served
    image_count             integer     NOT NULL,
    -- content text + tool calls, tiktoken; NULL in an encoding CONVLOG_TOKEN_ENCODINGS did not
    -- name when the row was projected (a context counts it when read: projectors/tokens/at_read.py)
    tokens_o200k            integer,
    tokens_cl100k           integer,
    reasoning_tokens_o200k  integer,
    reasoning_tokens_cl100k integer,
    redacted_at             timestamptz,
    redaction_reason        text,
    erased_at               timestamptz,
    -- Schema v4 (events/blocks.py), last: migration 0004 adds them to versions made before, and
    -- a rebuild must lay its rows out alike (verify compares rows as text). blocks: the lossless
    -- content of a message appended in a native format (events.blocks.blocks_to_json, compact;
    -- NULL for a Chat Completions message — most rows — whose content is content/tool_calls).
    blocks                  json,
    provider                text,
    api                     text,
    is_error                boolean,
    -- Issue 25 (migration 0009 adds them, last, to versions made before): a row projected from a
    -- sealed record holds its content columns NULL and their values in `sealed`, under the
    -- conversation key `key_id` (projectors/sealed_rows.py); both NULL for a plain record's row.
    sealed                  bytea,
    key_id                  text,
    PRIMARY KEY (conversation_key, seq)
);
CREATE INDEX transcript_by_message_id ON {schema}.transcript (conversation_key, message_id);
-- System prompts are served first whatever the window: found without scanning the conversation.
CREATE INDEX transcript_system_messages ON {schema}.transcript (conversation_key, seq) WHERE role = 'system';
-- Redacted messages: counted without scanning a long history (a redacted question is no turn).
CREATE INDEX transcript_redacted ON {schema}.transcript (conversation_key, seq) WHERE redacted_at IS NOT NULL;

CREATE TABLE {schema}.summaries (
    conversation_key          text        NOT NULL,
    seq                       bigint      NOT NULL,
    partition                 integer     NOT NULL,
    "offset"                  bigint      NOT NULL,
    event_id                  text        NOT NULL,
    summary_id                text        NOT NULL,
    epoch                     integer     NOT NULL,
    text                      text,                 -- NULL once erased
    covers_through_message_id text        NOT NULL,
    model                     text        NOT NULL,
    prompt_version            text        NOT NULL,
    input_tokens              bigint,
    output_tokens             bigint,
    summary_tokens            bigint,
    occurred_at               timestamptz NOT NULL,
    erased_at                 timestamptz,
    sealed                    bytea,           -- the text, sealed (migration 0009)
    key_id                    text,
    PRIMARY KEY (conversation_key, seq)
);

-- Idempotency: an event id applied once per conversation is never applied again.
CREATE TABLE {schema}.event_ids (
    conversation_key text NOT NULL,
    event_id         text NOT NULL,
    PRIMARY KEY (conversation_key, event_id)
);

-- Operational: records that could not be decoded or applied, and what was done about them.
CREATE TABLE {schema}.dead_letters (
    id               bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    partition        integer     NOT NULL,
    "offset"         bigint      NOT NULL,
    conversation_key text,
    record_key       bytea       NOT NULL,
    record_value     bytea       NOT NULL,
    headers          jsonb       NOT NULL,
    record_timestamp timestamptz NOT NULL,
    error_code       text        NOT NULL,
    error            text        NOT NULL,
    status           text        NOT NULL DEFAULT 'parked'
                     CHECK (status IN ('parked', 'released', 'skipped')),
    resolution       text,
    created_at       timestamptz NOT NULL DEFAULT now(),
    resolved_at      timestamptz,
    UNIQUE (partition, "offset")
);

-- Operational: conversations waiting for an operator, and the records held behind them.
CREATE TABLE {schema}.parked (
    conversation_key text PRIMARY KEY,
    dead_letter_id   bigint      NOT NULL REFERENCES {schema}.dead_letters (id),
    parked_at        timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE {schema}.held_records (
    partition        integer     NOT NULL,
    "offset"         bigint      NOT NULL,
    conversation_key text        NOT NULL,
    record_key       bytea       NOT NULL,
    record_value     bytea       NOT NULL,
    headers          jsonb       NOT NULL,
    record_timestamp timestamptz NOT NULL,
    PRIMARY KEY (partition, "offset")
);
CREATE INDEX held_by_conversation ON {schema}.held_records (conversation_key, partition, "offset");
