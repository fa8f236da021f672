package example.convlog;

import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.net.URI;
import java.net.URLEncoder;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.security.GeneralSecurityException;
import java.security.SecureRandom;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Base64;
import java.util.HashMap;
import java.util.Map;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

import javax.crypto.Cipher;
import javax.crypto.spec.GCMParameterSpec;
import javax.crypto.spec.SecretKeySpec;

import org.apache.avro.Schema;
import org.apache.avro.generic.GenericData;
import org.apache.avro.generic.GenericDatumWriter;
import org.apache.avro.generic.GenericRecord;
import org.apache.avro.io.BinaryEncoder;
import org.apache.avro.io.EncoderFactory;

/**
 * Seals a body's content under a conversation's data key, as docs/producers.md ("Sealed records
 * (schema v5)") specifies, with the JDK alone (javax.crypto's AES/GCM/NoPadding, SecureRandom):
 *
 * <ol>
 *   <li>the plaintext is the Avro binary encoding (schemaless: no single-object header) of the
 *       complete body record under schema v5, its {@code sealed} null;</li>
 *   <li>AES-256-GCM with a random 12-byte nonce; the ciphertext is followed by the 16-byte tag
 *       (what {@code doFinal} returns);</li>
 *   <li>the associated data is {@code convlog-sealed-v1}, the conversation key (escaped, as on
 *       the log), the event id, the body type and the key id, UTF-8, joined by NUL bytes: moved to
 *       another conversation or event, the ciphertext fails authentication;</li>
 *   <li>the record written is the same body with its content fields empty and {@code sealed} set;
 *       its clear fields stay as they are (convlog refuses a record whose clear fields disagree
 *       with the sealed body's).</li>
 * </ol>
 */
final class Sealer {
    static final String ALGORITHM = "AES-256-GCM";
    static final int KEY_BYTES = 32;
    static final int NONCE_BYTES = 12;
    static final int TAG_BITS = 128;
    static final String PURPOSE = "convlog-sealed-v1";

    /** A conversation's data key: its id (ck_ then 32 hex digits) and its 32 bytes. */
    record DataKey(String keyId, byte[] secret) {
        DataKey {
            if (!keyId.matches("ck_[0-9a-f]{32}")) {
                throw new IllegalArgumentException("a data key id is ck_ then 32 hex digits, got " + keyId);
            }
            if (secret.length != KEY_BYTES) {
                throw new IllegalArgumentException("a data key is " + KEY_BYTES + " bytes, got " + secret.length);
            }
        }

        static DataKey ofBase64(String keyId, String base64) {
            return new DataKey(keyId, Base64.getDecoder().decode(base64));
        }
    }

    private final DataKey key;
    private final SecureRandom random = new SecureRandom();

    Sealer(DataKey key) {
        this.key = key;
    }

    String keyId() {
        return key.keyId();
    }

    /** Whether a body of this type is sealed: those that carry what a person or a model wrote. */
    static boolean seals(Schema bodySchema) {
        return bodySchema.getField("sealed") != null;
    }

    /** The record to write in place of {@code body}, sealed with a fresh random nonce. */
    GenericRecord seal(String conversationKey, String eventId, GenericRecord body) throws GeneralSecurityException {
        byte[] nonce = new byte[NONCE_BYTES];
        random.nextBytes(nonce);
        return seal(conversationKey, eventId, body, nonce);
    }

    /**
     * The record to write in place of {@code body}, sealed with {@code nonce}. A nonce must never
     * repeat under one key: only the golden vector's test passes one in.
     */
    GenericRecord seal(String conversationKey, String eventId, GenericRecord body, byte[] nonce)
            throws GeneralSecurityException {
        Schema schema = body.getSchema();
        if (!seals(schema) || body.get("sealed") != null) {
            throw new IllegalArgumentException(schema.getName() + " is not a body to seal, or is sealed already");
        }
        Cipher cipher = Cipher.getInstance("AES/GCM/NoPadding");
        cipher.init(Cipher.ENCRYPT_MODE, new SecretKeySpec(key.secret(), "AES"), new GCMParameterSpec(TAG_BITS, nonce));
        cipher.updateAAD(associatedData(conversationKey, eventId, schema.getName(), key.keyId()));
        byte[] ciphertext = cipher.doFinal(plaintext(body)); // the ciphertext, then the 16-byte tag

        GenericRecord clear = GenericData.get().deepCopy(schema, body);
        emptyContent(clear);
        Schema sealedSchema = nonNull(schema.getField("sealed").schema());
        GenericRecord sealed = new GenericData.Record(sealedSchema);
        sealed.put("key_id", key.keyId());
        sealed.put("nonce", ByteBuffer.wrap(nonce.clone()));
        sealed.put("ciphertext", ByteBuffer.wrap(ciphertext));
        clear.put("sealed", sealed);
        return clear;
    }

