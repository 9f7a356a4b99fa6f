package promscrape

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
)

const exposition = `# TYPE go_goroutines gauge
go_goroutines 42
# TYPE olric_storage_entries gauge
olric_storage_entries{dmap="a"} 3
olric_storage_entries{dmap="b"} 4
# TYPE rejections_total counter
rejections_total{model="m",reason="full"} 2
rejections_total{model="n",reason="full"} 3
rejections_total{model="m",reason="shed"} 1
`

func TestScrapeReadsEveryKindOfValue(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		_, _ = w.Write([]byte(exposition))
	}))
	defer srv.Close()
	f, err := Scrape(context.Background(), srv.Client(), srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	if g := f.Gauge("go_goroutines"); g != 42 {
		t.Errorf("Gauge = %v, want 42", g)
	}
	if g := f.Gauge("absent"); g != 0 {
		t.Errorf("Gauge of an absent family = %v, want 0", g)
	}
	if s := f.SumGauge("olric_storage_entries"); s != 7 {
		t.Errorf("SumGauge = %v, want 7", s)
	}
	by := f.CounterByLabel("rejections_total", "reason")
	if by["full"] != 5 || by["shed"] != 1 || len(by) != 2 {
		t.Errorf("CounterByLabel = %v, want full 5, shed 1", by)
	}
}

func TestScrapeRefusesAFailedAnswer(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "no", http.StatusUnauthorized)
	}))
	defer srv.Close()
	if _, err := Scrape(context.Background(), srv.Client(), srv.URL); err == nil {
		t.Fatal("a 401 scraped without an error")
	}
}
