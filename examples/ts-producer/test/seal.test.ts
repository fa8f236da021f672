// The sealer against schemas/vectors/sealed.json: given each plain record, the test-only key and
// the record's fixed nonce, it writes the vector's sealed record byte for byte. The key and the
// nonces are public test values; a real seal draws a fresh random nonce. Then: what it seals
// opens only with its own associated data, and the key comes from the options or the key route.

import assert from "node:assert/strict";
import { createDecipheriv } from "node:crypto";
import { readFileSync } from "node:fs";
import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { test } from "node:test";
import { conversationKey, encode, eventType, fingerprint, newEventId, nowMicros, record, turn, type EventRecord } from "../src/events.js";
import { fetchKey, sealerFor } from "../src/keyroute.js";
import { associatedData, bodyOf, bodyTypes, Sealer } from "../src/seal.js";

const VECTORS = process.env.CONVLOG_VECTORS
  ? new URL(`file://${process.env.CONVLOG_VECTORS}/`)
  : new URL("../../../../schemas/vectors/", import.meta.url); // from dist/test/

interface SealedVectors {
  fingerprint: string;
  algorithm: string;
  test_only_key: { key_id: string; key_base64: string };
  records: {
    name: string; key: string; event_id: string; body_type: string; nonce_hex: string; plain_value_hex: string;
    plaintext_hex: string; associated_data_hex: string; ciphertext_hex: string; value_hex: string;
  }[];
}

const vectors = JSON.parse(readFileSync(new URL("sealed.json", VECTORS), "utf8")) as SealedVectors;
const KEY = Buffer.from(vectors.test_only_key.key_base64, "base64"); // TEST ONLY: a public key
const KEY_ID = vectors.test_only_key.key_id;
const hex = (h: string): Buffer => Buffer.from(h, "hex");
const decode = (value: Buffer): EventRecord => eventType.fromBuffer(value.subarray(10)) as EventRecord;

/** AES-256-GCM open: the last 16 bytes are the tag. Throws when authentication fails. */
function open(key: Buffer, nonce: Buffer, ciphertext: Buffer, aad: Buffer): Buffer {
  const decipher = createDecipheriv("aes-256-gcm", key, nonce, { authTagLength: 16 });
  decipher.setAAD(aad);
  decipher.setAuthTag(ciphertext.subarray(-16));
  return Buffer.concat([decipher.update(ciphertext.subarray(0, -16)), decipher.final()]);
}

test("the sealer writes schemas/vectors/sealed.json byte for byte", () => {
  assert.equal(fingerprint().toString("hex"), vectors.fingerprint);
  assert.equal(vectors.algorithm, "AES-256-GCM");
  assert.ok(vectors.records.length >= 3);
  const sealer = new Sealer(KEY_ID, KEY);
  for (const want of vectors.records) {
    sealer.nonce = () => hex(want.nonce_hex); // TEST ONLY: the vector's fixed nonce
    const sealed = sealer.seal(decode(hex(want.plain_value_hex)));
    assert.equal(encode(sealed).toString("hex"), want.value_hex, want.name);
    const [bodyType, fields] = bodyOf(sealed);
    const seal = fields.sealed as { key_id: string; nonce: Buffer; ciphertext: Buffer };
    assert.equal(bodyType, want.body_type);
    assert.equal(seal.ciphertext.toString("hex"), want.ciphertext_hex, want.name);
    const aad = associatedData(Buffer.from(want.key, "utf8"), want.event_id, want.body_type, KEY_ID);
    assert.equal(aad.toString("hex"), want.associated_data_hex, want.name);
  }
  // The first record's associated data, as docs/producers.md spells it.
  const first = vectors.records[0]!;
  assert.equal(
    hex(first.associated_data_hex).toString("utf8"),
    `convlog-sealed-v1\0acme:employee\\:42:oa\\\\overtime\0${first.event_id}\0ConversationStarted\0${KEY_ID}`,
  );
});

