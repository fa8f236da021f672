#!/usr/bin/env node
// Appends one conversation turn to convlog's topic the way docs/producers.md says, with kafkajs
// and avsc only.
//
//   node dist/src/main.js --bootstrap HOST:PORT --topic T --tenant A --user U --conversation C
//        [--producer NAME] [--event-id-prefix P] [--occurred-at MICROS]
//        [--key-id ck_... --key BASE64 | --key-url API_BASE --token TOKEN]
//   node dist/src/main.js --print-fingerprint
//
// With a data key (--key-id and --key, or CONVLOG_KEY_ID and CONVLOG_KEY; or fetched from
// convlog's key route with --key-url and --token, or CONVLOG_API_URL and CONVLOG_TOKEN) it seals
// every body that carries content (docs/producers.md, Sealed records): erasable records.
// Without one it writes plain records, which an erase cannot shred.
//
// Prints one JSON line per acknowledged event: its type, event id, key, partition and offset
// (and sealed_by, the key id, when sealed).

import { parseArgs } from "node:util";
import { conversationKey, encode, EVENT_TYPE_HEADER, fingerprint, newEventId, nowMicros, record, turn } from "./events.js";
import { sealerFor } from "./keyroute.js";
import { ACKS_ALL, COMPRESSION, connectProducer } from "./producer.js";
import { Sealer } from "./seal.js";

async function main(): Promise<void> {
  const { values: o } = parseArgs({
    options: {
      bootstrap: { type: "string" },
      topic: { type: "string", default: "convlog.events" },
      tenant: { type: "string" },
      user: { type: "string" },
      conversation: { type: "string" },
      producer: { type: "string", default: "ts-example" },
      "event-id-prefix": { type: "string" },
      "occurred-at": { type: "string" },
      "key-id": { type: "string" },
      key: { type: "string" },
      "key-url": { type: "string" },
      token: { type: "string" },
      "print-fingerprint": { type: "boolean", default: false },
    },
  });
  if (o["print-fingerprint"]) {
    console.log(fingerprint().toString("hex"));
    return;
  }
  if (!o.bootstrap || !o.tenant || !o.user || !o.conversation) {
    throw new Error("--bootstrap, --tenant, --user and --conversation are required");
  }
  const conversation = { tenant: o.tenant, user: o.user, id: o.conversation };
  const key = conversationKey(conversation);
  const prefix = o["event-id-prefix"];
  const first = o["occurred-at"] === undefined ? undefined : Number(o["occurred-at"]);
  const events = turn(
    o.producer!,
    prefix === undefined ? () => newEventId() : (i) => `${prefix}-${i + 1}`,
    first === undefined ? () => nowMicros() : (i) => first + i * 1_000_000,
  );
  // Before connecting: a refused token or a bad key writes nothing.
  const env = process.env;
  const sealer = await sealerFor(conversation, {
    keyId: o["key-id"] ?? env.CONVLOG_KEY_ID,
    key: o.key ?? env.CONVLOG_KEY,
    keyUrl: o["key-url"] ?? env.CONVLOG_API_URL,
    token: o.token ?? env.CONVLOG_TOKEN,
  });
  const values = events.map((event) => {
    const plain = record(conversation, event);
    return encode(sealer === undefined ? plain : sealer.seal(plain));
  });

  const producer = connectProducer(o.bootstrap.split(","));
  await producer.connect();
  try {
    for (const [i, event] of events.entries()) {
      // One send per event, awaited: one key, one partition, in order; a retry of the same
      // event (same event id) after a timeout is kept once by convlog.
      const [meta] = await producer.send({
        topic: o.topic!,
        acks: ACKS_ALL,
        compression: COMPRESSION,
        // No partition given: the partitioner hashes the key (murmur2), as convlog does.
        messages: [{ key, value: values[i]!, headers: { [EVENT_TYPE_HEADER]: event.body.type } }],
      });
      const sealedBy = sealer !== undefined && Sealer.seals(event.body.type) ? { sealed_by: sealer.keyId } : {};
      console.log(JSON.stringify({
        type: event.body.type, event_id: event.id, key: key.toString("utf8"),
        partition: meta!.partition, offset: Number(meta!.baseOffset), ...sealedBy,
      }));
    }
  } finally {
    await producer.disconnect();
  }
}

main().catch((error: unknown) => {
  console.error("ts-producer:", error instanceof Error ? error.message : error);
  process.exit(1);
});
