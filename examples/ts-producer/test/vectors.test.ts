// The example against convlog's golden vectors (schemas/vectors/, written by convlog's Python
// producer): the same bytes for the same events, the same partition for every key; and the
// traps of the Node ecosystem, each shown to break the contract.

import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { test } from "node:test";
import { crc32 } from "node:zlib";
import { Partitioners, type PartitionMetadata } from "kafkajs";
import {
  canonicalForm, conversationKey, encode, EVENT_TYPE_HEADER, eventType, fingerprint, rabin, record, turn,
} from "../src/events.js";
import { ACKS_ALL, COMPRESSION, partitioner, producerConfig } from "../src/producer.js";

const VECTORS = process.env.CONVLOG_VECTORS
  ? new URL(`file://${process.env.CONVLOG_VECTORS}/`)
  : new URL("../../../../schemas/vectors/", import.meta.url); // from dist/test/

interface EventVectors {
  fingerprint: string;
  schema_version: number;
  turn: {
    tenant_id: string; user_id: string; conversation_id: string; event_id_prefix: string;
    first_occurred_at_micros: number; occurred_at_step_micros: number; producer: string;
  };
  events: EventVector[]; // the turn
  more_events: EventVector[]; // records of every other shape
}

interface EventVector {
  name: string; key: string; key_hex: string; headers: Record<string, string>; record: Record<string, unknown>; value_hex: string;
}

interface KeyVectors {
  keys: { tenant_id: string; user_id: string; conversation_id: string; key: string; key_hex: string; murmur2: number; partitions: Record<string, number> }[];
}

const load = <T>(name: string): T => JSON.parse(readFileSync(new URL(name, VECTORS), "utf8")) as T;
const events = load<EventVectors>("events.json");
const keys = load<KeyVectors>("keys.json");

test("the turn encodes to the vectors' bytes", () => {
  const t = events.turn;
  const conversation = { tenant: t.tenant_id, user: t.user_id, id: t.conversation_id };
  const key = conversationKey(conversation);
  const mine = turn(t.producer, (i) => `${t.event_id_prefix}-${i + 1}`, (i) => t.first_occurred_at_micros + i * t.occurred_at_step_micros);
  assert.equal(mine.length, events.events.length);
  mine.forEach((event, i) => {
    const want = events.events[i]!;
    assert.equal(key.toString("hex"), want.key_hex, want.name);
    assert.equal(key.toString("utf8"), want.key);
    assert.deepEqual({ [EVENT_TYPE_HEADER]: event.body.type }, want.headers);
    assert.equal(encode(record(conversation, event)).toString("hex"), want.value_hex, want.name);
  });
});

test("every vector's record JSON encodes to its bytes, and its bytes decode to it", () => {
  assert.ok(events.more_events.length > 0);
  for (const want of [...events.events, ...events.more_events]) {
    assert.equal(encode(want.record).toString("hex"), want.value_hex, want.name);
    const decoded = eventType.fromBuffer(Buffer.from(want.value_hex, "hex").subarray(10));
    assert.deepEqual(JSON.parse(JSON.stringify(decoded)), want.record, want.name);
  }
});

test("the header is C3 01 and the little-endian CRC-64-AVRO fingerprint", () => {
  assert.equal(fingerprint().toString("hex"), events.fingerprint);
  for (const want of events.events) {
    assert.equal(want.value_hex.slice(0, 4), "c301", `${want.name}: never Confluent's 00 + schema id framing`);
  }
  // CRC-64-AVRO of the empty input is the algorithm's constant.
  assert.equal(rabin(new Uint8Array()), 0xc15d213aa4d7a795n);
  assert.ok(canonicalForm().startsWith('{"name":"convlog.events.Event","type":"record","fields":'));
});

test("trap: the big-endian fingerprint (Java's Long.toHexString order) is not the wire form", () => {
  const bigEndian = Buffer.alloc(8);
  bigEndian.writeBigUInt64BE(rabin(Buffer.from(canonicalForm(), "utf8")));
  assert.notEqual(bigEndian.toString("hex"), events.fingerprint);
  assert.equal(Buffer.from(bigEndian).reverse().toString("hex"), events.fingerprint);
});

function partitionOf(create: typeof partitioner, key: Buffer, n: number): number {
  const partitionMetadata: PartitionMetadata[] = Array.from({ length: n }, (_, p) => ({
    partitionId: p, leader: 0, partitionErrorCode: 0, replicas: [0], isr: [0],
  }));
  return create()({ topic: "convlog.events", partitionMetadata, message: { key, value: null } });
}

test("the partitioner puts every key on the vectors' partition", () => {
  assert.equal(producerConfig().createPartitioner, partitioner);
  for (const k of keys.keys) {
    const key = conversationKey({ tenant: k.tenant_id, user: k.user_id, id: k.conversation_id });
    assert.equal(key.toString("hex"), k.key_hex);
    for (const [count, want] of Object.entries(k.partitions)) {
      assert.equal(partitionOf(partitioner, key, Number(count)), want, `${k.key} of ${count} partitions`);
    }
  }
});

test("trap: kafkajs's LegacyPartitioner and librdkafka's CRC32 put keys on other partitions", () => {
  const crc32Partitioner = () => ({ partitionMetadata, message }: { partitionMetadata: PartitionMetadata[]; message: { key?: Buffer | string | null } }) =>
    crc32(message.key as Buffer) % partitionMetadata.length; // librdkafka's consistent_random, its default
  const wrong = { LegacyPartitioner: Partitioners.LegacyPartitioner, "librdkafka consistent (CRC32)": crc32Partitioner };
  for (const [name, create] of Object.entries(wrong)) {
    const moved = keys.keys.filter((k) => partitionOf(create as typeof partitioner, Buffer.from(k.key_hex, "hex"), 12) !== k.partitions["12"]);
    assert.ok(moved.length > 0, `${name} put every key where murmur2 does`);
  }
});

test("the producer has the safe settings: idempotent, acks=all, compression on", () => {
  const config = producerConfig();
  assert.equal(config.idempotent, true);
  assert.equal(config.maxInFlightRequests, 1);
  assert.equal(config.allowAutoTopicCreation, false);
  assert.equal(ACKS_ALL, -1);
  assert.notEqual(COMPRESSION, 0); // CompressionTypes.None
});

test("keys escape and refuse what convlog refuses", () => {
  assert.equal(conversationKey({ tenant: "acme", user: "employee:42", id: "oa\\overtime" }).toString(), "acme:employee\\:42:oa\\\\overtime");
  for (const bad of [{ tenant: "", user: "u", id: "c" }, { tenant: "t", user: "  ", id: "c" }, { tenant: "t", user: "u", id: "c\n" }, { tenant: "t", user: "u", id: "x".repeat(257) }]) {
    assert.throws(() => conversationKey(bad));
  }
  assert.doesNotThrow(() => conversationKey({ tenant: "t", user: "u", id: "😀".repeat(256) })); // code points, not UTF-16 units
});