test("the vectors' ciphertexts open to their plaintexts, and fail with a flipped bit or other associated data", () => {
  for (const r of vectors.records) {
    const [nonce, ciphertext, aad] = [hex(r.nonce_hex), hex(r.ciphertext_hex), hex(r.associated_data_hex)];
    assert.equal(open(KEY, nonce, ciphertext, aad).toString("hex"), r.plaintext_hex, r.name);
    for (const at of [0, ciphertext.length - 1]) { // a bit of the ciphertext, a bit of the tag
      const flipped = Buffer.from(ciphertext);
      flipped[at]! ^= 0x01;
      assert.throws(() => open(KEY, nonce, flipped, aad), /authenticate/, `${r.name}: flipped byte ${at} opened`);
    }
    const key = Buffer.from(r.key, "utf8");
    const moved = [
      associatedData(key, `${r.event_id}-other`, r.body_type, KEY_ID), // another event
      associatedData(Buffer.from("acme:employee\\:42:another"), r.event_id, r.body_type, KEY_ID), // another conversation
      associatedData(key, r.event_id, r.body_type === "SummaryRecorded" ? "MessageAppended" : "SummaryRecorded", KEY_ID),
      associatedData(key, r.event_id, r.body_type, `ck_${"0".repeat(32)}`), // another key id
    ];
    for (const other of moved) {
      assert.throws(() => open(KEY, nonce, ciphertext, other), /authenticate/, `${r.name} opened moved`);
    }
  }
});

// What the example's turn says, in clear nowhere once sealed.
const TURN_TEXTS = [
  "Overtime request", "overtime request", "knowledge base", "Attendance", "oa-assistant", "public holiday",
  "Holiday", "EqQBCgIYAhIM", "RXJhc2VkIHJlYXNvbmluZw==", "channel",
];

test("the turn sealed carries no content in clear, a fresh nonce each, and opens only to itself", () => {
  const sealer = new Sealer(KEY_ID, KEY);
  const conversation = { tenant: "acme", user: "employee:42", id: "c-1" };
  const nonces = new Set<string>();
  const events = turn("ts-example", () => newEventId(), () => nowMicros());
  for (const event of events) {
    const plain = record(conversation, event);
    const value = encode(sealer.seal(plain));
    for (const text of TURN_TEXTS) {
      assert.ok(!value.includes(text), `${event.body.type}: ${text} in clear`);
    }
    const [bodyType, fields] = bodyOf(decode(value));
    const seal = fields.sealed as { key_id: string; nonce: Buffer; ciphertext: Buffer } | null;
    assert.ok(seal !== null, `${bodyType} not sealed`);
    assert.equal(seal.key_id, KEY_ID);
    assert.ok(!nonces.has(seal.nonce.toString("hex")), "a nonce repeated");
    nonces.add(seal.nonce.toString("hex"));

    const aad = associatedData(conversationKey(conversation), event.id, bodyType, KEY_ID);
    const plaintext = bodyTypes.get(bodyType)!.toBuffer({ ...bodyOf(plain)[1], sealed: null });
    assert.deepEqual(open(KEY, seal.nonce, seal.ciphertext, aad), plaintext); // the complete body
    const flipped = Buffer.from(seal.ciphertext);
    flipped[flipped.length >> 1]! ^= 0x80;
    assert.throws(() => open(KEY, seal.nonce, flipped, aad), /authenticate/);
    const elsewhere = associatedData(conversationKey({ ...conversation, tenant: "globex" }), event.id, bodyType, KEY_ID);
    assert.throws(() => open(KEY, seal.nonce, seal.ciphertext, elsewhere), /authenticate/);
    assert.throws(() => open(Buffer.alloc(32, 7), seal.nonce, seal.ciphertext, aad), /authenticate/); // another key
  }
  assert.equal(nonces.size, events.length);

  const erased = record(conversation, { id: "e", occurredAtMicros: nowMicros(), producer: "p", body: { type: "ConversationErased", fields: { reason: "user request" } } });
  assert.equal(sealer.seal(erased), erased, "an erase was sealed");
  assert.equal(Sealer.seals("ConversationErased"), false);
});

