package routeview

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// maxBody bounds what is read of one admin answer; a view is a few
// hundred kilobytes at its clamps.
const maxBody = 16 << 20

// Client reads the hub's admin JSON.
type Client struct {
	// Admin is the admin listener's base URL (no trailing slash).
	Admin string
	// HTTP sends the requests; each is bounded by the caller's context.
	HTTP *http.Client
}

// Clusters is ExpectedClusters of GET /debug/state.
func (c Client) Clusters(ctx context.Context) ([]string, error) {
	b, err := c.get(ctx, "/debug/state")
	if err != nil {
		return nil, err
	}
	return ExpectedClusters(b)
}

// View is GET /debug/routing with the hub's default query, the one the
// page starts with.
func (c Client) View(ctx context.Context) (*View, error) {
	b, err := c.get(ctx, "/debug/routing")
	if err != nil {
		return nil, err
	}
	return DecodeView(b)
}

func (c Client) get(ctx context.Context, path string) ([]byte, error) {
	u := c.Admin + path
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", u, err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxBody))
	if err != nil {
		return nil, fmt.Errorf("GET %s: reading the body: %w", u, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, &StatusError{URL: u, Code: resp.StatusCode, Body: snippet(b)}
	}
	return b, nil
}

// StatusError is an admin answer other than 200.
type StatusError struct {
	URL  string
	Code int
	// Body is the start of the answer, on one line.
	Body string
}

func (e *StatusError) Error() string {
	return fmt.Sprintf("GET %s: expected 200, got %d: %s", e.URL, e.Code, e.Body)
}

// final reports whether polling again cannot help: the hub has no such
// route (a hub older than the routing page) or refuses the caller.
func final(err error) bool {
	var se *StatusError
	return errors.As(err, &se) && (se.Code == http.StatusNotFound || se.Code == http.StatusUnauthorized || se.Code == http.StatusForbidden)
}

// snippet is the start of a body, on one line, for an error message.
func snippet(b []byte) string {
	s := strings.Join(strings.Fields(string(b)), " ")
	if len(s) > 200 {
		s = s[:200] + "..."
	}
	return s
}

// WaitReady polls fetch every interval until the view passes Check for
// expected, and returns it. When ctx ends first, the error says what the
// last view lacked (or why the last fetch failed); an answer that polling
// cannot change (404, 401, 403) ends the wait at once.
func WaitReady(ctx context.Context, fetch func(context.Context) (*View, error), expected []string, interval time.Duration) (*View, error) {
	t := time.NewTicker(interval)
	defer t.Stop()
	var last error
	for polls := 1; ; polls++ {
		v, err := fetch(ctx)
		switch {
		case final(err):
			return nil, err
		case err == nil:
			if last = v.Check(expected); last == nil {
				return v, nil
			}
		case ctx.Err() == nil || last == nil:
			// A poll the deadline cut short says nothing new: the
			// previous answer stays the one to report.
			last = err
		}
		if ctx.Err() == nil {
			select {
			case <-ctx.Done():
			case <-t.C:
				continue
			}
		}
		return nil, errors.Join(fmt.Errorf("the routing view was not ready after %d polls (%w)", polls, context.Cause(ctx)), last)
	}
}
