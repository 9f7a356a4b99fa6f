// Package promapi is the small part of Prometheus' HTTP API the end-to-end
// check needs: readiness, range and instant queries, rules and targets.
package promapi

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// Client talks to one Prometheus.
type Client struct {
	// Base is the server's URL, e.g. http://127.0.0.1:9090.
	Base string
	HTTP *http.Client
}

// Sample is one point of a series.
type Sample struct {
	T time.Time
	V float64
}

// Series is one labelled series of a result.
type Series struct {
	Labels  map[string]string
	Samples []Sample
}

// Finite counts the samples that are numbers (not NaN or ±Inf).
func (s Series) Finite() int {
	n := 0
	for _, p := range s.Samples {
		if !math.IsNaN(p.V) && !math.IsInf(p.V, 0) {
			n++
		}
	}
	return n
}

type envelope struct {
	Status    string          `json:"status"`
	Data      json.RawMessage `json:"data"`
	ErrorType string          `json:"errorType"`
	Error     string          `json:"error"`
}

func (c *Client) get(ctx context.Context, path string, q url.Values, into any) error {
	u := c.Base + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return err
	}
	var env envelope
	if err := json.Unmarshal(body, &env); err != nil {
		return fmt.Errorf("%s: HTTP %d, not an API answer: %.200s", path, resp.StatusCode, body)
	}
	if env.Status != "success" {
		return fmt.Errorf("%s: %s: %s", path, env.ErrorType, env.Error)
	}
	return json.Unmarshal(env.Data, into)
}

// Ready reports whether /-/ready answers 200.
func (c *Client) Ready(ctx context.Context) bool {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.Base+"/-/ready", nil)
	if err != nil {
		return false
	}
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return false
	}
	_ = resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

type matrix []struct {
	Metric map[string]string `json:"metric"`
	Values [][2]any          `json:"values"`
	Value  [2]any            `json:"value"`
}

// QueryRange evaluates expr from start to end every step.
func (c *Client) QueryRange(ctx context.Context, expr string, start, end time.Time, step time.Duration) ([]Series, error) {
	var data struct {
		ResultType string `json:"resultType"`
		Result     matrix `json:"result"`
	}
	q := url.Values{"query": {expr}, "start": {unix(start)}, "end": {unix(end)}, "step": {strconv.FormatFloat(step.Seconds(), 'f', -1, 64)}}
	if err := c.get(ctx, "/api/v1/query_range", q, &data); err != nil {
		return nil, err
	}
	out := make([]Series, 0, len(data.Result))
	for _, r := range data.Result {
		s := Series{Labels: r.Metric}
		for _, v := range r.Values {
			p, err := sample(v)
			if err != nil {
				return nil, err
			}
			s.Samples = append(s.Samples, p)
		}
		out = append(out, s)
	}
	return out, nil
}

// Query evaluates expr at t (an instant vector or scalar result).
func (c *Client) Query(ctx context.Context, expr string, t time.Time) ([]Series, error) {
	var data struct {
		ResultType string          `json:"resultType"`
		Result     json.RawMessage `json:"result"`
	}
	if err := c.get(ctx, "/api/v1/query", url.Values{"query": {expr}, "time": {unix(t)}}, &data); err != nil {
		return nil, err
	}
	if data.ResultType == "scalar" {
		var v [2]any
		if err := json.Unmarshal(data.Result, &v); err != nil {
			return nil, err
		}
		p, err := sample(v)
		return []Series{{Samples: []Sample{p}}}, err
	}
	var m matrix
	if err := json.Unmarshal(data.Result, &m); err != nil {
		return nil, err
	}
	out := make([]Series, 0, len(m))
	for _, r := range m {
		p, err := sample(r.Value)
		if err != nil {
			return nil, err
		}
		out = append(out, Series{Labels: r.Metric, Samples: []Sample{p}})
	}
	return out, nil
}

// Rule is one loaded rule's state.
type Rule struct {
	Name, Type, Health, LastError, State string
	// Alerts are an alerting rule's active alerts (pending or firing).
	Alerts int
}

// Rules lists every loaded rule.
func (c *Client) Rules(ctx context.Context) ([]Rule, error) {
	var data struct {
		Groups []struct {
			Rules []struct {
				Name      string `json:"name"`
				Type      string `json:"type"`
				Health    string `json:"health"`
				LastError string `json:"lastError"`
				State     string `json:"state"`
				Alerts    []any  `json:"alerts"`
			} `json:"rules"`
		} `json:"groups"`
	}
	if err := c.get(ctx, "/api/v1/rules", nil, &data); err != nil {
		return nil, err
	}
	var out []Rule
	for _, g := range data.Groups {
		for _, r := range g.Rules {
			out = append(out, Rule{Name: r.Name, Type: r.Type, Health: r.Health, LastError: r.LastError, State: r.State, Alerts: len(r.Alerts)})
		}
	}
	return out, nil
}

// Target is one scrape target's health.
type Target struct {
	Job, Instance, Health, LastError string
}

// Targets lists the active scrape targets.
func (c *Client) Targets(ctx context.Context) ([]Target, error) {
	var data struct {
		ActiveTargets []struct {
			Labels    map[string]string `json:"labels"`
			Health    string            `json:"health"`
			LastError string            `json:"lastError"`
		} `json:"activeTargets"`
	}
	if err := c.get(ctx, "/api/v1/targets", url.Values{"state": {"active"}}, &data); err != nil {
		return nil, err
	}
	out := make([]Target, 0, len(data.ActiveTargets))
	for _, t := range data.ActiveTargets {
		out = append(out, Target{Job: t.Labels["job"], Instance: t.Labels["instance"], Health: t.Health, LastError: t.LastError})
	}
	return out, nil
}

// Names lists every metric name Prometheus holds.
func (c *Client) Names(ctx context.Context) ([]string, error) {
	var out []string
	err := c.get(ctx, "/api/v1/label/__name__/values", nil, &out)
	return out, err
}

func unix(t time.Time) string {
	return strconv.FormatFloat(float64(t.UnixMilli())/1000, 'f', 3, 64)
}

// sample decodes the API's [unix seconds, "value"] pair.
func sample(v [2]any) (Sample, error) {
	ts, ok := v[0].(float64)
	if !ok {
		return Sample{}, fmt.Errorf("bad sample time %v", v[0])
	}
	s, ok := v[1].(string)
	if !ok {
		return Sample{}, fmt.Errorf("bad sample value %v", v[1])
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return Sample{}, err
	}
	return Sample{T: time.UnixMilli(int64(math.Round(ts * 1000))), V: f}, nil
}
