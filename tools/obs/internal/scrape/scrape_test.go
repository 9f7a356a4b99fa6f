package scrape

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

const hubText = `# HELP stargate_requests_total Final outcome.
# TYPE stargate_requests_total counter
stargate_requests_total{model="m",status="200"} 3
# HELP stargate_routing_duration_seconds Routing.
# TYPE stargate_routing_duration_seconds histogram
stargate_routing_duration_seconds_bucket{model="m",le="0.1"} 1
stargate_routing_duration_seconds_bucket{model="m",le="+Inf"} 1
stargate_routing_duration_seconds_sum{model="m"} 0.01
stargate_routing_duration_seconds_count{model="m"} 1
# HELP vllm:num_requests_running Running.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{model_name="m"} 2
`

func TestParseAndLookup(t *testing.T) {
	reg := Registry{}
	if err := reg.Parse("hub", strings.NewReader(hubText)); err != nil {
		t.Fatal(err)
	}
	if err := reg.Parse("hub-2", strings.NewReader(hubText)); err != nil {
		t.Fatal(err)
	}
	f, extra, ok := reg.Lookup("stargate_routing_duration_seconds_bucket")
	if !ok || f.Name != "stargate_routing_duration_seconds" || extra != "le" || f.Type != "histogram" {
		t.Fatalf("Lookup(_bucket) = %+v, %q, %v", f, extra, ok)
	}
	if f, extra, ok := reg.Lookup("stargate_routing_duration_seconds_count"); !ok || extra != "" || f.Series != 2 {
		t.Fatalf("Lookup(_count) = %+v, %q, %v", f, extra, ok)
	}
	if _, _, ok := reg.Lookup("stargate_requests_total_count"); ok {
		t.Fatal("a counter has no _count series")
	}
	if _, _, ok := reg.Lookup("stargate_missing"); ok {
		t.Fatal("Lookup found a family that is not there")
	}
	f = reg["stargate_requests_total"]
	if !f.Labels["model"] || !f.Labels["status"] || len(f.Sources) != 2 || f.Series != 2 {
		t.Fatalf("family = %+v", f)
	}
	if reg["vllm:num_requests_running"] == nil {
		t.Fatal("a name with a colon was dropped")
	}
	if got := strings.Join(reg.Names(), ","); got != "stargate_requests_total,stargate_routing_duration_seconds,vllm:num_requests_running" {
		t.Fatalf("Names = %s", got)
	}
}

func TestFetch(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/metrics" {
			http.NotFound(w, r)
			return
		}
		_, _ = w.Write([]byte(hubText))
	}))
	defer srv.Close()
	reg := Registry{}
	if err := reg.Fetch(context.Background(), srv.Client(), "hub", srv.URL+"/metrics"); err != nil {
		t.Fatal(err)
	}
	if len(reg) != 3 {
		t.Fatalf("families = %v", reg.Names())
	}
	if err := reg.Fetch(context.Background(), srv.Client(), "hub", srv.URL+"/nope"); err == nil || !strings.Contains(err.Error(), "404") {
		t.Fatalf("Fetch of a missing page: %v", err)
	}
}

func TestParseRefusesBadText(t *testing.T) {
	if err := (Registry{}).Parse("x", strings.NewReader("metric{a=\"b\" 1\n")); err == nil {
		t.Fatal("bad exposition parsed")
	}
}

func TestParseTextLabelsAndValues(t *testing.T) {
	text := "# HELP a_total Help with \\\\ escapes.\n# TYPE a_total counter\n" +
		"a_total{path=\"/v1/x\",msg=\"say \\\"hi\\\", ok\\n\"} 3 1700000000000\n" +
		"b 1.5e3\n" +
		"c{} +Inf\n"
	got, err := ParseText(strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Samples) != 3 || got.Types["a_total"] != "counter" {
		t.Fatalf("parsed %+v", got)
	}
	a := got.Samples[0]
	if a.Name != "a_total" || a.Labels["path"] != "/v1/x" || a.Labels["msg"] != "say \"hi\", ok\n" || a.Value != 3 {
		t.Errorf("a = %+v", a)
	}
	if got.Samples[1].Value != 1500 || len(got.Samples[2].Labels) != 0 {
		t.Errorf("b, c = %+v", got.Samples[1:])
	}
}

func TestParseTextRefusesBrokenLines(t *testing.T) {
	for _, line := range []string{`x{a="b"`, `x{a=b} 1`, `x 1 2 3`, `x`, `x{a="b"} one`, `9x 1`, `x{a:b="c"} 1`} {
		if _, err := ParseText(strings.NewReader(line + "\n")); err == nil {
			t.Errorf("ParseText(%q) succeeded", line)
		}
	}
}
