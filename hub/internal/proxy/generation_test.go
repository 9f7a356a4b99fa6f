package proxy

import (
	"context"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stargate-router/stargate/hub/internal/lb"
	"github.com/stargate-router/stargate/hub/internal/routing"
	"github.com/stargate-router/stargate/pkg/clock"
	"github.com/stargate-router/stargate/pkg/headers"
)

// countingResolver counts the calls a generation's resolver gets, so a test
// can prove a request never consulted a generation it did not capture.
type countingResolver struct {
	lb.Resolver
	resolves, known atomic.Int64
}

func (c *countingResolver) Resolve(t routing.Target, requested string) (lb.Route, *lb.Rejection) {
	c.resolves.Add(1)
	return c.Resolver.Resolve(t, requested)
}

func (c *countingResolver) KnownMethod(method string) bool {
	c.known.Add(1)
	return c.Resolver.KnownMethod(method)
}

// A request is routed by the generation it found on arrival: one waiting
// for a backend of a model its generation names keeps waiting (and is
// answered with that generation's hash) after a generation that does not
// name the model is swapped in, which the swap's own requests see at once
// (a 404); and the new generation's resolver serves only requests that
// arrive after the swap.
func TestGenerationCapturedAtArrival(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(t0)
	h := newHarness(t, nil, withClock(clk))
	base := h.p.gen.Load().Resolver
	oldRes, newRes := &countingResolver{Resolver: base}, &countingResolver{Resolver: base}
	h.p.SetGeneration(Generation{Resolver: oldRes, Hash: "0123456789ab",
		ConfiguredModel: func(m string) bool { return m == "configured" }})

	hdr := validHeaders()
	hdr.Set(headers.Model, "configured")
	hdr.Set(headers.MaxWaitMs, "1000")
	waiting := h.sendAsync(context.Background(), hdr)
	waitTimers(t, clk, 1) // it is waiting for a backend, under the old generation

	h.p.SetGeneration(Generation{Resolver: newRes, Hash: "ba9876543210"})
	got := wait(t, h.sendAsync(context.Background(), hdr), "the request after the swap")
	if got.status != http.StatusNotFound || got.header.Get(headers.StargateLBConfigHash) != "ba9876543210" {
		t.Fatalf("after the swap: %d hash %q, want the new generation's 404", got.status, got.header.Get(headers.StargateLBConfigHash))
	}

	clk.Advance(time.Second)
	got = wait(t, waiting, "the waiting request")
	if got.status != http.StatusServiceUnavailable || got.header.Get(headers.StargateErrorCode) != ErrorCodeModelUnavailable {
		t.Fatalf("waiting request: %+v, want 503 %s", got, ErrorCodeModelUnavailable)
	}
	if hash := got.header.Get(headers.StargateLBConfigHash); hash != "0123456789ab" {
		t.Errorf("waiting request answered under hash %q, want the old generation's", hash)
	}
	h.inflight.Wait()
	if n := oldRes.resolves.Load(); n != 1 {
		t.Errorf("old resolver: %d resolves, want 1 (the waiting request's)", n)
	}
	if n := newRes.resolves.Load(); n != 1 {
		t.Errorf("new resolver: %d resolves, want 1 (the request after the swap)", n)
	}

	// A relayed answer carries the hash too, and a pylon cannot forge it.
	h.backends["a1"].handle(answer(http.StatusOK, headers.StargateLBConfigHash, "forged"))
	h.backends["a2"].handle(answer(http.StatusOK, headers.StargateLBConfigHash, "forged"))
	resp, _ := h.do(validHeaders(), chatBody)
	if resp.StatusCode != http.StatusOK || resp.Header.Values(headers.StargateLBConfigHash)[0] != "ba9876543210" ||
		len(resp.Header.Values(headers.StargateLBConfigHash)) != 1 {
		t.Errorf("relayed answer: %d hash %q, want 200 with the new generation's only", resp.StatusCode,
			resp.Header.Values(headers.StargateLBConfigHash))
	}
}

// A generation without a hash (a hub without --lb-config-path) sends no
// header.
func TestGenerationWithoutHashSendsNoHeader(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	resp, _ := h.do(validHeaders(), chatBody)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d", resp.StatusCode)
	}
	if v, ok := resp.Header[http.CanonicalHeaderKey(headers.StargateLBConfigHash)]; ok {
		t.Errorf("header sent without a hash: %q", v)
	}
}
