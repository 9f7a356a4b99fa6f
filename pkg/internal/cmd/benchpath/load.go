package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"time"
)

// loadSpec is one closed-loop load run: clients goroutines each send a
// request, read the whole answer and send the next, until duration has
// passed.
type loadSpec struct {
	clients  int
	duration time.Duration
	// sse parses the answer as server-sent events, timing the first
	// event and the gaps between events; otherwise the answer is read
	// whole and only its latency counts.
	sse bool
	// request builds client c's n-th request.
	request func(ctx context.Context, c, n int) (*http.Request, error)
}

// loadResult is what one load run measured. Latency runs from sending the
// request to the end of the answer; a first event is counted from sending
// the request too.
type loadResult struct {
	Latencies, FirstEvents, Gaps []time.Duration
	OK, Failed                   int
	FirstError                   string
	// Elapsed is from the start until the last answer ended: requests in
	// flight at the deadline finish, and the CPU they cost is counted.
	Elapsed time.Duration
}

// newClient is an HTTP/1.1 client with keep-alive, as an OpenAI SDK would
// use against the edge: one connection per concurrent client, kept across
// the warm-up and the measured row, so no row pays for connection setup.
func newClient(clients int) *http.Client {
	tr := &http.Transport{
		DialContext:           (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:          2 * clients,
		MaxIdleConnsPerHost:   2 * clients,
		IdleConnTimeout:       90 * time.Second,
		DisableCompression:    true,
		ResponseHeaderTimeout: time.Minute,
	}
	return &http.Client{Transport: tr, Timeout: 2 * time.Minute}
}

// runLoad runs spec against client. A failed request is counted and the
// client goes on; ctx ends the run early.
func runLoad(ctx context.Context, client *http.Client, spec loadSpec) loadResult {
	start := time.Now()
	deadline := start.Add(spec.duration)
	var (
		mu  sync.Mutex
		res loadResult
		wg  sync.WaitGroup
	)
	for c := range spec.clients {
		wg.Go(func() {
			var mine loadResult
			for n := 0; ctx.Err() == nil && time.Now().Before(deadline); n++ {
				s, err := oneRequest(ctx, client, spec, c, n)
				if err != nil {
					if mine.Failed++; mine.FirstError == "" && ctx.Err() == nil {
						mine.FirstError = err.Error()
					}
					continue
				}
				mine.OK++
				mine.Latencies = append(mine.Latencies, s.latency)
				if spec.sse {
					mine.FirstEvents = append(mine.FirstEvents, s.first)
					mine.Gaps = append(mine.Gaps, s.gaps...)
				}
			}
			mu.Lock()
			defer mu.Unlock()
			res.OK += mine.OK
			res.Failed += mine.Failed
			if res.FirstError == "" {
				res.FirstError = mine.FirstError
			}
			res.Latencies = append(res.Latencies, mine.Latencies...)
			res.FirstEvents = append(res.FirstEvents, mine.FirstEvents...)
			res.Gaps = append(res.Gaps, mine.Gaps...)
		})
	}
	wg.Wait()
	res.Elapsed = time.Since(start)
	return res
}

// sample is one request's timings.
type sample struct {
	latency, first time.Duration
	gaps           []time.Duration
}

func oneRequest(ctx context.Context, client *http.Client, spec loadSpec, c, n int) (sample, error) {
	req, err := spec.request(ctx, c, n)
	if err != nil {
		return sample{}, err
	}
	t0 := time.Now()
	resp, err := client.Do(req)
	if err != nil {
		return sample{}, err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 300))
		return sample{}, fmt.Errorf("HTTP %d: %s", resp.StatusCode, bytes.TrimSpace(b))
	}
	var s sample
	if spec.sse {
		ev, err := readEvents(resp.Body, t0, time.Now)
		if err != nil {
			return sample{}, err
		}
		s.first, s.gaps = ev.first, ev.gaps
	} else if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		return sample{}, err
	}
	s.latency = time.Since(t0)
	return s, nil
}

// events is what readEvents saw of one event stream.
type events struct {
	count int
	// first is from t0 to the end of the first event; gaps are between
	// the ends of consecutive events.
	first time.Duration
	gaps  []time.Duration
}

// errNoDone is a stream that ended without `data: [DONE]`: an answer cut
// short, which must not count as a complete one.
var errNoDone = errors.New("event stream ended without [DONE]")

// readEvents reads a server-sent event stream to its end, noting when
// each event ends (the blank line after its fields) with now. It stops
// at `data: [DONE]` after reading the rest and fails on a stream without
// one.
func readEvents(r io.Reader, t0 time.Time, now func() time.Time) (events, error) {
	br := bufio.NewReaderSize(r, 64<<10)
	var (
		ev       events
		last     time.Time
		inEvent  bool
		sawDone  bool
		longLine bool
	)
	for {
		line, err := br.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			// A field longer than the buffer: the rest follows.
			inEvent, longLine = true, true
			continue
		}
		if len(line) > 0 && !longLine {
			trimmed := bytes.TrimRight(line, "\r\n")
			switch {
			case len(trimmed) == 0 && inEvent:
				t := now()
				if ev.count == 0 {
					ev.first = t.Sub(t0)
				} else {
					ev.gaps = append(ev.gaps, t.Sub(last))
				}
				ev.count++
				last, inEvent = t, false
			case len(trimmed) > 0:
				inEvent = true
				if bytes.Equal(bytes.TrimSpace(bytes.TrimPrefix(trimmed, []byte("data:"))), []byte("[DONE]")) {
					sawDone = true
				}
			}
		}
		longLine = false
		if err == io.EOF {
			if !sawDone {
				return ev, errNoDone
			}
			return ev, nil
		}
		if err != nil {
			return ev, err
		}
	}
}
