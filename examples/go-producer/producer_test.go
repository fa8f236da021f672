package main

// The example against convlog's golden vectors (schemas/vectors/, written by convlog's Python
// producer): the same bytes for the same events, the same partition for every key; and the
// traps of the Go ecosystem, each shown to break the contract.

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"hash/crc32"
	"hash/fnv"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/avro"
	"github.com/twmb/franz-go/pkg/kgo"
)

type eventVectors struct {
	Fingerprint   string `json:"fingerprint"`
	SchemaVersion int    `json:"schema_version"`
	Turn          struct {
		Tenant      string `json:"tenant_id"`
		User        string `json:"user_id"`
		Convo       string `json:"conversation_id"`
		Prefix      string `json:"event_id_prefix"`
		FirstMicros int64  `json:"first_occurred_at_micros"`
		StepMicros  int64  `json:"occurred_at_step_micros"`
		Producer    string `json:"producer"`
	} `json:"turn"`
	Events     []eventVector `json:"events"`      // the turn
	MoreEvents []eventVector `json:"more_events"` // records of every other shape
}

type eventVector struct {
	Name     string            `json:"name"`
	Key      string            `json:"key"`
	KeyHex   string            `json:"key_hex"`
	Headers  map[string]string `json:"headers"`
	Record   json.RawMessage   `json:"record"`
	ValueHex string            `json:"value_hex"`
}

type keyVectors struct {
	Keys []struct {
		Tenant     string         `json:"tenant_id"`
		User       string         `json:"user_id"`
		Convo      string         `json:"conversation_id"`
		Key        string         `json:"key"`
		KeyHex     string         `json:"key_hex"`
		Murmur2    int32          `json:"murmur2"`
		Partitions map[string]int `json:"partitions"`
	} `json:"keys"`
}

// vectorsDir is schemas/vectors of the convlog repository (CONVLOG_VECTORS overrides it).
func vectorsDir() string {
	if dir := os.Getenv("CONVLOG_VECTORS"); dir != "" {
		return dir
	}
	return filepath.Join("..", "..", "schemas", "vectors")
}

func load(t *testing.T, name string, into any) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(vectorsDir(), name))
	if err != nil {
		t.Fatalf("the golden vectors: %v", err)
	}
	if err := json.Unmarshal(raw, into); err != nil {
		t.Fatal(err)
	}
}

