package example.convlog;

import java.io.IOException;
import java.io.InputStream;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.HexFormat;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.UUID;
import java.util.concurrent.TimeUnit;

import org.apache.avro.Schema;
import org.apache.avro.SchemaNormalization;
import org.apache.avro.generic.GenericData;
import org.apache.avro.generic.GenericRecord;
import org.apache.avro.generic.GenericRecordBuilder;
import org.apache.avro.message.BinaryMessageEncoder;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.serialization.ByteArraySerializer;

/**
 * Appends one conversation turn to convlog's topic the way docs/producers.md says, with nothing
 * but kafka-clients and Apache Avro: a user question, an assistant tool call, the tool's result
 * and the assistant's answer.
 *
 * <pre>
 * ChatEventProducer --bootstrap HOST:PORT --topic T --tenant A --user U --conversation C
 *                   [--set producer.setting=value ...]     e.g. compression.type=zstd, transactional.id=app-1
 *                   [--abort-last]                          with transactional.id: then a follow-up turn, aborted
 *                   [--key-id ck_... --key BASE64]          seal the content (schema v5) under this data key
 *                   [--key-url API_BASE --token TOKEN]      seal it under the key convlog's HTTP API hands out
 * ChatEventProducer --seal-vector SCHEMA.avsc KEY_ID KEY_BASE64 NONCE_HEX:RECORD_HEX ...
 *                                                           seal v5 records with the nonces given (golden vector)
 * ChatEventProducer --print-fingerprints [SCHEMA.avsc ...]  the bundled schema, or the files named
 * ChatEventProducer --reencode SCHEMA.avsc HEX ...         decode single-object records, encode them again
 * </pre>
 *
 * Prints one JSON line per acknowledged event: its type, ids, key, partition, offset and
 * transaction outcome ({@code none}, {@code committed} or {@code aborted}).
 */
public final class ChatEventProducer {
    /** The schema this producer writes: event.v3.avsc (copied in by the build). convlog reads it as v4 with no blocks. */
    static final String SCHEMA_RESOURCE = "/convlog/event.v3.avsc";
    /** The schema a sealing producer writes: event.v5.avsc, the first with {@code sealed}. */
    static final String SEALED_SCHEMA_RESOURCE = "/convlog/event.v5.avsc";
    /** Optional; if sent, the body's short record name (Schema.getName(), not getFullName()). */
    static final String EVENT_TYPE_HEADER = "convlog.event_type";
    static final int MAX_KEY_PART_LENGTH = 256;

    private final Schema event;
    private final Schema body;
    private final BinaryMessageEncoder<GenericRecord> encoder;
    private final Sealer sealer; // null: content is written in clear (and cannot be shredded)

    ChatEventProducer(Schema event, Sealer sealer) {
        this.event = event;
        this.sealer = sealer;
        this.body = event.getField("body").schema();
        // Avro single-object encoding: C3 01, the schema's CRC-64-AVRO fingerprint, the body.
        this.encoder = new BinaryMessageEncoder<>(GenericData.get(), event);
    }

    public static void main(String[] args) throws Exception {
        Map<String, List<String>> options = parseOptions(args);
        Schema bundled = loadBundledSchema(SCHEMA_RESOURCE);
        if (options.containsKey("print-fingerprints")) {
            printFingerprints(bundled, options.get("print-fingerprints"));
            return;
        }
        if (options.containsKey("reencode")) {
            reencode(options.get("reencode"));
            return;
        }
        if (options.containsKey("seal-vector")) {
            sealVector(options.get("seal-vector"));
            return;
        }
        Conversation conversation = new Conversation(
                required(options, "tenant"), required(options, "user"), required(options, "conversation"));
        Properties settings = producerSettings(required(options, "bootstrap"), options.getOrDefault("set", List.of()));
        boolean abortLast = options.containsKey("abort-last");
        if (abortLast && !settings.containsKey(ProducerConfig.TRANSACTIONAL_ID_CONFIG)) {
            throw new IllegalArgumentException("--abort-last needs --set transactional.id=...");
        }
        Sealer sealer = sealer(options, conversation);
        Schema schema = sealer == null ? bundled : loadBundledSchema(SEALED_SCHEMA_RESOURCE);
        new ChatEventProducer(schema, sealer).appendTurn(settings, required(options, "topic"), conversation, abortLast);
    }

