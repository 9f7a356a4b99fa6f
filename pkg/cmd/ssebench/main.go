// Command ssebench measures time to first SSE event and the gaps between
// events for sequential streamed chat requests, so the hub and pylon can be
// checked for added latency and per-event coalescing against the engine
// alone. It is a small measuring tool until the load generator of the
// proving issue replaces it; it only talks to the URL it is given and stops
// after -n requests.
//
//	ssebench -url http://127.0.0.1:8090/v1/chat/completions
//	ssebench -url http://127.0.0.1:8000/v1/chat/completions -hub
package main

import (
	"bufio"
	"flag"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"
	"time"
)

func main() {
	url := flag.String("url", "", "streaming chat completions URL")
	hub := flag.Bool("hub", false, "add the headers the hub requires (x-request-id, x-model, x-input-tokens)")
	n := flag.Int("n", 300, "requests, sent one after another")
	tokens := flag.Int("tokens", 10, "output tokens per request (x-output-tokens)")
	model := flag.String("model", "m", "model name")
	flag.Parse()
	if *url == "" {
		fmt.Fprintln(os.Stderr, "ssebench: -url is required")
		os.Exit(2)
	}
	body := `{"model":"` + *model + `","stream":true,"messages":[{"role":"user","content":"` + strings.Repeat("x", 1000) + `"}]}`
	var first, gaps []time.Duration
	for i := range *n {
		req, err := http.NewRequest(http.MethodPost, *url, strings.NewReader(body))
		if err != nil {
			fmt.Fprintln(os.Stderr, "ssebench:", err)
			os.Exit(1)
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("x-output-tokens", fmt.Sprint(*tokens))
		if *hub {
			req.Header.Set("x-request-id", fmt.Sprintf("ssebench-%d", i))
			req.Header.Set("x-model", *model)
			req.Header.Set("x-input-tokens", "250")
		}
		start := time.Now()
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			fmt.Fprintln(os.Stderr, "ssebench:", err)
			os.Exit(1)
		}
		var last time.Time
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			if !strings.HasPrefix(sc.Text(), "data: ") {
				continue
			}
			now := time.Now()
			if last.IsZero() {
				first = append(first, now.Sub(start))
			} else {
				gaps = append(gaps, now.Sub(last))
			}
			last = now
		}
		_ = resp.Body.Close()
	}
	if len(first) == 0 || len(gaps) == 0 {
		fmt.Fprintln(os.Stderr, "ssebench: no events received")
		os.Exit(1)
	}
	fmt.Printf("first event p50 %v p99 %v | gap between events p50 %v p99 %v (requests %d)\n",
		quantile(first, .5), quantile(first, .99), quantile(gaps, .5), quantile(gaps, .99), len(first))
}

// quantile is the nearest-rank quantile of d.
func quantile(d []time.Duration, q float64) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[int(float64(len(s)-1)*q)]
}