func unhex(t *testing.T, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestTheTurnEncodesToTheVectorsBytes(t *testing.T) {
	var v eventVectors
	load(t, "events.json", &v)
	conv := Conversation{v.Turn.Tenant, v.Turn.User, v.Turn.Convo}
	key, err := conv.Key()
	if err != nil {
		t.Fatal(err)
	}
	events := Turn(v.Turn.Producer,
		func(i int) string { return fmt.Sprintf("%s-%d", v.Turn.Prefix, i+1) },
		func(i int) time.Time { return time.UnixMicro(v.Turn.FirstMicros + int64(i)*v.Turn.StepMicros) })
	if len(events) != len(v.Events) {
		t.Fatalf("%d events, the vectors have %d", len(events), len(v.Events))
	}
	for i, want := range v.Events {
		if !bytes.Equal(key, unhex(t, want.KeyHex)) || string(key) != want.Key {
			t.Errorf("%s: key %q, want %q", want.Name, key, want.Key)
		}
		if got := map[string]string{EventTypeHeader: events[i].Body.Type}; fmt.Sprint(got) != fmt.Sprint(want.Headers) {
			t.Errorf("%s: headers %v, want %v", want.Name, got, want.Headers)
		}
		value, err := Encode(conv.Record(events[i]))
		if err != nil {
			t.Fatalf("%s: %v", want.Name, err)
		}
		if got := hex.EncodeToString(value); got != want.ValueHex {
			t.Errorf("%s: value\n got %s\nwant %s", want.Name, got, want.ValueHex)
		}
	}
}

// Every vector's record JSON, encoded by twmb/avro, is the vector's bytes: a producer that
// builds its records another way can check itself against the JSON alone.
func TestEveryVectorRecordEncodesToItsBytes(t *testing.T) {
	var v eventVectors
	load(t, "events.json", &v)
	if len(v.MoreEvents) == 0 {
		t.Fatal("no more_events in the vectors")
	}
	for _, want := range append(v.Events, v.MoreEvents...) {
		var record map[string]any
		dec := json.NewDecoder(bytes.NewReader(want.Record))
		dec.UseNumber()
		if err := dec.Decode(&record); err != nil {
			t.Fatal(err)
		}
		value, err := eventSchema.AppendSingleObject(nil, record)
		if err != nil {
			t.Fatalf("%s: %v", want.Name, err)
		}
		if got := hex.EncodeToString(value); got != want.ValueHex {
			t.Errorf("%s: value\n got %s\nwant %s", want.Name, got, want.ValueHex)
		}
		// And back: twmb/avro reads convlog's bytes as the same record.
		var decoded any
		if _, err := eventSchema.DecodeSingleObject(unhex(t, want.ValueHex), &decoded); err != nil {
			t.Fatalf("%s: decoding: %v", want.Name, err)
		}
	}
}

func TestTheHeaderIsMagicAndTheLittleEndianFingerprint(t *testing.T) {
	var v eventVectors
	load(t, "events.json", &v)
	if got := hex.EncodeToString(Fingerprint()); got != v.Fingerprint {
		t.Fatalf("fingerprint %s, the vectors' (schema v%d) %s", got, v.SchemaVersion, v.Fingerprint)
	}
	value, err := Encode(Conversation{"t", "u", "c"}.Record(Event{"e", time.Now(), "p", TurnBodies()[1]}))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(value[:10], append([]byte{0xc3, 0x01}, Fingerprint()...)) {
		t.Fatalf("header % x", value[:10])
	}
}

// The trap: CRC-64-AVRO as a hash.Hash64's Sum (big-endian, what hamba/avro's CRC64Avro
// gives) is the fingerprint byte-reversed — Java's Long.toHexString form, not the wire form.
func TestTrapABigEndianFingerprintIsNotTheWireForm(t *testing.T) {
	var v eventVectors
	load(t, "events.json", &v)
	h := avro.NewRabin()
	h.Write(eventSchema.Canonical())
	bigEndian := h.Sum(nil)
	if hex.EncodeToString(bigEndian) == v.Fingerprint {
		t.Fatal("the big-endian form should differ from the wire form")
	}
	if got := hex.EncodeToString(binary.LittleEndian.AppendUint64(nil, h.Sum64())); got != v.Fingerprint {
		t.Fatalf("little-endian %s, want %s", got, v.Fingerprint)
	}
}

// The trap: Confluent's serializers frame a value as 00 + a 4-byte schema id. convlog refuses
// that (corrupt_record); this producer writes C3 01 first, always.
func TestTrapNoConfluentFraming(t *testing.T) {
	conv := Conversation{"acme", "employee-42", "c-1"}
	for _, e := range Turn("go-example", func(int) string { return NewEventID() }, func(int) time.Time { return time.Now() }) {
		value, err := Encode(conv.Record(e))
		if err != nil {
			t.Fatal(err)
		}
		if value[0] != 0xc3 || value[1] != 0x01 {
			t.Fatalf("%s starts % x", e.Body.Type, value[:5])
		}
	}
}

// partitionOf asks a partitioner as the client does for a keyed record.
func partitionOf(p kgo.Partitioner, key []byte, n int) int {
	tp := p.ForTopic("convlog.events")
	r := &kgo.Record{Key: key}
	if bp, ok := tp.(kgo.TopicBackupPartitioner); ok {
		return bp.PartitionByBackup(r, n, nil) // a keyed record never reads the backup
	}
	return tp.Partition(r, n)
}

func TestThePartitionerPutsEveryKeyOnTheVectorsPartition(t *testing.T) {
	var v keyVectors
	load(t, "keys.json", &v)
	for _, k := range v.Keys {
		key, err := Conversation{k.Tenant, k.User, k.Convo}.Key()
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(key, unhex(t, k.KeyHex)) || string(key) != k.Key {
			t.Errorf("key %q, want %q", key, k.Key)
		}
		for count, want := range k.Partitions {
			n, _ := strconv.Atoi(count)
			if got := partitionOf(Partitioner(), key, n); got != want {
				t.Errorf("%q of %d partitions: %d, want %d", k.Key, n, got, want)
			}
		}
	}
}

// The trap: librdkafka's default partitioner (consistent_random: CRC32, what confluent-kafka-go
// gets unless partitioner=murmur2_random) and Sarama's FNV-1a hash put keys on other
// partitions than convlog reads them from.
func TestTrapOtherHashersPutKeysOnOtherPartitions(t *testing.T) {
	var v keyVectors
	load(t, "keys.json", &v)
	wrong := map[string]kgo.Partitioner{
		"librdkafka consistent (CRC32)": kgo.StickyKeyPartitioner(kgo.SaramaHasher(crc32.ChecksumIEEE)),
		"Sarama (FNV-1a)": kgo.StickyKeyPartitioner(kgo.SaramaCompatHasher(func(b []byte) uint32 {
			h := fnv.New32a()
			h.Write(b)
			return h.Sum32()
		})),
	}
	for name, p := range wrong {
		moved := 0
		for _, k := range v.Keys {
			if got := partitionOf(p, unhex(t, k.KeyHex), 12); got != k.Partitions["12"] {
				moved++
			}
		}
		if moved == 0 {
			t.Errorf("%s put every key where murmur2 does", name)
		}
		t.Logf("%s: %d of %d keys on another partition of 12", name, moved, len(v.Keys))
	}
}

// acks=all, idempotence on, the murmur2 partitioner and compression: what the client is
// really configured with, read back from it.
func TestTheClientHasTheSafeSettings(t *testing.T) {
	opts, err := ClientOptions("127.0.0.1:1", "zstd")
	if err != nil {
		t.Fatal(err)
	}
	client, err := kgo.NewClient(opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	if acks := client.OptValue(kgo.RequiredAcks); acks != kgo.AllISRAcks() {
		t.Errorf("acks %v, want all", acks)
	}
	if off := client.OptValue(kgo.DisableIdempotentWrite); off != false {
		t.Errorf("idempotence disabled: %v", off)
	}
	if codecs := client.OptValue(kgo.ProducerBatchCompression); fmt.Sprint(codecs) != fmt.Sprint([]kgo.CompressionCodec{kgo.ZstdCompression()}) {
		t.Errorf("compression %v", codecs)
	}
	if _, err := ClientOptions("x", "brotli"); err == nil {
		t.Error("an unknown codec was taken")
	}
}

func TestKeysEscapeAndRefuseWhatConvlogRefuses(t *testing.T) {
	key, err := Conversation{"acme", "employee:42", `oa\overtime`}.Key()
	if err != nil || string(key) != `acme:employee\:42:oa\\overtime` {
		t.Fatalf("%q %v", key, err)
	}
	for _, bad := range []Conversation{{"", "u", "c"}, {"t", "  ", "c"}, {"t", "u", "c\n"}, {"t", "u", string(make([]byte, 257))}} {
		if _, err := bad.Key(); err == nil {
			t.Errorf("%q taken", bad)
		}
	}
}
