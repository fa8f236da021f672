// convlog's events as this producer writes them: the key, the Avro record and its Avro
// single-object encoding, and the turn the example appends. Nothing here is from convlog:
// only the schema file, copied unchanged.

import { randomUUID } from "node:crypto";
import { readFileSync } from "node:fs";
import avro from "avsc";

/** The schema this producer writes: schemas/event.v5.avsc of the convlog repository, unchanged
 * (a changed name, field, type or symbol is another fingerprint: dead-lettered as unknown_schema). */
export const SCHEMA_FILE = new URL("../../event.v5.avsc", import.meta.url);
const NS = "convlog.events.";
/** Optional; if sent, the body's short record name (MessageAppended, not convlog.events.MessageAppended). */
export const EVENT_TYPE_HEADER = "convlog.event_type";
const MAX_KEY_PART_LENGTH = 256; // code points, as convlog counts them

/** avsc's default wrapUnions ("auto") writes a union of several records (the body, a block, a
 * content part) as { "convlog.events.Name": {...} } and a ["null", T] union as the value or null.
 * timestamp-micros is a long (no logical type registered): microseconds, a safe JS integer until 2255. */
export const eventType = avro.Type.forSchema(JSON.parse(readFileSync(SCHEMA_FILE, "utf8")));

// ---- the single-object header: C3 01 + CRC-64-AVRO (Rabin) of the canonical form, little-endian.
// avsc has no CRC-64-AVRO fingerprint (its issue #327; it offers md5/sha256 only): written here.

const EMPTY = 0xc15d213aa4d7a795n;
const MASK = 0xffffffffffffffffn;
const TABLE: bigint[] = Array.from({ length: 256 }, (_, i) => {
  let fp = BigInt(i);
  for (let j = 0; j < 8; j++) {
    fp = (fp >> 1n) ^ (fp & 1n ? EMPTY : 0n);
  }
  return fp;
});

/** CRC-64-AVRO of some bytes, as an unsigned 64-bit integer. */
export function rabin(data: Uint8Array): bigint {
  let fp = EMPTY;
  for (const b of data) {
    fp = ((fp >> 8n) ^ TABLE[Number((fp ^ BigInt(b)) & 0xffn)]!) & MASK;
  }
  return fp;
}

/** The schema's Parsing Canonical Form (avsc.s schema() without attributes is it). */
export function canonicalForm(type: avro.Type = eventType): string {
  return JSON.stringify(type.schema());
}

/** The 8 bytes that follow C3 01: the fingerprint little-endian (not Java's Long.toHexString order). */
export function fingerprint(type: avro.Type = eventType): Buffer {
  const out = Buffer.alloc(8);
  out.writeBigUInt64LE(rabin(Buffer.from(canonicalForm(type), "utf8")));
  return out;
}

const HEADER = Buffer.concat([Buffer.from([0xc3, 0x01]), fingerprint()]);

/** Avro single-object encoding: the 10-byte header, then the Avro binary body. Never Confluent's
 * 00 + schema id framing (what @kafkajs/confluent-schema-registry writes): convlog refuses it. */
export function encode(record: EventRecord): Buffer {
  return Buffer.concat([HEADER, eventType.toBuffer(record)]);
}

// ---- the key

/** Who a conversation belongs to. The envelope carries the ids as they are; the key escapes them. */
export interface Conversation {
  tenant: string;
  user: string;
  id: string;
}

/** tenant:user:conversation in UTF-8; inside an id "\" is written "\\" and ":" is written "\:". */
export function conversationKey(c: Conversation): Buffer {
  const parts = [["tenant", c.tenant], ["user", c.user], ["conversation", c.id]].map(([what, id]) => {
    checkId(what!, id!);
    return id!.replaceAll("\\", "\\\\").replaceAll(":", "\\:");
  });
  return Buffer.from(parts.join(":"), "utf8");
}

