// The data key a sealer seals with: given (a key id and the key in base64), or fetched from
// convlog's key route (docs/producers.md, "Getting a data key"). Node's built-in fetch only.

import type { Conversation } from "./events.js";
import { ALGORITHM, Sealer } from "./seal.js";

export interface KeyOptions {
  keyId?: string | undefined; // --key-id, CONVLOG_KEY_ID
  key?: string | undefined; // --key, CONVLOG_KEY: base64 of 32 bytes (never logged)
  keyUrl?: string | undefined; // --key-url, CONVLOG_API_URL: convlog's API base URL
  token?: string | undefined; // --token, CONVLOG_TOKEN: the app token for --key-url
}

const BASE64 = /^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$/;

/** The sealer of the options given: a key given, a key fetched from the route, or none
 * (undefined: plain records, which an erase cannot shred). */
export async function sealerFor(conversation: Conversation, o: KeyOptions): Promise<Sealer | undefined> {
  let { keyId, key } = o;
  if (keyId || key) {
    if (!keyId || !key) {
      throw new Error("--key-id and --key go together");
    }
  } else if (o.keyUrl) {
    ({ keyId, key } = await fetchKey(conversation, o.keyUrl, o.token ?? ""));
  } else {
    return undefined;
  }
  if (!BASE64.test(key)) {
    throw new Error("the data key is not base64"); // never the key itself in a message
  }
  return new Sealer(keyId, Buffer.from(key, "base64"));
}

/** Asks convlog's key route for the conversation's data key:
 * POST {api}/v1/users/{u}/conversations/{c}/key with the app's bearer token, the ids
 * percent-encoded as path segments. The token names the tenant (no tenant in the path): it must
 * be the token of conversation.tenant, or the key is another tenant's conversation's and convlog
 * refuses the records (seal_unauthentic). The key is kept in memory only. */
export async function fetchKey(conversation: Conversation, api: string, token: string): Promise<{ keyId: string; key: string }> {
  const path = `/v1/users/${encodeURIComponent(conversation.user)}/conversations/${encodeURIComponent(conversation.id)}/key`;
  let response: Response;
  try {
    response = await fetch(api.replace(/\/+$/, "") + path, {
      method: "POST",
      headers: { Authorization: `Bearer ${token}` },
      signal: AbortSignal.timeout(30_000),
    });
  } catch (error) {
    throw new Error(`the key route: ${error instanceof Error ? error.message : String(error)}`);
  }
  if (response.status !== 200) {
    throw new Error(`the key route answered ${response.status} ${response.statusText}`);
  }
  const answer = (await response.json()) as { key_id?: unknown; key?: unknown; algorithm?: unknown };
  if (answer.algorithm !== ALGORITHM) {
    throw new Error(`the key route's algorithm is ${JSON.stringify(answer.algorithm)}, not ${ALGORITHM}`);
  }
  if (typeof answer.key_id !== "string" || typeof answer.key !== "string") {
    throw new Error("the key route's answer has no key_id and key");
  }
  return { keyId: answer.key_id, key: answer.key };
}
