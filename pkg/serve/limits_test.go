package serve

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stargate-router/stargate/pkg/cli"
)

// pipeListener hands the server in-memory connections, so the limits can
// be tested on synctest's clock: net.Pipe deadlines use the bubble's time.
type pipeListener struct {
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
}

func newPipeListener() *pipeListener {
	return &pipeListener{conns: make(chan net.Conn), done: make(chan struct{})}
}

func (l *pipeListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *pipeListener) Close() error { l.once.Do(func() { close(l.done) }); return nil }

func (l *pipeListener) Addr() net.Addr { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)} }

func (l *pipeListener) dial() net.Conn {
	c, s := net.Pipe()
	l.conns <- s
	return c
}

var testLimits = Limits{ReadHeader: 2 * time.Second, ReadStall: 3 * time.Second, WriteStall: 4 * time.Second, Idle: 5 * time.Second}

// withServer runs h behind Run with testLimits inside a synctest bubble and
// stops it when fn returns.
func withServer(t *testing.T, h http.Handler, fn func(ln *pipeListener)) {
	withServerMade(t, func() http.Handler { return h }, fn)
}

// withServerMade is withServer for handlers that share channels with fn:
// they must be made inside the bubble for blocking on them to count as
// durable.
func withServerMade(t *testing.T, mk func() http.Handler, fn func(ln *pipeListener)) {
	synctest.Test(t, func(t *testing.T) {
		h := mk()
		ln := newPipeListener()
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			done <- Run(ctx, slog.New(slog.DiscardHandler), time.Second, nil,
				Server{Name: "api", Listener: ln, Handler: h, Limits: testLimits})
		}()
		fn(ln)
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run = %v", err)
		}
	})
}

// readBody answers the body's length, or 408 when it stalled.
var readBody = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	b, err := io.ReadAll(r.Body)
	if errors.Is(err, ErrReadStalled) {
		http.Error(w, "stalled", http.StatusRequestTimeout)
		return
	}
	_, _ = fmt.Fprintf(w, "%d", len(b))
})

func response(t *testing.T, c net.Conn) (int, string) {
	t.Helper()
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("read response: %v", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// A body that keeps arriving, however slowly and however long in total, is
// read to the end.
func TestLimitsSlowSteadyBodyIsRead(t *testing.T) {
	withServer(t, readBody, func(ln *pipeListener) {
		c := ln.dial()
		defer c.Close()
		start := time.Now()
		go func() {
			_, _ = io.WriteString(c, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n")
			for range 10 {
				time.Sleep(testLimits.ReadStall - time.Second)
				_, _ = c.Write([]byte{'a'})
			}
		}()
		if code, body := response(t, c); code != 200 || body != "10" {
			t.Fatalf("slow body: %d %q", code, body)
		}
		if took := time.Since(start); took < 5*testLimits.ReadStall {
			t.Fatalf("took %s; the body should have taken longer than several stall bounds", took)
		}
	})
}

// A body that stops arriving fails the handler's read at the stall bound.
func TestLimitsStalledBodyFailsTheRead(t *testing.T) {
	withServer(t, readBody, func(ln *pipeListener) {
		c := ln.dial()
		defer c.Close()
		start := time.Now()
		go func() { _, _ = io.WriteString(c, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nabc") }()
		if code, _ := response(t, c); code != http.StatusRequestTimeout {
			t.Fatalf("stalled body: %d, want 408", code)
		}
		if took := time.Since(start); took != testLimits.ReadStall {
			t.Fatalf("stalled body answered after %s, want %s", took, testLimits.ReadStall)
		}
	})
}

// Headers that never end close the connection at the header bound.
func TestLimitsStalledHeadersCloseTheConnection(t *testing.T) {
	withServer(t, readBody, func(ln *pipeListener) {
		c := ln.dial()
		defer c.Close()
		start := time.Now()
		go func() { _, _ = io.WriteString(c, "POST / HTTP/1.1\r\nHost: x\r\n") }()
		_, _ = io.Copy(io.Discard, c) // the server's answer, if any, then EOF
		if took := time.Since(start); took != testLimits.ReadHeader {
			t.Fatalf("closed after %s, want %s", took, testLimits.ReadHeader)
		}
	})
}

// An idle keep-alive connection is closed at the idle bound.
func TestLimitsIdleConnectionIsClosed(t *testing.T) {
	withServer(t, readBody, func(ln *pipeListener) {
		c := ln.dial()
		defer c.Close()
		br := bufio.NewReader(c)
		go func() { _, _ = io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n") }()
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		idleFrom := time.Now()
		if n, err := br.ReadByte(); err == nil {
			t.Fatalf("read %q from an idle connection", n)
		}
		if took := time.Since(idleFrom); took != testLimits.Idle {
			t.Fatalf("idle connection closed after %s, want %s", took, testLimits.Idle)
		}
	})
}

// A stream whose events are further apart than the write bound goes on as
// long as the client reads; a client that stops reading frees the handler
// at the write bound.
func TestLimitsWriteStall(t *testing.T) {
	var handlerErr chan error
	stream := func() http.Handler {
		handlerErr = make(chan error, 1)
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/event-stream")
			chunk := strings.Repeat("x", 4096)
			for i := range 1000 {
				if i < 5 {
					time.Sleep(2 * testLimits.WriteStall)
				}
				if _, err := io.WriteString(w, "data: "+chunk+"\n\n"); err != nil {
					handlerErr <- err
					return
				}
				if err := http.NewResponseController(w).Flush(); err != nil {
					handlerErr <- err
					return
				}
			}
			handlerErr <- nil
		})
	}
	withServerMade(t, stream, func(ln *pipeListener) {
		c := ln.dial()
		defer c.Close()
		go func() { _, _ = io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n") }()
		br := bufio.NewReader(c)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		// Read the five slow events: gaps of twice the bound between them.
		want := 5 * len("data: \n\n"+strings.Repeat("x", 4096))
		if _, err := io.ReadFull(resp.Body, make([]byte, want)); err != nil {
			t.Fatalf("slow events: %v", err)
		}
		stopped := time.Now()
		// Stop reading: the handler's next write blocks, then fails.
		err = <-handlerErr
		if err == nil {
			t.Fatal("handler wrote 1000 events to a client that stopped reading")
		}
		if took := time.Since(stopped); took > testLimits.WriteStall {
			t.Fatalf("handler freed after %s, want within %s", took, testLimits.WriteStall)
		}
	})
}

func TestLimitsFlagsAndValidate(t *testing.T) {
	var l Limits
	fs := cli.New("x", "", io.Discard)
	l.Flags(fs, "X")
	if err := fs.Parse([]string{"--read-stall-timeout", "7s"}, func(k string) string {
		if k == "X_IDLE_TIMEOUT" {
			return "9s"
		}
		return ""
	}); err != nil {
		t.Fatal(err)
	}
	want := DefaultLimits()
	want.ReadStall, want.Idle = 7*time.Second, 9*time.Second
	if l != want {
		t.Fatalf("parsed %+v, want %+v", l, want)
	}
	if err := l.Validate(); err != nil {
		t.Fatal(err)
	}
	l.WriteStall = 0
	if err := l.Validate(); err == nil || !strings.Contains(err.Error(), "--write-stall-timeout") {
		t.Fatalf("Validate zero write stall = %v", err)
	}
}