function checkId(what: string, id: string): void {
  const length = [...id].length;
  // eslint-disable-next-line no-control-regex
  if (id.trim() === "" || length > MAX_KEY_PART_LENGTH || /[\u0000-\u001f\u007f]/.test(id)) {
    throw new Error(`${what} id must be 1-${MAX_KEY_PART_LENGTH} characters, not only whitespace, without control characters`);
  }
}

// ---- events

export type Fields = Record<string, unknown>;

/** One event's body: its record's short name and its fields (those left out take the schema's
 * defaults: null, [] or {}). */
export interface Body {
  type: string;
  fields: Fields;
}

export interface Event {
  id: string; // the idempotency key: reuse it on a retry
  occurredAtMicros: number; // microseconds since the epoch, UTC
  producer: string;
  body: Body;
}

export type EventRecord = Fields;

/** The event's Avro record. */
export function record(c: Conversation, e: Event): EventRecord {
  return {
    event_id: e.id,
    tenant_id: c.tenant,
    user_id: c.user,
    conversation_id: c.id,
    occurred_at: e.occurredAtMicros,
    producer: e.producer,
    body: { [NS + e.body.type]: e.body.fields },
  };
}

const branch = (name: string, fields: Fields): Fields => ({ [NS + name]: fields });
const message = (role: string, fields: Fields): Body => ({
  type: "MessageAppended",
  fields: { message_id: "", role, ...fields }, // the message id is the event id: turn() sets it
});

/** The turn this example appends — schemas/vectors/events.json, event for event: the start, a
 * question, a tool call and its result, the answer, a second question and a native answer
 * (Anthropic format) with reasoning blocks. */
export function turnBodies(): Body[] {
  const model = "gpt-4o";
  return [
    { type: "ConversationStarted", fields: { title: "Overtime request", metadata: { channel: "web" } } },
    message("user", { content: "How do I file an overtime request in the OA system?" }),
    message("assistant", {
      tool_calls: [{ id: "call_1", name: "search_kb", arguments: '{"q": "overtime request"}' }],
      reasoning_content: "The knowledge base has the procedure.",
      model,
      usage: { prompt_tokens: 120, completion_tokens: 18 },
      finish_reason: "tool_calls",
    }),
    message("tool", { content: '{"hits": 3, "top": "OA > Attendance > Overtime"}', tool_call_id: "call_1" }),
    message("assistant", {
      content: "Open OA, then Attendance > Overtime, and submit the form.",
      model,
      usage: { prompt_tokens: 160, completion_tokens: 24, cached_tokens: 64 },
      finish_reason: "stop",
      metadata: { app: "oa-assistant" },
    }),
    message("user", { content: "And on a public holiday?" }),
    // A native message: only the blocks (content null, tool_calls [], reasoning_content null);
    // convlog derives the Chat Completions view from them.
    message("assistant", {
      blocks: [
        branch("ReasoningBlock", { text: "Holiday overtime has a form of its own.", signature: "EqQBCgIYAhIM" }),
        branch("ReasoningBlock", { redacted_data: "RXJhc2VkIHJlYXNvbmluZw==" }),
        branch("TextBlock", { text: "Use Attendance > Holiday overtime instead: it is paid double." }),
      ],
      provider: "anthropic",
      api: "anthropic",
      model: "claude-sonnet-4-5",
      usage: { prompt_tokens: 410, completion_tokens: 52, cached_tokens: 256, cache_write_tokens: 90 },
      finish_reason: "stop",
    }),
  ];
}

/** Gives each body an event id (a message's id is its event's) and a time; i counts from 0. */
export function turn(producer: string, newId: (i: number) => string, atMicros: (i: number) => number): Event[] {
  return turnBodies().map((body, i) => {
    const id = newId(i);
    if ("message_id" in body.fields) {
      body.fields.message_id = id;
    }
    return { id, occurredAtMicros: atMicros(i), producer, body };
  });
}

export const newEventId = (): string => randomUUID();

export function nowMicros(): number {
  return Date.now() * 1000;
}
