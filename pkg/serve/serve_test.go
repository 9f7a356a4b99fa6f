package serve

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestRunDrainsInFlightRequest(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	started := make(chan struct{})
	release := make(chan struct{})
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(started)
		<-release
		_, _ = io.WriteString(w, "done")
	})
	ctx, cancel := context.WithCancel(context.Background())
	runErr := make(chan error, 1)
	go func() {
		runErr <- Run(ctx, slog.New(slog.DiscardHandler), 10*time.Second, nil, Server{Name: "api", Listener: ln, Handler: h})
	}()
	body := make(chan string, 1)
	go func() {
		resp, err := http.Get("http://" + ln.Addr().String() + "/")
		if err != nil {
			body <- "error: " + err.Error()
			return
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		body <- string(b)
	}()
	<-started
	cancel()
	close(release)
	if got := <-body; got != "done" {
		t.Fatalf("in-flight request got %q, want it completed during drain", got)
	}
	if err := <-runErr; err != nil {
		t.Fatalf("Run = %v", err)
	}
	http.DefaultClient.CloseIdleConnections()
}

func TestRunBoundsTheDrain(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	started := make(chan struct{})
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(200)
		http.NewResponseController(w).Flush()
		close(started)
		<-r.Context().Done() // a stream that never ends by itself
	})
	ctx, cancel := context.WithCancel(context.Background())
	runErr := make(chan error, 1)
	go func() {
		runErr <- Run(ctx, slog.New(slog.DiscardHandler), 50*time.Millisecond, nil, Server{Name: "api", Listener: ln, Handler: h})
	}()
	resp, err := http.Get("http://" + ln.Addr().String() + "/")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	<-started
	cancel()
	if err := <-runErr; err != nil {
		t.Fatalf("Run = %v, want nil after a bounded drain", err)
	}
	if _, err := io.ReadAll(resp.Body); err == nil {
		t.Fatal("stream still open after the drain bound")
	}
}

func TestListenNamesFlag(t *testing.T) {
	_, err := Listen("metrics-listen", "not-an-address")
	if err == nil || !strings.Contains(err.Error(), "--metrics-listen") {
		t.Fatalf("err = %v", err)
	}
}
