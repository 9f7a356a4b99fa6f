package routeview

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

func TestClient(t *testing.T) {
	routing, state := fixture(t, "routing.json"), fixture(t, "state.json")
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/debug/routing":
			_, _ = w.Write(routing)
		case "/debug/state":
			_, _ = w.Write(state)
		default:
			w.WriteHeader(http.StatusNotFound)
			_, _ = w.Write([]byte(`{"error":{"message":"no route for GET ` + r.URL.Path + `","type":"not_found_error","code":"not_found"}}`))
		}
	}))
	defer srv.Close()
	ctx := context.Background()
	c := Client{Admin: srv.URL, HTTP: srv.Client()}
	clusters, err := c.Clusters(ctx)
	if err != nil || len(clusters) != 4 {
		t.Fatalf("Clusters: %v, %v", clusters, err)
	}
	v, err := WaitReady(ctx, c.View, clusters, time.Second)
	if err != nil || len(v.EscapedAndFollowed()) != 2 {
		t.Fatalf("WaitReady: %v", err)
	}

	// A hub without the routing page.
	c.Admin = srv.URL + "/old"
	_, err = c.View(ctx)
	var se *StatusError
	if !errors.As(err, &se) || se.Code != http.StatusNotFound ||
		!strings.Contains(err.Error(), `expected 200, got 404: {"error":{"message":"no route for GET /old/debug/routing"`) {
		t.Fatalf("got %v, want the 404 and its body", err)
	}
}

// notReady is the fixture with its followed turns turned into stays.
func notReady(t *testing.T) *View {
	t.Helper()
	v, err := DecodeView(fixture(t, "routing.json"))
	if err != nil {
		t.Fatal(err)
	}
	for i := range v.Sessions.Items {
		for j := range v.Sessions.Items[i].Turns {
			if v.Sessions.Items[i].Turns[j].Flow == FlowFollowed {
				v.Sessions.Items[i].Turns[j].Flow = "stay"
			}
		}
	}
	return v
}

func TestWaitReadyPolls(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ready, err := DecodeView(fixture(t, "routing.json"))
		if err != nil {
			t.Fatal(err)
		}
		// A failed fetch, a view without the session, then the full view.
		answers := []func() (*View, error){
			func() (*View, error) { return nil, errors.New("connection refused") },
			func() (*View, error) { return notReady(t), nil },
			func() (*View, error) { return ready, nil },
		}
		calls := 0
		fetch := func(context.Context) (*View, error) {
			a := answers[min(calls, len(answers)-1)]
			calls++
			return a()
		}
		start := time.Now()
		v, err := WaitReady(t.Context(), fetch, demoClusters, 500*time.Millisecond)
		if err != nil || v != ready {
			t.Fatalf("got %v, %v; want the full view", v, err)
		}
		if calls != 3 || time.Since(start) != time.Second {
			t.Errorf("%d polls in %v, want 3 in 1s", calls, time.Since(start))
		}
	})
}

func TestWaitReadyStopsOnFinalAnswers(t *testing.T) {
	for _, code := range []int{http.StatusNotFound, http.StatusUnauthorized, http.StatusForbidden} {
		synctest.Test(t, func(t *testing.T) {
			calls := 0
			fetch := func(context.Context) (*View, error) {
				calls++
				return nil, &StatusError{URL: "http://hub/debug/routing", Code: code}
			}
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			start := time.Now()
			_, err := WaitReady(ctx, fetch, demoClusters, 500*time.Millisecond)
			if calls != 1 || time.Since(start) != 0 || !strings.HasPrefix(err.Error(), "GET http://hub/debug/routing: expected 200") {
				t.Errorf("HTTP %d: %d polls in %v, %v; want the answer at once", code, calls, time.Since(start), err)
			}
		})
	}
	// A 503 (a hub still starting) is worth another poll.
	synctest.Test(t, func(t *testing.T) {
		calls := 0
		fetch := func(context.Context) (*View, error) {
			calls++
			return nil, &StatusError{Code: http.StatusServiceUnavailable}
		}
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		if _, err := WaitReady(ctx, fetch, demoClusters, 500*time.Millisecond); err == nil || calls < 2 {
			t.Errorf("503: %d polls, %v; want polling until the deadline", calls, err)
		}
	})
}

func TestWaitReadyReportsTheLastAnswer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
		defer cancel()
		calls := 0
		fetch := func(ctx context.Context) (*View, error) {
			if calls++; calls < 3 {
				return notReady(t), nil
			}
			// The third request hangs until the deadline cuts it.
			<-ctx.Done()
			return nil, ctx.Err()
		}
		_, err := WaitReady(ctx, fetch, demoClusters, 500*time.Millisecond)
		if err == nil || !strings.Contains(err.Error(), "not ready after 3 polls") || !strings.Contains(err.Error(), "found none among 4 listed") {
			t.Errorf("got %v, want the second poll's answer", err)
		}
	})
}

func TestWaitReadyTimesOut(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
		defer cancel()
		fetch := func(context.Context) (*View, error) { return notReady(t), nil }
		_, err := WaitReady(ctx, fetch, demoClusters, 500*time.Millisecond)
		if err == nil {
			t.Fatal("ready without a followed session")
		}
		// Polls at 0, 0.5, 1, 1.5 and 2 s (the tick and the deadline fall
		// together; the deadline wins or the fifth poll runs first).
		for _, want := range []string{"the routing view was not ready after", "context deadline exceeded", "found none among 4 listed"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error %q lacks %q", err, want)
			}
		}
	})
}
