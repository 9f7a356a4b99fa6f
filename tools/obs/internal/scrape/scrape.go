// Package scrape reads Prometheus text exposition from /metrics endpoints
// and merges what it finds into one registry view: every family, its type
// and the label names its series carry.
package scrape

import (
	"context"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strings"
)

// Family is one metric family as the scraped binaries export it.
type Family struct {
	Name string
	// Type is counter, gauge, histogram, summary or untyped.
	Type string
	// Labels are the label names seen on its series.
	Labels map[string]bool
	// Series counts its series over every source.
	Series int
	// Sources are the names of the endpoints that export it.
	Sources []string
}

// Registry is the union of scraped families by name.
type Registry map[string]*Family

// Parse adds the exposition text r, scraped from source, to reg.
func (reg Registry) Parse(source string, r io.Reader) error {
	t, err := ParseText(r)
	if err != nil {
		return fmt.Errorf("%s: %w", source, err)
	}
	for _, s := range t.Samples {
		name := family(s.Name, t.Types)
		f := reg[name]
		if f == nil {
			typ := t.Types[name]
			if typ == "" {
				typ = "untyped"
			}
			f = &Family{Name: name, Type: typ, Labels: map[string]bool{}}
			reg[name] = f
		}
		if !slices.Contains(f.Sources, source) {
			f.Sources = append(f.Sources, source)
		}
		if s.Name == name || strings.HasSuffix(s.Name, "_count") {
			f.Series++ // a histogram's series counted once, by its _count
		}
		for l := range s.Labels {
			if l != "le" && l != "quantile" {
				f.Labels[l] = true
			}
		}
	}
	return nil
}

// Names returns the family names, sorted.
func (reg Registry) Names() []string { return slices.Sorted(maps.Keys(reg)) }

// Lookup finds the family a selected series name belongs to: the name
// itself, or a histogram's (or summary's) family for the _bucket, _sum
// and _count series, which also carry le (quantile for summaries).
func (reg Registry) Lookup(series string) (f *Family, extra string, ok bool) {
	if f, ok := reg[series]; ok {
		return f, "", true
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		base, found := strings.CutSuffix(series, suffix)
		if !found {
			continue
		}
		f, ok := reg[base]
		if !ok {
			continue
		}
		switch {
		case f.Type == "histogram" && suffix == "_bucket":
			return f, "le", true
		case f.Type == "histogram" || f.Type == "summary":
			return f, "", true
		}
	}
	return nil, "", false
}

// Fetch GETs url and adds its exposition to reg under source.
func (reg Registry) Fetch(ctx context.Context, c *http.Client, source, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := c.Do(req)
	if err != nil {
		return fmt.Errorf("scraping %s (%s): %w", source, url, err)
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("scraping %s (%s): HTTP %d", source, url, resp.StatusCode)
	}
	return reg.Parse(source, resp.Body)
}
