package main

// Sealed records (docs/producers.md, "Sealed records (schema v5)"): a body's content is
// encrypted under its conversation's data key before the record is written, so that an erase,
// which destroys the key, shreds every copy of it. The Go standard library only:
// crypto/aes + crypto/cipher (AES-256-GCM) and crypto/rand for the nonces.

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"errors"
	"fmt"
	"regexp"

	"github.com/twmb/avro"
)

const (
	sealPurpose = "convlog-sealed-v1" // the first part of the associated data
	nonceSize   = 12
	keySize     = 32
)

var keyIDPattern = regexp.MustCompile(`^ck_[0-9a-f]{32}$`)

// emptied are the content fields of each sealable body as the clear record carries them:
// empty (null, [] or {}), the content itself being in the ciphertext. The other fields stay
// clear and equal to the sealed body's. The other bodies (MessageRedacted,
// ConversationCleared, ConversationErased) carry no content and are never sealed.
var emptied = map[string]map[string]func() any{
	"ConversationStarted": {"title": null, "metadata": emptyMap},
	"MessageAppended": {
		"content": null, "name": null, "tool_calls": emptyArray, "reasoning_content": null,
		"metadata": emptyMap, "blocks": emptyArray,
	},
	"SummaryRecorded": {"text": func() any { return "" }},
}

func null() any       { return nil }
func emptyMap() any   { return map[string]any{} }
func emptyArray() any { return []any{} }

// bodySchemas are the body records of the embedded schema, each on its own: the plaintext is
// one body record's Avro binary, schemaless (no C3 01, no fingerprint, no union index).
var bodySchemas = func() map[string]*avro.Schema {
	out := map[string]*avro.Schema{}
	for _, f := range eventSchema.Root().Fields {
		if f.Name != "body" {
			continue
		}
		for _, b := range f.Type.Branches {
			s, err := b.Schema()
			if err != nil {
				panic(fmt.Sprintf("body schema %s: %v", b.Name, err))
			}
			out[b.Name] = s
		}
	}
	return out
}()

// Sealer seals the bodies of one data key (from convlog's key route: a key id, 32 bytes).
type Sealer struct {
	KeyID string
	aead  cipher.AEAD
	// Nonce gives the 12 bytes of each seal: fresh random bytes (crypto/rand), never repeated
	// under a key. Only a test against the golden vector's fixed nonces replaces it.
	Nonce func() ([]byte, error)
}

// NewSealer checks the key id and the key's length and builds AES-256-GCM over the key.
func NewSealer(keyID string, key []byte) (*Sealer, error) {
	if !keyIDPattern.MatchString(keyID) {
		return nil, fmt.Errorf("key id %q is not ck_ and 32 hex digits", keyID)
	}
	if len(key) != keySize {
		return nil, fmt.Errorf("the data key is %d bytes, not %d", len(key), keySize)
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	aead, err := cipher.NewGCM(block) // 12-byte nonce, 16-byte tag appended by Seal
	if err != nil {
		return nil, err
	}
	return &Sealer{KeyID: keyID, aead: aead, Nonce: randomNonce}, nil
}

func randomNonce() ([]byte, error) {
	nonce := make([]byte, nonceSize)
	_, err := rand.Read(nonce)
	return nonce, err
}

// AssociatedData binds a ciphertext to its record: the UTF-8 of convlog-sealed-v1, the
// conversation key as on the log (escaped), the event id, the body's short type name and the
// key id, joined by single NUL bytes. A ciphertext moved elsewhere fails authentication.
func AssociatedData(conversationKey []byte, eventID, bodyType, keyID string) []byte {
	parts := [][]byte{[]byte(sealPurpose), conversationKey, []byte(eventID), []byte(bodyType), []byte(keyID)}
	return bytes.Join(parts, []byte{0})
}

// Seal turns an event's Avro record (Conversation.Record's, or one decoded by twmb/avro) into
// its sealed record: the same envelope, the body's content fields emptied and "sealed" set to
// {key_id, nonce, ciphertext}. A body of a type that is never sealed is returned as it is.
func (s *Sealer) Seal(record map[string]any) (map[string]any, error) {
	bodyType, fields, err := bodyOf(record)
	if err != nil {
		return nil, err
	}
	content, sealable := emptied[bodyType]
	if !sealable {
		return record, nil
	}
	if sealed, set := fields["sealed"]; set && sealed != nil {
		return nil, errors.New("the body is sealed already")
	}
	plaintext, err := bodySchemas[bodyType].Encode(fields) // "sealed" left out: its default, null
	if err != nil {
		return nil, fmt.Errorf("the plaintext of %s: %w", bodyType, err)
	}
	key, err := conversationOf(record).Key()
	if err != nil {
		return nil, err
	}
	nonce, err := s.Nonce()
	if err != nil || len(nonce) != nonceSize {
		return nil, fmt.Errorf("a %d-byte nonce: %v", nonceSize, err)
	}
	eventID, _ := record["event_id"].(string)
	ciphertext := s.aead.Seal(nil, nonce, plaintext, AssociatedData(key, eventID, bodyType, s.KeyID))

	clear := make(map[string]any, len(fields)+1)
	for k, v := range fields {
		clear[k] = v
	}
	for k, empty := range content {
		clear[k] = empty()
	}
	clear["sealed"] = map[string]any{"key_id": s.KeyID, "nonce": nonce, "ciphertext": ciphertext}
	out := make(map[string]any, len(record))
	for k, v := range record {
		out[k] = v
	}
	out["body"] = branch(bodyType, clear)
	return out, nil
}

func bodyOf(record map[string]any) (string, map[string]any, error) {
	union, ok := record["body"].(map[string]any)
	if !ok || len(union) != 1 {
		return "", nil, errors.New(`the record's body is not {"convlog.events.Type": {...}}`)
	}
	for name, v := range union {
		fields, ok := v.(map[string]any)
		if !ok || len(name) <= len(namespace) || name[:len(namespace)] != namespace {
			return "", nil, fmt.Errorf("the body branch %q is not a convlog.events record", name)
		}
		return name[len(namespace):], fields, nil
	}
	panic("unreachable")
}

func conversationOf(record map[string]any) Conversation {
	s := func(k string) string { v, _ := record[k].(string); return v }
	return Conversation{Tenant: s("tenant_id"), User: s("user_id"), ID: s("conversation_id")}
}
