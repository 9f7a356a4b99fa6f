package headers

import (
	"net/http"
	"testing"
)

// realisticInbound is what an OpenAI SDK sends to the gateway, plus the
// session header the gateway reads.
func realisticInbound() http.Header {
	return http.Header{
		"Accept":                      {"application/json"},
		"Accept-Encoding":             {"gzip, deflate"},
		"Authorization":               {"Bearer sk-0123456789abcdef"},
		"Content-Length":              {"2048"},
		"Content-Type":                {"application/json"},
		"User-Agent":                  {"OpenAI/Python 1.99.0"},
		"X-Stainless-Arch":            {"x64"},
		"X-Stainless-Async":           {"false"},
		"X-Stainless-Lang":            {"python"},
		"X-Stainless-Os":              {"Linux"},
		"X-Stainless-Package-Version": {"1.99.0"},
		"X-Stainless-Retry-Count":     {"0"},
		"X-Stainless-Runtime":         {"CPython"},
		"X-Stainless-Runtime-Version": {"3.12.4"},
		"X-Request-Id":                {"0b7f1c9e-5d0a-4c1e-9a53-0e1f2d3c4b5a"},
		"X-Multi-Turn-Session-Id":     {"sess-42"},
		"Traceparent":                 {"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"},
	}
}

func BenchmarkStripInbound(b *testing.B) {
	b.Run("clean", func(b *testing.B) {
		h := realisticInbound()
		b.ReportAllocs()
		for b.Loop() {
			StripInbound(h)
		}
	})
	b.Run("spoofed", func(b *testing.B) {
		// Each iteration puts back three spoofed headers (one stored
		// non-canonically) so there is always something to delete; the
		// re-insertion is part of the measured cost.
		h := realisticInbound()
		last := []string{"cluster-evil"}
		prio := []string{"0"}
		aff := []string{"mt:v1:session:forged"}
		b.ReportAllocs()
		for b.Loop() {
			h["X-Stargate-Last-Cluster-Id"] = last
			h["X-Priority"] = prio
			h["x-cache-affinity-key"] = aff
			StripInbound(h)
		}
		if len(h) != len(realisticInbound()) {
			b.Fatalf("got %d headers; want %d", len(h), len(realisticInbound()))
		}
	})
}

func BenchmarkStripInternalResponse(b *testing.B) {
	h := http.Header{
		"Content-Type":                   {"text/event-stream"},
		"Cache-Control":                  {"no-cache"},
		"Date":                           {"Sat, 22 Aug 2026 10:00:00 GMT"},
		"X-Kv-Cache-Hit":                 {"true"},
		"X-Kv-Cache-Reused-Input-Tokens": {"1024"},
	}
	cluster := []string{"cluster-0001"}
	server := []string{"pylon-7"}
	url := []string{"https://pylon-7.example:8443"}
	b.ReportAllocs()
	for b.Loop() {
		h["X-Stargate-Cluster-Id"] = cluster
		h["X-Inference-Server-Id"] = server
		h["X-Inference-Server-Url"] = url
		StripInternalResponse(h)
	}
}

func BenchmarkGetUint64(b *testing.B) {
	h := http.Header{"X-Input-Tokens": {"1536"}}
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := GetUint64(h, InputTokens); err != nil {
			b.Fatal(err)
		}
	}
}
