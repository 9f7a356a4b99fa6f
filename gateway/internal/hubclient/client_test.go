package hubclient

import (
	"context"
	"errors"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

func TestHeaderHoldsOnlyTheContract(t *testing.T) {
	o := &Outbound{RequestID: "r", Model: "m", InputTokens: 0, TokenEstimate: 3, LastCluster: "c1", AffinityKey: "mt:v1:session:x", PromptPrefix: "1.16.1.AAAAAAAAAAA"}
	h := o.Header()
	var names []string
	for k := range h {
		names = append(names, k)
	}
	slices.Sort(names)
	want := []string{"Accept", "Content-Type", "X-Cache-Affinity-Key", "X-Input-Tokens", "X-Model", "X-Request-Id", "X-Stargate-Last-Cluster-Id", "X-Stargate-Prompt-Prefix", "X-Token-Estimate"}
	if !slices.Equal(names, want) {
		t.Fatalf("headers %v, want %v", names, want)
	}
	if h.Get("X-Input-Tokens") != "0" {
		t.Fatal("x-input-tokens must be sent even when 0")
	}
}

func TestTokenFileReadPerRequest(t *testing.T) {
	tok := filepath.Join(t.TempDir(), "tok")
	_ = os.WriteFile(tok, []byte("one\n"), 0o600)
	u, _ := url.Parse("http://127.0.0.1:1")
	c := New(u, time.Second, tok)
	req, err := c.NewRequest(context.Background(), c.Pick(nil), "POST", "/v1/chat/completions", (&Outbound{}).Header(), []byte("{}"))
	if err != nil || req.Header.Get("Authorization") != "Bearer one" || req.URL.String() != "http://127.0.0.1:1/v1/chat/completions" {
		t.Fatalf("%v %v %v", err, req.Header, req.URL)
	}
	_ = os.WriteFile(tok, []byte("two"), 0o600)
	req, _ = c.NewRequest(context.Background(), c.Pick(nil), "POST", "/x", (&Outbound{}).Header(), nil)
	if req.Header.Get("Authorization") != "Bearer two" {
		t.Fatal("rotated token not picked up")
	}
	_ = os.Remove(tok)
	var te *ErrToken
	if _, err := c.NewRequest(context.Background(), c.Pick(nil), "POST", "/x", (&Outbound{}).Header(), nil); !errors.As(err, &te) {
		t.Fatalf("missing token file: %v", err)
	}
}

// TestHeaderCarriesTheDeadline: a deadline goes out as
// x-stargate-deadline-ms with the retry budget beside it, and a zero one
// sends neither.
func TestHeaderCarriesTheDeadline(t *testing.T) {
	h := (&Outbound{RequestID: "r", Model: "m", DeadlineMs: 1999, RetryBudgetMs: 1999}).Header()
	if got := h.Get("X-Stargate-Deadline-Ms"); got != "1999" {
		t.Errorf("x-stargate-deadline-ms %q; want 1999", got)
	}
	if got := h.Get("X-Stargate-Max-Wait-Ms"); got != "1999" {
		t.Errorf("x-stargate-max-wait-ms %q; want 1999", got)
	}
	h = (&Outbound{RequestID: "r", Model: "m"}).Header()
	if _, ok := h["X-Stargate-Deadline-Ms"]; ok {
		t.Error("x-stargate-deadline-ms sent without a deadline")
	}
	if _, ok := h["X-Stargate-Max-Wait-Ms"]; ok {
		t.Error("x-stargate-max-wait-ms sent without a deadline")
	}
}
