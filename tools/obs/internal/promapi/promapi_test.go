package promapi

import (
	"context"
	"math"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

func server(t *testing.T) *Client {
	t.Helper()
	mux := http.NewServeMux()
	mux.HandleFunc("/-/ready", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
	mux.HandleFunc("/api/v1/query_range", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("query") == "bad(" {
			w.WriteHeader(http.StatusBadRequest)
			_, _ = w.Write([]byte(`{"status":"error","errorType":"bad_data","error":"parse error"}`))
			return
		}
		if r.URL.Query().Get("step") != "2" || r.URL.Query().Get("start") != "100.000" {
			t.Errorf("query = %v", r.URL.Query())
		}
		_, _ = w.Write([]byte(`{"status":"success","data":{"resultType":"matrix","result":[
			{"metric":{"job":"hub"},"values":[[100,"1"],[102,"NaN"],[104,"2.5"]]}]}}`))
	})
	mux.HandleFunc("/api/v1/query", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("query") == "1" {
			_, _ = w.Write([]byte(`{"status":"success","data":{"resultType":"scalar","result":[100,"1"]}}`))
			return
		}
		_, _ = w.Write([]byte(`{"status":"success","data":{"resultType":"vector","result":[{"metric":{"a":"b"},"value":[100,"+Inf"]}]}}`))
	})
	mux.HandleFunc("/api/v1/rules", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte(`{"status":"success","data":{"groups":[{"rules":[
			{"name":"a:b:c","type":"recording","health":"ok"},
			{"name":"X","type":"alerting","health":"err","lastError":"boom","state":"firing","alerts":[{},{}]}]}]}}`))
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return &Client{Base: srv.URL, HTTP: srv.Client()}
}

func TestQueryRange(t *testing.T) {
	c := server(t)
	ctx := context.Background()
	if !c.Ready(ctx) {
		t.Fatal("not ready")
	}
	ss, err := c.QueryRange(ctx, "up", time.Unix(100, 0), time.Unix(104, 0), 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if len(ss) != 1 || ss[0].Labels["job"] != "hub" || len(ss[0].Samples) != 3 || ss[0].Finite() != 2 ||
		ss[0].Samples[2].V != 2.5 || !ss[0].Samples[2].T.Equal(time.Unix(104, 0)) {
		t.Fatalf("series = %+v", ss)
	}
	if _, err := c.QueryRange(ctx, "bad(", time.Unix(100, 0), time.Unix(104, 0), 2*time.Second); err == nil {
		t.Fatal("an API error was not returned")
	}
}

func TestQueryScalarAndVector(t *testing.T) {
	c := server(t)
	ss, err := c.Query(context.Background(), "1", time.Unix(100, 0))
	if err != nil || len(ss) != 1 || ss[0].Samples[0].V != 1 {
		t.Fatalf("scalar = %+v, %v", ss, err)
	}
	ss, err = c.Query(context.Background(), "x", time.Unix(100, 0))
	if err != nil || len(ss) != 1 || !math.IsInf(ss[0].Samples[0].V, 1) || ss[0].Finite() != 0 {
		t.Fatalf("vector = %+v, %v", ss, err)
	}
}

func TestRules(t *testing.T) {
	rs, err := server(t).Rules(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != 2 || rs[1].Health != "err" || rs[1].LastError != "boom" || rs[1].Alerts != 2 || rs[0].Type != "recording" {
		t.Fatalf("rules = %+v", rs)
	}
}