test("the sealer refuses a bad key, a bad key id, a bad nonce and a body sealed twice", () => {
  assert.throws(() => new Sealer(KEY_ID, Buffer.alloc(16)), /16 bytes, not 32/);
  assert.throws(() => new Sealer("key-1", KEY), /ck_ and 32 hex digits/);
  assert.throws(() => new Sealer(`ck_${"A".repeat(32)}`, KEY), /ck_ and 32 hex digits/);
  const sealer = new Sealer(KEY_ID, KEY);
  const plain = decode(hex(vectors.records[0]!.plain_value_hex));
  const sealed = sealer.seal(plain);
  assert.throws(() => sealer.seal(sealed), /sealed already/);
  sealer.nonce = () => Buffer.alloc(8);
  assert.throws(() => sealer.seal(plain), /nonce/);
});

/** A key route on a local port, as docs/producers.md specifies it, with one conversation's key. */
async function keyRoute(answer: (req: IncomingMessage) => [number, object]): Promise<{ url: string; calls: string[][]; close: () => void }> {
  const calls: string[][] = [];
  const server = createServer((req: IncomingMessage, res: ServerResponse) => {
    calls.push([req.method ?? "", req.url ?? "", req.headers.authorization ?? ""]);
    const [status, body] = answer(req);
    res.writeHead(status, { "Content-Type": "application/json" }).end(JSON.stringify(body));
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  return { url: `http://127.0.0.1:${port}/`, calls, close: () => server.close() };
}

test("the key route is asked with the token, the ids percent-encoded; a refused token is an error", async () => {
  const route = await keyRoute((req) =>
    req.headers.authorization === "Bearer t-acme"
      ? [200, { key_id: KEY_ID, key: vectors.test_only_key.key_base64, algorithm: "AES-256-GCM" }]
      : [401, { error: "unauthorized" }],
  );
  try {
    const conversation = { tenant: "acme", user: "employee:42", id: "oa\\sealed/1" };
    const sealer = await sealerFor(conversation, { keyUrl: route.url, token: "t-acme" });
    assert.equal(sealer?.keyId, KEY_ID);
    assert.deepEqual(route.calls, [["POST", "/v1/users/employee%3A42/conversations/oa%5Csealed%2F1/key", "Bearer t-acme"]]);
    await assert.rejects(fetchKey(conversation, route.url, "wrong"), /answered 401/);
  } finally {
    route.close();
  }
  const other = await keyRoute(() => [200, { key_id: KEY_ID, key: vectors.test_only_key.key_base64, algorithm: "AES-128-CBC" }]);
  try {
    await assert.rejects(fetchKey({ tenant: "a", user: "u", id: "c" }, other.url, "t"), /not AES-256-GCM/);
  } finally {
    other.close();
  }
});

test("a key given: both --key-id and --key, the key base64 of 32 bytes; none: plain records", async () => {
  const conversation = { tenant: "a", user: "u", id: "c" };
  assert.equal((await sealerFor(conversation, { keyId: KEY_ID, key: vectors.test_only_key.key_base64 }))?.keyId, KEY_ID);
  await assert.rejects(sealerFor(conversation, { keyId: KEY_ID }), /go together/);
  await assert.rejects(sealerFor(conversation, { key: vectors.test_only_key.key_base64 }), /go together/);
  await assert.rejects(sealerFor(conversation, { keyId: KEY_ID, key: "not base64!" }), /not base64/);
  await assert.rejects(sealerFor(conversation, { keyId: KEY_ID, key: Buffer.alloc(16).toString("base64") }), /16 bytes/);
  assert.equal(await sealerFor(conversation, {}), undefined);
});
