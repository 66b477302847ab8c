package client

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestSubjectSent: a subject Tollgate would refuse (more than 512 bytes, or
// not valid UTF-8), or one that could be mistaken for such a digest, is sent
// as "sha256:" and the hex SHA-256 of its bytes, the same way every time;
// any other is sent as it is. Distinct subjects stay distinct.
func TestSubjectSent(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("é", 300) // 600 bytes
	digest := func(s string) string { h := sha256.Sum256([]byte(s)); return "sha256:" + hex.EncodeToString(h[:]) }
	tests := []struct {
		name, in string
		hashed   bool
	}{
		{"short", "account:42", false},
		{"empty", "", false},
		{"512 bytes", strings.Repeat("a", 512), false},
		{"513 bytes", strings.Repeat("a", 513), true},
		{"600 bytes of UTF-8", long, true},
		{"invalid UTF-8", "user\xff", true},
		{"another invalid UTF-8", "user\xfe", true},
		{"a lone continuation byte", "\x80", true},
		{"a subject that looks like a digest", "sha256:" + strings.Repeat("0", 64), true},
		{"control character", "a\x00b", true},
	}
	seen := map[string]string{}
	for _, tt := range tests {
		got := subjectOf(tt.in)
		if tt.hashed {
			if want := digest(tt.in); got != want || subjectOf(tt.in) != got {
				t.Errorf("%s: sent %q, want %q", tt.name, got, want)
			}
		} else if got != tt.in {
			t.Errorf("%s: sent %q, want it as it is", tt.name, got)
		}
		if other, ok := seen[got]; ok {
			t.Errorf("%s and %s are both sent as %q", tt.name, other, got)
		}
		seen[got] = tt.name
	}
}

// TestSubjectSentByEveryCall: Check, Peek, Acquire and Reset send the same
// subject for one too long for Tollgate.
func TestSubjectSentByEveryCall(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("u", 600)
	var mu sync.Mutex
	var sent []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			Subject string
			Items   []struct{ Subject string }
		}
		_ = json.NewDecoder(r.Body).Decode(&body)
		mu.Lock()
		defer mu.Unlock()
		switch {
		case r.URL.Path == "/v1/check":
			sent = append(sent, body.Items[0].Subject)
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, strings.Replace(okDecision, `"policy":"api"`, `"policy":"p"`, 1))
		case r.URL.Path == "/v1/leases":
			sent = append(sent, body.Subject)
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, `{"allowed":true,"lease_id":"ls_0123","expires_at":"2026-12-05T23:01:00Z","in_flight":1,"limit":3,"retry_after_ms":0,"degraded":false}`)
		case r.Method == "DELETE":
			sent = append(sent, strings.TrimPrefix(r.URL.Path, "/v1/policies/p/subjects/"))
			w.WriteHeader(http.StatusNoContent)
		}
	}))
	defer srv.Close()
	c, err := New(srv.URL, "tg_live_x", WithTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := c.Check(ctx, Item{Policy: "p", Subject: long}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Peek(ctx, Item{Policy: "p", Subject: long}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Acquire(ctx, "p", long, time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := c.Reset(ctx, "p", long); err != nil {
		t.Fatal(err)
	}
	want := subjectOf(long)
	if len(sent) != 4 || want == long {
		t.Fatalf("sent %d subjects, digest %q", len(sent), want)
	}
	for i, s := range sent {
		if s != want {
			t.Errorf("call %d sent %q, want %q", i+1, s, want)
		}
	}
}
