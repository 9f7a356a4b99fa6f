package routeview

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// The fixtures are a demo stack's answers (trimmed): testdata/routing.json
// is GET /debug/routing with four of its sessions, testdata/state.json the
// routing part of GET /debug/state.
func fixture(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

var demoClusters = []string{"far-a", "far-b", "near-a", "near-b"}

func TestExpectedClusters(t *testing.T) {
	got, err := ExpectedClusters(fixture(t, "state.json"))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, demoClusters) {
		t.Errorf("got %v, want %v", got, demoClusters)
	}
	// Two targets sharing clusters: each id once, sorted.
	got, err = ExpectedClusters([]byte(`{"routing":{"targets":[{"clusters":[{"cluster_id":"b"},{"cluster_id":"a"}]},{"clusters":[{"cluster_id":"a"},{"cluster_id":"c"}]}]}}`))
	if err != nil || !reflect.DeepEqual(got, []string{"a", "b", "c"}) {
		t.Errorf("got %v, %v; want [a b c]", got, err)
	}
	for body, want := range map[string]string{
		`{"config":{}}`:                    "no routing object",
		`{"routing":{"targets":[]}}`:       "lists no cluster",
		`{"routing":{"targets":[{}]}}`:     "lists no cluster in routing.targets[].clusters (1 targets)",
		`<html>`:                           "decoding /debug/state",
		`{"routing":{"targets":"a list"}}`: "decoding /debug/state",
	} {
		if got, err := ExpectedClusters([]byte(body)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: got %v, %v; want an error with %q", body, got, err, want)
		}
	}
}

func TestDecodeView(t *testing.T) {
	v, err := DecodeView(fixture(t, "routing.json"))
	if err != nil {
		t.Fatal(err)
	}
	if len(v.Clusters) != 4 || len(v.Sessions.Items) != 4 || v.Sessions.Total != 87 {
		t.Errorf("decoded %d clusters, %d sessions of %d; want 4, 4 of 87", len(v.Clusters), len(v.Sessions.Items), v.Sessions.Total)
	}
	if _, err := DecodeView([]byte(`{"schema":"stargate.routing-page/v2"}`)); err == nil || !strings.Contains(err.Error(), `has schema "stargate.routing-page/v2", expected "stargate.routing-page/v1"`) {
		t.Errorf("another schema: %v", err)
	}
	if _, err := DecodeView([]byte(`{"error":{"message":"no route"}}`)); err == nil || !strings.Contains(err.Error(), `has schema ""`) {
		t.Errorf("not a view: %v", err)
	}
}

func TestEscapedAndFollowed(t *testing.T) {
	v, err := DecodeView(fixture(t, "routing.json"))
	if err != nil {
		t.Fatal(err)
	}
	// first>stay>stay>stay, first, first>escape>followed>stay,
	// escape>followed>escape>followed.
	if got, want := v.EscapedAndFollowed(), []string{"65d8ffe112f3dab1", "e1509bf2ca52724f"}; !reflect.DeepEqual(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
	for _, c := range []struct {
		flows []string
		want  bool
	}{
		{[]string{"escape", "followed"}, true},
		// An unanswered turn in between does not break the relation.
		{[]string{"first", "escape", "unplaced", "followed"}, true},
		{[]string{"escape", "bounced", "followed"}, false},
		{[]string{"followed", "escape"}, false},
		{[]string{"escape", "stay"}, false},
		{[]string{"first", "stay"}, false},
	} {
		s := Session{ID: "s"}
		for _, f := range c.flows {
			s.Turns = append(s.Turns, Turn{Flow: f})
		}
		got := len((&View{Sessions: Sessions{Items: []Session{s}}}).EscapedAndFollowed()) == 1
		if got != c.want {
			t.Errorf("%v: %v, want %v", c.flows, got, c.want)
		}
	}
}

func TestCheck(t *testing.T) {
	v, err := DecodeView(fixture(t, "routing.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := v.Check(demoClusters); err != nil {
		t.Fatalf("the demo's view: %v", err)
	}

	// A cluster the routing state has but the view lacks.
	if err := v.Check(append([]string{"east-c"}, demoClusters...)); err == nil ||
		!strings.Contains(err.Error(), "missing [east-c]; the view lists [far-a far-b near-a near-b]") {
		t.Errorf("missing cluster: %v", err)
	}

	// No session followed after its escape.
	for i := range v.Sessions.Items {
		for j := range v.Sessions.Items[i].Turns {
			if v.Sessions.Items[i].Turns[j].Flow == FlowFollowed {
				v.Sessions.Items[i].Turns[j].Flow = "bounced"
			}
		}
	}
	err = v.Check(demoClusters)
	if err == nil {
		t.Fatal("passed without a followed turn")
	}
	for _, want := range []string{"found none among 4 listed (87 in the window)", "turn flows bounced 3, escape 3, first 3, stay 4"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
	if strings.Contains(err.Error(), "clusters:") {
		t.Errorf("error %q names a cluster problem the view does not have", err)
	}
}

func TestCheckPrefix(t *testing.T) {
	for body, ok := range map[string]bool{
		`{"schema":"stargate.routing-page/v1","prefix":{"enabled":true,"hottest":[{"prefix":"ab","requests":3}]}}`: true,
		`{"schema":"stargate.routing-page/v1","prefix":{"enabled":true,"hottest":[]}}`:                             false,
		`{"schema":"stargate.routing-page/v1","prefix":{"enabled":false,"hottest":[{"prefix":"ab"}]}}`:             false,
	} {
		v, err := DecodeView([]byte(body))
		if err != nil {
			t.Fatal(err)
		}
		if err := v.CheckPrefix(); (err == nil) != ok {
			t.Errorf("%s: CheckPrefix() = %v, want ok %v", body, err, ok)
		}
	}
}