    /**
     * The data key to seal with: given (--key-id and --key, or CONVLOG_KEY_ID and CONVLOG_KEY),
     * fetched from convlog's HTTP API (--key-url and --token, or CONVLOG_API_URL and
     * CONVLOG_TOKEN), or none: then the records are plain, and an erase cannot shred them.
     */
    private static Sealer sealer(Map<String, List<String>> options, Conversation conversation) throws Exception {
        String keyId = optional(options, "key-id", "CONVLOG_KEY_ID");
        String key = optional(options, "key", "CONVLOG_KEY");
        String url = optional(options, "key-url", "CONVLOG_API_URL");
        if (keyId != null || key != null) {
            if (keyId == null || key == null || url != null) {
                throw new IllegalArgumentException("--key-id and --key go together, without --key-url");
            }
            return new Sealer(Sealer.DataKey.ofBase64(keyId, key));
        }
        if (url == null) {
            return null;
        }
        String token = optional(options, "token", "CONVLOG_TOKEN");
        if (token == null) {
            throw new IllegalArgumentException("--key-url needs --token (or CONVLOG_TOKEN): the app's API token");
        }
        return new Sealer(Sealer.fetch(url, token, conversation.tenant(), conversation.user(), conversation.conversation()));
    }

    /** Who a conversation belongs to. The envelope carries the ids as they are; the key escapes them. */
    record Conversation(String tenant, String user, String conversation) {
        /** tenant:user:conversation in UTF-8; inside a part "\" is written "\\" and ":" is written "\:". */
        String key() {
            return escapePart("tenant", tenant) + ":" + escapePart("user", user) + ":"
                    + escapePart("conversation", conversation);
        }
    }

    private static String escapePart(String what, String part) {
        // The contract's limits, counted in code points as convlog counts them.
        boolean tooLong = part.codePointCount(0, part.length()) > MAX_KEY_PART_LENGTH;
        if (part.isBlank() || tooLong || part.chars().anyMatch(c -> c < 0x20 || c == 0x7f)) {
            throw new IllegalArgumentException(
                    what + " id must be 1-" + MAX_KEY_PART_LENGTH + " characters without control characters");
        }
        return part.replace("\\", "\\\\").replace(":", "\\:");
    }