    /** The UTF-8 of the parts, joined by single NUL bytes (none of them can hold one). */
    static byte[] associatedData(String conversationKey, String eventId, String bodyType, String keyId) {
        String joined = String.join("\0", PURPOSE, conversationKey, eventId, bodyType, keyId);
        return joined.getBytes(StandardCharsets.UTF_8);
    }

    /** Avro binary of the body record alone: no single-object header, no union index. */
    static byte[] plaintext(GenericRecord body) {
        ByteArrayOutputStream out = new ByteArrayOutputStream();
        BinaryEncoder encoder = EncoderFactory.get().binaryEncoder(out, null);
        try {
            new GenericDatumWriter<GenericRecord>(body.getSchema()).write(body, encoder);
            encoder.flush();
        } catch (IOException e) {
            throw new IllegalStateException("writing to memory failed", e);
        }
        return out.toByteArray();
    }

    /** The content fields of each sealed body type, emptied: null, [], {} or "" as the schema types them. */
    private static void emptyContent(GenericRecord clear) {
        switch (clear.getSchema().getName()) {
            case "ConversationStarted" -> {
                clear.put("title", null);
                clear.put("metadata", new HashMap<String, String>());
            }
            case "MessageAppended" -> {
                clear.put("content", null);
                clear.put("name", null);
                clear.put("tool_calls", new ArrayList<>());
                clear.put("reasoning_content", null);
                clear.put("metadata", new HashMap<String, String>());
                clear.put("blocks", new ArrayList<>());
            }
            case "SummaryRecorded" -> clear.put("text", "");
            default -> throw new IllegalArgumentException("no sealed form for " + clear.getSchema().getName());
        }
    }

    private static Schema nonNull(Schema union) {
        return union.getTypes().stream().filter(s -> s.getType() != Schema.Type.NULL).findFirst().orElseThrow();
    }

    /**
     * Asks convlog's HTTP API for the conversation's data key:
     * {@code POST {api}/v1/users/{u}/conversations/{c}/key} with the app's bearer token (the
     * token names the tenant, which must be {@code tenant}), answered {@code {"key_id": "ck_…", "key": "<base64>", "algorithm": "AES-256-GCM"}}.
     * The same conversation gets the same key back until it is erased.
     */
    static DataKey fetch(String apiBase, String token, String tenant, String user, String conversation)
            throws IOException, InterruptedException {
        // The token decides the tenant: a key is only ever handed out for the token's own tenant.
        String path = "/v1/users/" + segment(user) + "/conversations/" + segment(conversation) + "/key";
        HttpRequest request = HttpRequest.newBuilder(URI.create(apiBase.replaceAll("/+$", "") + path))
                .timeout(Duration.ofSeconds(30))
                .header("Authorization", "Bearer " + token)
                .header("Accept", "application/json")
                .POST(HttpRequest.BodyPublishers.noBody())
                .build();
        // HTTP/1.1: on a cleartext URL the JDK's default (HTTP/2) sends an h2c upgrade convlog's server refuses.
        HttpClient client = HttpClient.newBuilder()
                .version(HttpClient.Version.HTTP_1_1)
                .connectTimeout(Duration.ofSeconds(10))
                .build();
        HttpResponse<String> response = client.send(request, HttpResponse.BodyHandlers.ofString());
        if (response.statusCode() != 200) {
            throw new IOException("POST " + path + " answered " + response.statusCode() + ": " + response.body());
        }
        Map<String, String> answer = flatJsonStrings(response.body());
        if (!ALGORITHM.equals(answer.get("algorithm"))) {
            throw new IOException("the key route answered algorithm " + answer.get("algorithm") + ", not " + ALGORITHM);
        }
        return DataKey.ofBase64(required(answer, "key_id"), required(answer, "key"));
    }

    /** A path segment: URLEncoder is for forms (a space is "+"), a path wants "%20". */
    private static String segment(String id) {
        return URLEncoder.encode(id, StandardCharsets.UTF_8).replace("+", "%20");
    }

    private static final Pattern STRING_MEMBER = Pattern.compile("\"([a-z_]+)\"\\s*:\\s*\"([^\"\\\\]*)\"");

    /**
     * The string members of the key route's flat answer. The JDK has no JSON parser, and the
     * answer's values (an id, base64, an algorithm name) hold no escapes; a real app uses its own.
     */
    static Map<String, String> flatJsonStrings(String json) {
        Map<String, String> out = new HashMap<>();
        Matcher m = STRING_MEMBER.matcher(json);
        while (m.find()) {
            out.put(m.group(1), m.group(2));
        }
        return out;
    }

    private static String required(Map<String, String> answer, String name) throws IOException {
        String value = answer.get(name);
        if (value == null) {
            throw new IOException("the key route's answer has no \"" + name + "\"");
        }
        return value;
    }
}
