package main

// The sealer against schemas/vectors/sealed.json: given each plain record, the test-only key
// and the record's fixed nonce, it writes the vector's sealed record byte for byte. The key and
// nonces are public test values; a real seal draws a fresh random nonce.

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"encoding/base64"
	"encoding/hex"
	"strings"
	"testing"
	"time"

	"github.com/twmb/avro"
)

type sealedVectors struct {
	Fingerprint string `json:"fingerprint"`
	Key         struct {
		ID     string `json:"key_id"`
		Base64 string `json:"key_base64"`
	} `json:"test_only_key"`
	Records []struct {
		Name           string `json:"name"`
		Key            string `json:"key"`
		EventID        string `json:"event_id"`
		BodyType       string `json:"body_type"`
		NonceHex       string `json:"nonce_hex"`
		PlainValueHex  string `json:"plain_value_hex"`
		PlaintextHex   string `json:"plaintext_hex"`
		AssociatedData string `json:"associated_data_hex"`
		CiphertextHex  string `json:"ciphertext_hex"`
		ValueHex       string `json:"value_hex"`
	} `json:"records"`
}

func vectorSealer(t *testing.T, v sealedVectors) *Sealer {
	t.Helper()
	key, err := base64.StdEncoding.DecodeString(v.Key.Base64)
	if err != nil {
		t.Fatal(err)
	}
	s, err := NewSealer(v.Key.ID, key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestTheSealerWritesTheSealedVectorsByteForByte(t *testing.T) {
	var v sealedVectors
	load(t, "sealed.json", &v)
	if v.Fingerprint != hex.EncodeToString(Fingerprint()) {
		t.Fatalf("sealed.json is of fingerprint %s, this example writes %x", v.Fingerprint, Fingerprint())
	}
	sealer := vectorSealer(t, v)
	if len(v.Records) == 0 {
		t.Fatal("no records in sealed.json")
	}
	for _, want := range v.Records {
		var plain any // every union tagged with its branch, so that it encodes back to the same bytes
		if _, err := eventSchema.DecodeSingleObject(unhex(t, want.PlainValueHex), &plain, avro.TaggedUnions()); err != nil {
			t.Fatalf("%s: %v", want.Name, err)
		}
		nonce := unhex(t, want.NonceHex) // TEST ONLY: the vector's fixed nonce
		sealer.Nonce = func() ([]byte, error) { return nonce, nil }
		sealed, err := sealer.Seal(plain.(map[string]any))
		if err != nil {
			t.Fatalf("%s: %v", want.Name, err)
		}
		value, err := Encode(sealed)
		if err != nil {
			t.Fatalf("%s: %v", want.Name, err)
		}
		if got := hex.EncodeToString(value); got != want.ValueHex {
			t.Errorf("%s: sealed value\n got %s\nwant %s", want.Name, got, want.ValueHex)
		}
		aad := AssociatedData([]byte(want.Key), want.EventID, want.BodyType, v.Key.ID)
		if got := hex.EncodeToString(aad); got != want.AssociatedData {
			t.Errorf("%s: associated data %q", want.Name, aad)
		}
	}
}

// Every step of the envelope on its own: the plaintext opens from the vector's ciphertext
// with the associated data, and fails to with any other (a record moved elsewhere).
func TestTheVectorsCiphertextsOpenOnlyWithTheirAssociatedData(t *testing.T) {
	var v sealedVectors
	load(t, "sealed.json", &v)
	key, _ := base64.StdEncoding.DecodeString(v.Key.Base64)
	block, _ := aes.NewCipher(key)
	aead, _ := cipher.NewGCM(block)
	for _, r := range v.Records {
		nonce, ciphertext, aad := unhex(t, r.NonceHex), unhex(t, r.CiphertextHex), unhex(t, r.AssociatedData)
		plaintext, err := aead.Open(nil, nonce, ciphertext, aad)
		if err != nil || !bytes.Equal(plaintext, unhex(t, r.PlaintextHex)) {
			t.Errorf("%s: %v", r.Name, err)
		}
		moved := AssociatedData([]byte(r.Key), r.EventID+"-other", r.BodyType, v.Key.ID)
		if _, err := aead.Open(nil, nonce, ciphertext, moved); err == nil {
			t.Errorf("%s opened under another event id", r.Name)
		}
	}
}

// The example's own turn, sealed: no content of it in clear, every sealable body sealed, the
// bodies that are never sealed left as they are, and a fresh random nonce per record.
func TestTheTurnSealedCarriesNoContentInClear(t *testing.T) {
	var v sealedVectors
	load(t, "sealed.json", &v)
	sealer := vectorSealer(t, v)
	conv := Conversation{"acme", "employee-42", "c-1"}
	nonces := map[string]bool{}
	for _, e := range Turn("go-example", func(int) string { return NewEventID() }, func(int) time.Time { return time.Now() }) {
		sealed, err := sealer.Seal(conv.Record(e))
		if err != nil {
			t.Fatal(err)
		}
		value, err := Encode(sealed)
		if err != nil {
			t.Fatal(err)
		}
		for _, text := range []string{"Overtime request", "overtime request", "knowledge base", "Attendance", "Holiday", "EqQBCgIYAhIM"} {
			if strings.Contains(string(value), text) {
				t.Errorf("%s: %q in clear", e.Body.Type, text)
			}
		}
		_, fields, _ := bodyOf(sealed)
		seal, ok := fields["sealed"].(map[string]any)
		if !ok {
			t.Fatalf("%s not sealed", e.Body.Type)
		}
		nonce := string(seal["nonce"].([]byte))
		if nonces[nonce] {
			t.Error("a nonce repeated")
		}
		nonces[nonce] = true
	}
	erased := Event{"e", time.Now(), "p", Body{"ConversationErased", map[string]any{"reason": "user request"}}}
	same, err := sealer.Seal(conv.Record(erased))
	if err != nil {
		t.Fatal(err)
	}
	if _, fields, _ := bodyOf(same); fields["sealed"] != nil {
		t.Error("an erase was sealed")
	}
}

func TestTheSealerRefusesABadKey(t *testing.T) {
	if _, err := NewSealer("ck_"+strings.Repeat("0", 32), make([]byte, 16)); err == nil {
		t.Error("a 16-byte key taken")
	}
	if _, err := NewSealer("key-1", make([]byte, 32)); err == nil {
		t.Error("a key id that is not ck_ and 32 hex digits taken")
	}
}
