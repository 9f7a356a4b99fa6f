package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const service = `apiVersion: v1
kind: Service
metadata: {name: api, namespace: ns}
spec:
  ports: [{name: http, port: 80}]
`

func TestStrictFailsOnAnUnknownField(t *testing.T) {
	var out bytes.Buffer
	if err := runStrict([]string{"-label", "ok"}, strings.NewReader(service), &out); err != nil {
		t.Fatalf("a valid Service: %v\n%s", err, out.String())
	}
	out.Reset()
	bad := strings.Replace(service, "port: 80", "prot: 80", 1)
	if err := runStrict(nil, strings.NewReader(bad), &out); err == nil || !strings.Contains(out.String(), `unknown field "spec.ports[0].prot"`) {
		t.Fatalf("err %v, output:\n%s", err, out.String())
	}
	if err := runStrict(nil, strings.NewReader("# only a comment\n"), &out); err == nil {
		t.Fatal("an empty render passed")
	}
}

func TestEnvValuesListsAVariableOfEveryContainer(t *testing.T) {
	render := `apiVersion: apps/v1
kind: Deployment
metadata: {name: p, namespace: ns}
spec:
  selector: {matchLabels: {a: b}}
  template:
    metadata: {labels: {a: b}}
    spec:
      containers:
        - name: pylon
          image: x
          env:
            - {name: PYLON_INFERENCE_SERVER_ID, value: a1-0}
            - name: POD
              valueFrom: {fieldRef: {fieldPath: metadata.name}}
`
	var out bytes.Buffer
	if err := runEnvValues([]string{"-name", "PYLON_INFERENCE_SERVER_ID"}, strings.NewReader(render), &out); err != nil || out.String() != "a1-0\n" {
		t.Fatalf("-name: %q %v", out.String(), err)
	}
	out.Reset()
	if err := runEnvValues([]string{"-all", "pylon"}, strings.NewReader(render), &out); err != nil ||
		out.String() != "PYLON_INFERENCE_SERVER_ID=a1-0\nPOD=@fieldRef:metadata.name\n" {
		t.Fatalf("-all: %q %v", out.String(), err)
	}
}

func TestValuesDocChecksThenWrites(t *testing.T) {
	dir := t.TempDir()
	chart := filepath.Join(dir, "charts", "c")
	if err := os.MkdirAll(chart, 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(chart, "values.yaml"), []byte("# -- Pods.\nreplicaCount: 2\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	doc := filepath.Join(dir, "deploy.md")
	marker := "<!-- values: " + filepath.ToSlash(filepath.Clean(chart)) + " -->\n"
	if err := os.WriteFile(doc, []byte("# D\n"+marker+"stale\n<!-- end values -->\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := runValuesDoc([]string{"-doc", doc, chart}, &out); err == nil || !strings.Contains(err.Error(), "not current") {
		t.Fatalf("a stale table passed: %v", err)
	}
	if err := runValuesDoc([]string{"-write", "-doc", doc, chart}, &out); err != nil {
		t.Fatal(err)
	}
	if err := runValuesDoc([]string{"-doc", doc, chart}, &out); err != nil {
		t.Fatalf("after -write: %v", err)
	}
	got, _ := os.ReadFile(doc)
	if !strings.Contains(string(got), "| `replicaCount` | `2` | Pods. |") {
		t.Fatalf("table not written:\n%s", got)
	}
}