    /** The settings the contract calls safe: acks=all and idempotence; any codec, transactions allowed. */
    static Properties producerSettings(String bootstrap, List<String> overrides) {
        Properties p = new Properties();
        p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ProducerConfig.CLIENT_ID_CONFIG, "convlog-java-example");
        p.put(ProducerConfig.ACKS_CONFIG, "all");
        p.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "true");
        // The default partitioner: murmur2 of the key bytes, as convlog computes it. Never set
        // partitioner.class or partitioner.ignore.keys, never pick a partition by hand.
        p.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        p.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        for (String override : overrides) {
            int eq = override.indexOf('=');
            if (eq < 1) {
                throw new IllegalArgumentException("--set takes name=value, got " + override);
            }
            p.put(override.substring(0, eq), override.substring(eq + 1));
        }
        return p;
    }

    /**
     * Sends the turn; with a transactional.id the turn is one transaction, committed. With
     * {@code abortLast} a follow-up turn then goes into a second transaction that is aborted:
     * what an exactly-once app does when its processing fails after it has sent (a consumer
     * reading read_committed, as convlog does, never sees those events).
     */
    void appendTurn(Properties settings, String topic, Conversation conversation, boolean abortLast)
            throws Exception {
        boolean transactional = settings.containsKey(ProducerConfig.TRANSACTIONAL_ID_CONFIG);
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(settings)) {
            if (transactional) {
                producer.initTransactions(); // fences an earlier instance with the same transactional.id
                producer.beginTransaction();
            }
            List<String> printed = new ArrayList<>();
            for (GenericRecord bodyRecord : turn()) {
                printed.add(send(producer, topic, conversation, bodyRecord));
            }
            if (transactional) {
                producer.commitTransaction();
            }
            String outcome = transactional ? "committed" : "none";
            printed.forEach(line -> System.out.println(withOutcome(line, outcome)));
            if (abortLast) {
                producer.beginTransaction();
                List<String> aborted = new ArrayList<>();
                aborted.add(send(producer, topic, conversation,
                        message("user", "Can I still file one for last month?").build()));
                aborted.add(send(producer, topic, conversation, message("assistant", "Yes, within 30 days.")
                        .set("model", "gpt-4o").set("finish_reason", finishReason("stop")).build()));
                producer.abortTransaction();
                aborted.forEach(line -> System.out.println(withOutcome(line, "aborted")));
            }
        }
    }

    private static String withOutcome(String jsonLine, String outcome) {
        return jsonLine.substring(0, jsonLine.length() - 1) + ",\"transaction\":\"" + outcome + "\"}";
    }

    /** One turn: the conversation's start, a question, a tool call, its result and the answer. */
    private List<GenericRecord> turn() {
        List<GenericRecord> events = new ArrayList<>();
        String model = "gpt-4o";
        events.add(conversationStarted("Overtime request"));
        events.add(message("user", "How do I file an overtime request in the OA system?").build());
        GenericRecord call = new GenericRecordBuilder(recordOf(body("MessageAppended"), "tool_calls"))
                .set("id", "call_1").set("name", "search_kb").set("arguments", "{\"q\": \"overtime request\"}")
                .build();
        events.add(message("assistant", null)
                .set("tool_calls", List.of(call))
                .set("reasoning_content", "The knowledge base has the procedure.")
                .set("model", model)
                .set("usage", usage(120L, 18L, null))
                .set("finish_reason", finishReason("tool_calls"))
                .build());
        events.add(message("tool", "{\"hits\": 3, \"top\": \"OA > Attendance > Overtime\"}")
                .set("tool_call_id", "call_1")
                .build());
        events.add(message("assistant", "Open OA, then Attendance > Overtime, and submit the form.")
                .set("model", model)
                .set("usage", usage(160L, 24L, 64L))
                .set("finish_reason", finishReason("stop"))
                .set("metadata", Map.of("client", "java-example"))
                .build());
        return events;
    }

    /** Encodes one event, sends it under the conversation's key and waits for the acknowledgement. */
    private String send(KafkaProducer<byte[], byte[]> producer, String topic, Conversation conversation,
            GenericRecord bodyRecord) throws Exception {
        // The idempotency key (at most 128 characters): a retry after a timeout reuses it, and
        // convlog keeps one copy. The message id defaults to it, as convlog's own producer does.
        String eventId = UUID.randomUUID().toString();
        if (bodyRecord.getSchema().getField("message_id") != null) {
            bodyRecord.put("message_id", eventId);
        }
        String key = conversation.key();
        if (sealer != null && Sealer.seals(bodyRecord.getSchema())) {
            // After the message id is set: the sealed plaintext is the complete body.
            bodyRecord = sealer.seal(key, eventId, bodyRecord);
        }
        GenericRecord envelope = new GenericRecordBuilder(event)
                .set("event_id", eventId)
                .set("tenant_id", conversation.tenant())
                .set("user_id", conversation.user())
                .set("conversation_id", conversation.conversation())
                .set("occurred_at", micros())
                .set("producer", "java-example")
                .set("body", bodyRecord)
                .build();
        ByteBuffer encoded = encoder.encode(envelope);
        byte[] value = new byte[encoded.remaining()];
        encoded.get(value);
        // No partition given: the default partitioner hashes the key (murmur2), as convlog does.
        ProducerRecord<byte[], byte[]> record =
                new ProducerRecord<>(topic, key.getBytes(StandardCharsets.UTF_8), value);
        String type = bodyRecord.getSchema().getName();
        record.headers().add(EVENT_TYPE_HEADER, type.getBytes(StandardCharsets.UTF_8));
        RecordMetadata at = producer.send(record).get(60, TimeUnit.SECONDS);
        String sealedBy = bodyRecord.getSchema().getField("sealed") == null || bodyRecord.get("sealed") == null
                ? "null" : json(sealer.keyId());
        return "{\"type\":\"" + type + "\",\"event_id\":\"" + eventId + "\",\"key\":" + json(key)
                + ",\"partition\":" + at.partition() + ",\"offset\":" + at.offset() + ",\"sealed_by\":" + sealedBy
                + "}";
    }

    private GenericRecord conversationStarted(String title) {
        return new GenericRecordBuilder(body("ConversationStarted")).set("title", title).build();
    }

    private GenericRecordBuilder message(String role, String content) {
        Schema schema = body("MessageAppended");
        return new GenericRecordBuilder(schema)
                .set("message_id", "") // the event id, set by send()
                .set("role", new GenericData.EnumSymbol(schema.getField("role").schema(), role))
                .set("content", content);
    }

    private GenericRecord usage(Long prompt, Long completion, Long cached) {
        Schema schema = nonNull(body("MessageAppended").getField("usage").schema());
        return new GenericRecordBuilder(schema)
                .set("prompt_tokens", prompt).set("completion_tokens", completion).set("cached_tokens", cached)
                .build();
    }

    private GenericData.EnumSymbol finishReason(String symbol) {
        return new GenericData.EnumSymbol(nonNull(body("MessageAppended").getField("finish_reason").schema()), symbol);
    }

    private Schema body(String name) {
        return body.getTypes().stream().filter(s -> s.getName().equals(name)).findFirst().orElseThrow();
    }

    private static Schema recordOf(Schema message, String arrayField) {
        return message.getField(arrayField).schema().getElementType();
    }

    private static Schema nonNull(Schema union) {
        return union.getTypes().stream().filter(s -> s.getType() != Schema.Type.NULL).findFirst().orElseThrow();
    }

    private static long micros() {
        java.time.Instant now = java.time.Instant.now();
        return now.getEpochSecond() * 1_000_000L + now.getNano() / 1_000L;
    }

    /** Both notations of each schema's fingerprint: the wire bytes, and what Java prints. */
    static void printFingerprints(Schema bundled, List<String> files) throws IOException {
        Map<String, Schema> schemas = new java.util.LinkedHashMap<>();
        if (files.isEmpty()) {
            schemas.put("classpath:" + SCHEMA_RESOURCE, bundled);
        }
        for (String file : files) {
            schemas.put(file, new Schema.Parser().parse(Files.readString(Path.of(file))));
        }
        schemas.forEach((source, schema) -> {
            long fingerprint = SchemaNormalization.parsingFingerprint64(schema);
            // What follows C3 01 on the wire: the same long, little-endian.
            byte[] wire = ByteBuffer.allocate(8).order(ByteOrder.LITTLE_ENDIAN).putLong(fingerprint).array();
            System.out.println("{\"schema\":" + json(source) + ",\"java_long_hex\":\"" + Long.toHexString(fingerprint)
                    + "\",\"wire_hex\":\"" + HexFormat.of().formatHex(wire) + "\"}");
        });
    }

    /**
     * Decodes each record (hex) with Avro's BinaryMessageDecoder for the schema file named first
     * and prints it encoded again by BinaryMessageEncoder, one hex line per record: convlog's
     * golden vectors (schemas/vectors/events.json) come back byte for byte.
     */
    static void reencode(List<String> args) throws IOException {
        if (args.isEmpty()) {
            throw new IllegalArgumentException("--reencode SCHEMA.avsc HEX ...");
        }
        Schema schema = new Schema.Parser().parse(Files.readString(Path.of(args.get(0))));
        org.apache.avro.message.BinaryMessageDecoder<GenericRecord> decoder =
                new org.apache.avro.message.BinaryMessageDecoder<>(GenericData.get(), schema);
        BinaryMessageEncoder<GenericRecord> encoder = new BinaryMessageEncoder<>(GenericData.get(), schema);
        for (String hex : args.subList(1, args.size())) {
            ByteBuffer again = encoder.encode(decoder.decode(HexFormat.of().parseHex(hex)));
            byte[] out = new byte[again.remaining()];
            again.get(out);
            System.out.println(HexFormat.of().formatHex(out));
        }
    }

    /**
     * Seals the body of each v5 single-object record ({@code NONCE_HEX:RECORD_HEX}, its body in
     * clear) with the key and the nonce given, and prints the sealed record in hex: what
     * schemas/vectors/sealed.json holds, byte for byte. Fixed nonces are for test vectors only.
     */
    static void sealVector(List<String> args) throws Exception {
        if (args.size() < 3) {
            throw new IllegalArgumentException("--seal-vector SCHEMA.avsc KEY_ID KEY_BASE64 NONCE_HEX:RECORD_HEX ...");
        }
        Schema schema = new Schema.Parser().parse(Files.readString(Path.of(args.get(0))));
        Sealer sealer = new Sealer(Sealer.DataKey.ofBase64(args.get(1), args.get(2)));
        org.apache.avro.message.BinaryMessageDecoder<GenericRecord> decoder =
                new org.apache.avro.message.BinaryMessageDecoder<>(GenericData.get(), schema);
        BinaryMessageEncoder<GenericRecord> encoder = new BinaryMessageEncoder<>(GenericData.get(), schema);
        for (String pair : args.subList(3, args.size())) {
            String[] parts = pair.split(":", 2);
            GenericRecord record = decoder.decode(HexFormat.of().parseHex(parts[1]));
            Conversation conversation = new Conversation(record.get("tenant_id").toString(),
                    record.get("user_id").toString(), record.get("conversation_id").toString());
            GenericRecord body = (GenericRecord) record.get("body");
            record.put("body", sealer.seal(conversation.key(), record.get("event_id").toString(), body,
                    HexFormat.of().parseHex(parts[0])));
            ByteBuffer sealed = encoder.encode(record);
            byte[] out = new byte[sealed.remaining()];
            sealed.get(out);
            System.out.println(HexFormat.of().formatHex(out));
        }
    }

    private static Schema loadBundledSchema(String resource) throws IOException {
        try (InputStream in = ChatEventProducer.class.getResourceAsStream(resource)) {
            if (in == null) {
                throw new IOException(resource + " is not on the classpath: outside the convlog repository, "
                        + "copy schemas/event.v3.avsc and event.v5.avsc into src/main/resources/convlog/");
            }
            return new Schema.Parser().parse(in);
        }
    }

    private static Map<String, List<String>> parseOptions(String[] args) {
        Map<String, List<String>> options = new java.util.HashMap<>();
        String current = null;
        for (String arg : args) {
            if (arg.startsWith("--")) {
                current = arg.substring(2);
                options.computeIfAbsent(current, k -> new ArrayList<>());
            } else if (current != null) {
                options.get(current).add(arg);
            } else {
                throw new IllegalArgumentException("unexpected argument " + arg);
            }
        }
        return options;
    }

    /** An option's one value, else the environment variable's, else null. */
    private static String optional(Map<String, List<String>> options, String name, String env) {
        List<String> values = options.get(name);
        if (values == null) {
            String fromEnv = System.getenv(env);
            return fromEnv == null || fromEnv.isEmpty() ? null : fromEnv;
        }
        if (values.size() != 1) {
            throw new IllegalArgumentException("--" + name + " takes one value");
        }
        return values.get(0);
    }

    private static String required(Map<String, List<String>> options, String name) {
        List<String> values = options.get(name);
        if (values == null || values.size() != 1) {
            throw new IllegalArgumentException("--" + name + " VALUE is required");
        }
        return values.get(0);
    }

    private static String json(String text) {
        if (text == null) {
            return "null";
        }
        StringBuilder out = new StringBuilder("\"");
        for (char c : text.toCharArray()) {
            switch (c) {
                case '"' -> out.append("\\\"");
                case '\\' -> out.append("\\\\");
                default -> {
                    if (c < 0x20 || c > 0x7e) {
                        out.append(String.format("\\u%04x", (int) c));
                    } else {
                        out.append(c);
                    }
                }
            }
        }
        return out.append('"').toString();
    }
}
