// Package promscrape reads a process's Prometheus text exposition for the
// long-running measurement commands (soak, overload): one scrape into
// metric families, and the few ways they read a value out of them.
package promscrape

import (
	"context"
	"fmt"
	"net/http"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	prommodel "github.com/prometheus/common/model"
)

// Families is one scrape, by family name.
type Families map[string]*dto.MetricFamily

// Scrape fetches url with c and parses its text exposition.
func Scrape(ctx context.Context, c *http.Client, url string) (Families, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("status %d", resp.StatusCode)
	}
	parser := expfmt.NewTextParser(prommodel.UTF8Validation)
	return parser.TextToMetricFamilies(resp.Body)
}

// Gauge is the value of the family's first series (0 when it is absent):
// for the unlabelled process gauges.
func (f Families) Gauge(name string) float64 {
	fam, ok := f[name]
	if !ok || len(fam.GetMetric()) == 0 {
		return 0
	}
	return fam.GetMetric()[0].GetGauge().GetValue()
}

// SumGauge adds every series of a gauge family (0 when it is absent).
func (f Families) SumGauge(name string) float64 {
	var total float64
	for _, m := range f[name].GetMetric() {
		total += m.GetGauge().GetValue()
	}
	return total
}

// CounterByLabel sums a counter family's series by one label's value.
func (f Families) CounterByLabel(name, label string) map[string]float64 {
	out := map[string]float64{}
	for _, m := range f[name].GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == label {
				out[l.GetValue()] += m.GetCounter().GetValue()
			}
		}
	}
	return out
}
