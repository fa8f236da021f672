package main

import (
	"crypto/rand"
	_ "embed"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/twmb/avro"
)

// The schema this producer writes: schemas/event.v5.avsc of the convlog repository, copied
// unchanged (a changed name, field, type or symbol is another fingerprint, which convlog
// dead-letters as unknown_schema; the Python tests check the copy is byte for byte the file).
//
//go:embed event.v5.avsc
var schemaText string

var eventSchema = avro.MustParse(schemaText)

const (
	namespace = "convlog.events."
	// EventTypeHeader is optional; if sent, it carries the body's short record name.
	EventTypeHeader  = "convlog.event_type"
	maxKeyPartLength = 256 // code points, as convlog counts them
)

// Conversation names who a conversation belongs to. The envelope carries the ids as they
// are; the record key escapes them.
type Conversation struct {
	Tenant, User, ID string
}

// Key is the record key: tenant:user:conversation in UTF-8, with "\" written "\\" and ":"
// written "\:" inside each id.
func (c Conversation) Key() ([]byte, error) {
	parts := make([]string, 0, 3)
	for _, p := range []struct{ what, id string }{{"tenant", c.Tenant}, {"user", c.User}, {"conversation", c.ID}} {
		if err := checkID(p.id); err != nil {
			return nil, fmt.Errorf("%s id: %w", p.what, err)
		}
		parts = append(parts, strings.ReplaceAll(strings.ReplaceAll(p.id, `\`, `\\`), ":", `\:`))
	}
	return []byte(strings.Join(parts, ":")), nil
}

func checkID(id string) error {
	if !utf8.ValidString(id) {
		return errors.New("not valid UTF-8")
	}
	if strings.TrimSpace(id) == "" || utf8.RuneCountInString(id) > maxKeyPartLength {
		return fmt.Errorf("must be 1 to %d characters, not only whitespace", maxKeyPartLength)
	}
	if strings.ContainsFunc(id, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
		return errors.New("must not contain control characters")
	}
	return nil
}

// Body is one event's body: its record's short name and its fields (those left out take
// the schema's defaults: null, [] or {}).
type Body struct {
	Type   string
	Fields map[string]any
}

// Event is one event as it goes on the log.
type Event struct {
	ID         string
	OccurredAt time.Time // written as microseconds since the epoch, UTC (timestamp-micros)
	Producer   string
	Body       Body
}

// Record is the event's Avro record: a union of several named types (the body, a block, a
// content part) is written as a one-key map naming the branch, {"convlog.events.X": {...}}.
func (c Conversation) Record(e Event) map[string]any {
	return map[string]any{
		"event_id":        e.ID,
		"tenant_id":       c.Tenant,
		"user_id":         c.User,
		"conversation_id": c.ID,
		"occurred_at":     e.OccurredAt,
		"producer":        e.Producer,
		"body":            map[string]any{namespace + e.Body.Type: e.Body.Fields},
	}
}

// Encode is Avro single-object encoding: C3 01, the 8-byte little-endian CRC-64-AVRO
// fingerprint of the schema's canonical form, then the Avro binary body. twmb/avro writes
// the header itself (never Confluent's 00 + schema id framing, which convlog refuses).
func Encode(record map[string]any) ([]byte, error) {
	return eventSchema.AppendSingleObject(nil, record)
}

// Fingerprint is the 8 bytes that follow C3 01 in every record this producer writes.
func Fingerprint() []byte {
	h := avro.NewRabin()
	h.Write(eventSchema.Canonical())
	// Little-endian, as single-object encoding writes it. Not h.Sum(nil): a hash.Hash64's Sum
	// is big-endian, the byte-reversed (Java Long.toHexString) form — hamba/avro's CRC64Avro trap.
	return binary.LittleEndian.AppendUint64(nil, h.Sum64())
}

func branch(name string, fields map[string]any) map[string]any {
	return map[string]any{namespace + name: fields}
}

func message(role string, fields map[string]any) Body {
	all := map[string]any{"message_id": "", "role": role} // the message id is the event id: Turn sets it
	for k, v := range fields {
		all[k] = v
	}
	return Body{"MessageAppended", all}
}

// TurnBodies is the turn this example appends: the conversation's start, a question, an
// assistant tool call and its result, the answer, a second question and a native answer
// (Anthropic format) with reasoning blocks — schemas/vectors/events.json, event for event.
func TurnBodies() []Body {
	const model = "gpt-4o"
	return []Body{
		{"ConversationStarted", map[string]any{"title": "Overtime request", "metadata": map[string]string{"channel": "web"}}},
		message("user", map[string]any{"content": "How do I file an overtime request in the OA system?"}),
		message("assistant", map[string]any{
			"tool_calls": []any{map[string]any{
				"id": "call_1", "name": "search_kb", "arguments": `{"q": "overtime request"}`}},
			"reasoning_content": "The knowledge base has the procedure.",
			"model":             model,
			"usage":             map[string]any{"prompt_tokens": int64(120), "completion_tokens": int64(18)},
			"finish_reason":     "tool_calls",
		}),
		message("tool", map[string]any{
			"content": `{"hits": 3, "top": "OA > Attendance > Overtime"}`, "tool_call_id": "call_1"}),
		message("assistant", map[string]any{
			"content":       "Open OA, then Attendance > Overtime, and submit the form.",
			"model":         model,
			"usage":         map[string]any{"prompt_tokens": int64(160), "completion_tokens": int64(24), "cached_tokens": int64(64)},
			"finish_reason": "stop",
			"metadata":      map[string]string{"app": "oa-assistant"},
		}),
		message("user", map[string]any{"content": "And on a public holiday?"}),
		// A native message: only the blocks (content null, tool_calls [], reasoning_content
		// null); convlog derives the Chat Completions view from them.
		message("assistant", map[string]any{
			"blocks": []any{
				branch("ReasoningBlock", map[string]any{
					"text": "Holiday overtime has a form of its own.", "signature": "EqQBCgIYAhIM"}),
				branch("ReasoningBlock", map[string]any{"redacted_data": "RXJhc2VkIHJlYXNvbmluZw=="}),
				branch("TextBlock", map[string]any{"text": "Use Attendance > Holiday overtime instead: it is paid double."}),
			},
			"provider": "anthropic",
			"api":      "anthropic",
			"model":    "claude-sonnet-4-5",
			"usage": map[string]any{"prompt_tokens": int64(410), "completion_tokens": int64(52),
				"cached_tokens": int64(256), "cache_write_tokens": int64(90)},
			"finish_reason": "stop",
		}),
	}
}

// Turn gives each body an event id (newID: the idempotency key, reused on a retry; a
// message's id is its event's) and a time (at: the i-th event's, from 0).
func Turn(producer string, newID func(i int) string, at func(i int) time.Time) []Event {
	bodies := TurnBodies()
	events := make([]Event, len(bodies))
	for i, b := range bodies {
		id := newID(i)
		if _, ok := b.Fields["message_id"]; ok {
			b.Fields["message_id"] = id
		}
		events[i] = Event{ID: id, OccurredAt: at(i), Producer: producer, Body: b}
	}
	return events
}

// NewEventID is a random UUID (version 4).
func NewEventID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:])
}
