// Sealed records (docs/producers.md, "Sealed records (schema v5)"): a body's content is
// encrypted under its conversation's data key before the record is written, so that an erase,
// which destroys the key, shreds every copy of it. Node's built-in crypto only: AES-256-GCM
// (createCipheriv, setAAD, getAuthTag appended) and randomBytes for the nonces.

import { createCipheriv, randomBytes } from "node:crypto";
import type avro from "avsc";
import { conversationKey, eventType, type EventRecord, type Fields } from "./events.js";

const NS = "convlog.events.";
/** The first part of the associated data. */
export const SEAL_PURPOSE = "convlog-sealed-v1";
export const ALGORITHM = "AES-256-GCM";
export const NONCE_BYTES = 12;
export const KEY_BYTES = 32;
const KEY_ID = /^ck_[0-9a-f]{32}$/;

/** The content fields of each sealable body as the clear record carries them: empty (null, [],
 * {} or ""), the content itself being in the ciphertext. The other fields stay clear and equal
 * to the sealed body's. The other bodies (MessageRedacted, ConversationCleared,
 * ConversationErased) carry no content and are never sealed. */
export const EMPTIED: Readonly<Record<string, () => Fields>> = {
  ConversationStarted: () => ({ title: null, metadata: {} }),
  MessageAppended: () => ({ content: null, name: null, tool_calls: [], reasoning_content: null, metadata: {}, blocks: [] }),
  SummaryRecorded: () => ({ text: "" }),
};

const bodyUnion = (eventType as avro.types.RecordType).field("body").type as avro.types.WrappedUnionType;
/** The body records of the schema, each on its own, by short name: the plaintext is one body
 * record's Avro binary, schemaless (no C3 01, no fingerprint, no union branch index). */
export const bodyTypes: ReadonlyMap<string, avro.Type> = new Map(
  bodyUnion.types.map((t) => [(t as { name?: string }).name!.slice(NS.length), t] as const),
);

/** The associated data that binds a ciphertext to its record: the UTF-8 of convlog-sealed-v1,
 * the conversation key as on the log (escaped), the event id, the body's short type name and the
 * key id, joined by single NUL bytes. A ciphertext moved elsewhere fails authentication. */
export function associatedData(key: Buffer, eventId: string, bodyType: string, keyId: string): Buffer {
  const nul = Buffer.from([0]);
  const parts = [Buffer.from(SEAL_PURPOSE, "utf8"), key, Buffer.from(eventId, "utf8"), Buffer.from(bodyType, "utf8"), Buffer.from(keyId, "utf8")];
  return Buffer.concat(parts.flatMap((p, i) => (i === 0 ? [p] : [nul, p])));
}

/** Seals the bodies of one data key (from convlog's key route: a key id and 32 bytes). */
export class Sealer {
  readonly keyId: string;
  readonly #key: Buffer;
  /** The 12 bytes of each seal: fresh random bytes, never repeated under a key. Only a test
   * against the golden vector's fixed nonces replaces it. */
  nonce: () => Buffer = () => randomBytes(NONCE_BYTES);

  constructor(keyId: string, key: Buffer) {
    if (!KEY_ID.test(keyId)) {
      throw new Error(`key id ${JSON.stringify(keyId)} is not ck_ and 32 hex digits`);
    }
    if (key.length !== KEY_BYTES) {
      throw new Error(`the data key is ${key.length} bytes, not ${KEY_BYTES}`); // never the key itself
    }
    this.keyId = keyId;
    this.#key = Buffer.from(key); // a copy: the caller's buffer may be reused
  }

  /** Whether a body of this type is sealed: those that carry what a person or a model wrote. */
  static seals(bodyType: string): boolean {
    return bodyType in EMPTIED;
  }

  /** An event's Avro record (record()'s, or one decoded by avsc) as its sealed record: the same
   * envelope, the body's content fields emptied and `sealed` set to {key_id, nonce, ciphertext}.
   * A body of a type that is never sealed is returned as it is. */
  seal(rec: EventRecord): EventRecord {
    const [bodyType, fields] = bodyOf(rec);
    const empty = EMPTIED[bodyType];
    if (empty === undefined) {
      return rec;
    }
    if (fields.sealed !== undefined && fields.sealed !== null) {
      throw new Error("the body is sealed already");
    }
    const plaintext = bodyTypes.get(bodyType)!.toBuffer({ ...fields, sealed: null });
    const nonce = this.nonce();
    if (nonce.length !== NONCE_BYTES) {
      throw new Error(`a nonce is ${NONCE_BYTES} bytes, not ${nonce.length}`);
    }
    const key = conversationKey({ tenant: str(rec, "tenant_id"), user: str(rec, "user_id"), id: str(rec, "conversation_id") });
    const cipher = createCipheriv("aes-256-gcm", this.#key, nonce, { authTagLength: 16 });
    cipher.setAAD(associatedData(key, str(rec, "event_id"), bodyType, this.keyId));
    // The ciphertext, then the 16-byte tag: what Go's Seal and Java's doFinal return.
    const ciphertext = Buffer.concat([cipher.update(plaintext), cipher.final(), cipher.getAuthTag()]);
    const clear = { ...fields, ...empty(), sealed: { key_id: this.keyId, nonce: Buffer.from(nonce), ciphertext } };
    return { ...rec, body: { [NS + bodyType]: clear } };
  }
}

/** The body's short type name and fields, from the record's { "convlog.events.Type": {...} }. */
export function bodyOf(rec: EventRecord): [string, Fields] {
  const union = rec.body;
  const entries = union !== null && typeof union === "object" ? Object.entries(union) : [];
  const [name, fields] = entries[0] ?? [];
  if (entries.length !== 1 || !name?.startsWith(NS) || fields === null || typeof fields !== "object") {
    throw new Error('the record\'s body is not {"convlog.events.Type": {...}}');
  }
  return [name.slice(NS.length), fields as Fields];
}

function str(rec: EventRecord, field: string): string {
  const value = rec[field];
  if (typeof value !== "string") {
    throw new Error(`the record's ${field} is not a string`);
  }
  return value;
}
