// Command go-producer appends one conversation turn to convlog's topic the way
// docs/producers.md says, with nothing but franz-go and twmb/avro.
//
//	go-producer --bootstrap HOST:PORT --topic T --tenant A --user U --conversation C
//	            [--producer NAME] [--compression zstd] [--event-id-prefix P] [--occurred-at MICROS]
//	            [--key-id ck_... --key BASE64 | --key-url API_BASE --token TOKEN]
//	go-producer --print-fingerprint
//
// With a data key (--key-id and --key, or CONVLOG_KEY_ID and CONVLOG_KEY; or fetched from
// convlog's key route with --key-url and --token, or CONVLOG_API_URL and CONVLOG_TOKEN) it seals
// every body that carries content (docs/producers.md, Sealed records): erasable records.
// Without one it writes plain records, which an erase cannot shred.
//
// It prints one JSON line per acknowledged event: its type, event id, key, partition and offset
// (and sealed_by, the key id, when sealed).
package main

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "go-producer:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("go-producer", flag.ContinueOnError)
	bootstrap := fs.String("bootstrap", "", "Kafka bootstrap servers, comma-separated")
	topic := fs.String("topic", "convlog.events", "convlog's topic (CONVLOG_TOPIC)")
	tenant := fs.String("tenant", "", "tenant id")
	user := fs.String("user", "", "user id")
	conversation := fs.String("conversation", "", "conversation id")
	producer := fs.String("producer", "go-example", "the envelope's producer")
	compression := fs.String("compression", "zstd", "none, gzip, snappy, lz4 or zstd")
	prefix := fs.String("event-id-prefix", "", "event ids PREFIX-1, PREFIX-2, ... (default: random UUIDs)")
	occurredAt := fs.Int64("occurred-at", 0, "the first event's time in microseconds since the epoch, the others one second apart (default: now)")
	keyID := fs.String("key-id", os.Getenv("CONVLOG_KEY_ID"), "seal under this data key id (ck_...)")
	keyB64 := fs.String("key", os.Getenv("CONVLOG_KEY"), "the data key, base64 of 32 bytes (never logged)")
	keyURL := fs.String("key-url", os.Getenv("CONVLOG_API_URL"), "convlog's API base URL: fetch the data key from its key route")
	token := fs.String("token", os.Getenv("CONVLOG_TOKEN"), "the app token for --key-url")
	printFingerprint := fs.Bool("print-fingerprint", false, "print the schema's fingerprint (wire bytes) and exit")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *printFingerprint {
		fmt.Println(hex.EncodeToString(Fingerprint()))
		return nil
	}
	if *bootstrap == "" || *tenant == "" || *user == "" || *conversation == "" {
		return fmt.Errorf("--bootstrap, --tenant, --user and --conversation are required")
	}
	conv := Conversation{Tenant: *tenant, User: *user, ID: *conversation}
	key, err := conv.Key()
	if err != nil {
		return err
	}
	newID := func(int) string { return NewEventID() }
	if *prefix != "" {
		newID = func(i int) string { return fmt.Sprintf("%s-%d", *prefix, i+1) }
	}
	at := func(int) time.Time { return time.Now() }
	if *occurredAt != 0 {
		at = func(i int) time.Time { return time.UnixMicro(*occurredAt + int64(i)*1_000_000) }
	}
	events := Turn(*producer, newID, at)
	sealer, err := sealerFor(conv, *keyID, *keyB64, *keyURL, *token)
	if err != nil {
		return err
	}

	records := make([]*kgo.Record, len(events))
	for i, e := range events {
		record := conv.Record(e)
		if sealer != nil {
			if record, err = sealer.Seal(record); err != nil {
				return fmt.Errorf("sealing event %d: %w", i+1, err)
			}
		}
		value, err := Encode(record)
		if err != nil {
			return fmt.Errorf("encoding event %d: %w", i+1, err)
		}
		// No partition given: the partitioner hashes the key (murmur2), as convlog does.
		records[i] = &kgo.Record{Topic: *topic, Key: key, Value: value,
			Headers: []kgo.RecordHeader{{Key: EventTypeHeader, Value: []byte(e.Body.Type)}}}
	}

	opts, err := ClientOptions(*bootstrap, *compression)
	if err != nil {
		return err
	}
	client, err := kgo.NewClient(opts...)
	if err != nil {
		return err
	}
	defer client.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// One key, one partition: with idempotence the events land in this order, each once.
	results := client.ProduceSync(ctx, records...)
	if err := results.FirstErr(); err != nil {
		return fmt.Errorf("producing: %w", err)
	}
	out := json.NewEncoder(os.Stdout)
	for i, r := range results {
		line := map[string]any{"type": events[i].Body.Type, "event_id": events[i].ID, "key": string(r.Record.Key),
			"partition": r.Record.Partition, "offset": r.Record.Offset}
		if _, sealable := emptied[events[i].Body.Type]; sealable && sealer != nil {
			line["sealed_by"] = sealer.KeyID
		}
		if err := out.Encode(line); err != nil {
			return err
		}
	}
	return nil
}
