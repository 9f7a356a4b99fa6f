package openai

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestWriteErrorShape(t *testing.T) {
	rec := httptest.NewRecorder()
	WriteError(rec, RateLimited("rate_limit_exceeded", "slow down", 2))
	if rec.Code != http.StatusTooManyRequests || rec.Header().Get("Retry-After") != "2" {
		t.Fatalf("status %d retry-after %q", rec.Code, rec.Header().Get("Retry-After"))
	}
	var got struct {
		Error map[string]any `json:"error"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"message": "slow down", "type": "rate_limit_error", "code": "rate_limit_exceeded"}
	for k, v := range want {
		if got.Error[k] != v {
			t.Errorf("error.%s = %v, want %v", k, got.Error[k], v)
		}
	}
}

func TestReadBodyLimit(t *testing.T) {
	req := httptest.NewRequest("POST", "/", strings.NewReader(strings.Repeat("x", 11)))
	_, e := ReadBody(httptest.NewRecorder(), req, 10)
	if e == nil || e.Status != http.StatusRequestEntityTooLarge {
		t.Fatalf("got %v, want 413", e)
	}
	req = httptest.NewRequest("POST", "/", strings.NewReader("0123456789"))
	b, e := ReadBody(httptest.NewRecorder(), req, 10)
	if e != nil || string(b) != "0123456789" {
		t.Fatalf("got %q, %v", b, e)
	}
}

// TestReadBodyDeclaredLength: a body of declared length is read into one
// buffer of exactly that length, a declared body that ends early is a
// 400, and an undeclared one is still held to the limit.
func TestReadBodyDeclaredLength(t *testing.T) {
	body := strings.Repeat("x", 5000)
	req := httptest.NewRequest("POST", "/", strings.NewReader(body))
	b, e := ReadBody(httptest.NewRecorder(), req, 1<<20)
	if e != nil || string(b) != body || cap(b) != len(body) {
		t.Fatalf("got %d bytes (cap %d), %v; want %d in a buffer of that size", len(b), cap(b), e, len(body))
	}
	req = httptest.NewRequest("POST", "/", strings.NewReader("short"))
	req.ContentLength = 10
	if _, e := ReadBody(httptest.NewRecorder(), req, 1<<20); e == nil || e.Status != http.StatusBadRequest {
		t.Fatalf("a body shorter than declared: got %v, want 400", e)
	}
	req = httptest.NewRequest("POST", "/", strings.NewReader(strings.Repeat("x", 11)))
	req.ContentLength = -1
	if _, e := ReadBody(httptest.NewRecorder(), req, 10); e == nil || e.Status != http.StatusRequestEntityTooLarge {
		t.Fatalf("an undeclared body over the limit: got %v, want 413", e)
	}
}

func TestDecodeJSONErrors(t *testing.T) {
	var v struct {
		Model  string `json:"model"`
		Stream bool   `json:"stream"`
	}
	cases := []struct {
		body, code, param string
	}{
		{``, "invalid_json", ""},
		{`{"model":`, "invalid_json", ""},
		{`{"model": 5}`, "invalid_type", "model"},
		{`{"stream": "yes"}`, "invalid_type", "stream"},
		{`[1,2]`, "invalid_type", ""},
	}
	for _, c := range cases {
		e := DecodeJSON([]byte(c.body), &v)
		if e == nil || e.Status != 400 || e.Code != c.code || e.Param != c.param {
			t.Errorf("DecodeJSON(%q) = %+v, want 400 %s param %q", c.body, e, c.code, c.param)
		}
	}
	if e := DecodeJSON([]byte(`{"model":"m","stream":true,"extra":1}`), &v); e != nil || v.Model != "m" || !v.Stream {
		t.Fatalf("valid body: %v %+v", e, v)
	}
}
