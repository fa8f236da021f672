package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// sealerFor is the sealer of the options given: a key given (id and base64), a key fetched from
// convlog's key route, or none (nil: plain records).
func sealerFor(conv Conversation, keyID, keyB64, keyURL, token string) (*Sealer, error) {
	switch {
	case keyID != "" || keyB64 != "":
		if keyID == "" || keyB64 == "" {
			return nil, errors.New("--key-id and --key go together")
		}
	case keyURL != "":
		var err error
		if keyID, keyB64, err = FetchKey(conv, keyURL, token); err != nil {
			return nil, err
		}
	default:
		return nil, nil
	}
	key, err := base64.StdEncoding.DecodeString(keyB64)
	if err != nil {
		return nil, errors.New("the data key is not base64") // never the key itself in a message
	}
	return NewSealer(keyID, key)
}

// FetchKey asks convlog's key route for the conversation's data key:
// POST {api}/v1/users/{u}/conversations/{c}/key with the app's bearer token, the ids
// percent-encoded as path segments. The token names the tenant (no tenant in the path): it must
// be the token of conv.Tenant, or the key is another tenant's conversation's and convlog refuses
// the records (unknown_key). The key is kept in memory only.
func FetchKey(conv Conversation, api, token string) (keyID, keyB64 string, err error) {
	path := fmt.Sprintf("/v1/users/%s/conversations/%s/key", url.PathEscape(conv.User), url.PathEscape(conv.ID))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimRight(api, "/")+path, nil)
	if err != nil {
		return "", "", err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", "", fmt.Errorf("the key route: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return "", "", fmt.Errorf("the key route answered %s", resp.Status)
	}
	var answer struct {
		KeyID     string `json:"key_id"`
		Key       string `json:"key"`
		Algorithm string `json:"algorithm"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&answer); err != nil {
		return "", "", fmt.Errorf("the key route's answer: %w", err)
	}
	if answer.Algorithm != "AES-256-GCM" {
		return "", "", fmt.Errorf("the key route's algorithm is %q, not AES-256-GCM", answer.Algorithm)
	}
	return answer.KeyID, answer.Key, nil
}
