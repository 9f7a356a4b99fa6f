package manifest

import (
	"strings"
	"testing"
)

func decode(t *testing.T, doc string) ([]Object, []Skipped, []error) {
	t.Helper()
	d, err := NewDecoder([]string{"monitoring.coreos.com"})
	if err != nil {
		t.Fatal(err)
	}
	return d.Decode(strings.NewReader(doc))
}

const deployment = `---
# Source: c/templates/deployment.yaml
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  namespace: ns
spec:
  replicas: 2
  selector:
    matchLabels: {app: web}
  template:
    metadata:
      labels: {app: web}
    spec:
      containers:
        - name: web
          image: x
          env:
            - {name: UPSTREAM, value: "http://api:8000"}
          ports:
            - {name: http, containerPort: 8080}
`

const service = `---
# Source: c/templates/service.yaml
apiVersion: v1
kind: Service
metadata:
  name: web
  namespace: ns
spec:
  selector: {app: web}
  ports:
    - {name: http, port: 80, targetPort: http}
`

func TestDecodeIsStrict(t *testing.T) {
	for name, tc := range map[string]struct{ doc, want string }{
		"unknown field": {strings.Replace(deployment, "containerPort", "contianerPort", 1), `unknown field "spec.template.spec.containers[0].ports[0].contianerPort"`},
		"wrong type":    {strings.Replace(deployment, "replicas: 2", `replicas: "2"`, 1), "spec.replicas"},
		"duplicate key": {strings.Replace(deployment, "  replicas: 2\n", "  replicas: 2\n  replicas: 3\n", 1), `key "replicas" already set`},
		"unknown kind":  {"apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w}\n", "no kind"},
	} {
		_, _, errs := decode(t, tc.doc)
		if len(errs) != 1 || !strings.Contains(errs[0].Error(), tc.want) {
			t.Errorf("%s: errors %v, want one containing %q", name, errs, tc.want)
		}
	}
}

func TestDecodeSkipsGroupsAndEmptyDocuments(t *testing.T) {
	doc := deployment + "---\n# Source: c/templates/empty.yaml\n---\n" +
		"apiVersion: monitoring.coreos.com/v1\nkind: ServiceMonitor\nmetadata: {name: sm}\nspec: {nonsense: 1}\n"
	objs, skipped, errs := decode(t, doc)
	if len(errs) != 0 || len(objs) != 1 || len(skipped) != 1 || skipped[0].Kind != "ServiceMonitor" {
		t.Fatalf("objs %d skipped %v errs %v", len(objs), skipped, errs)
	}
	if objs[0].Source != "c/templates/deployment.yaml" || objs[0].Ref() != "Deployment/ns/web" {
		t.Fatalf("object %s from %s", objs[0].Ref(), objs[0].Source)
	}
}

func check(t *testing.T, doc string, stack bool) Report {
	t.Helper()
	objs, _, errs := decode(t, doc)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	return Check(objs, Options{Stack: stack})
}

func TestCheckAcceptsAWiredRender(t *testing.T) {
	// A Service without a selector (its endpoints are managed elsewhere).
	api := "---\napiVersion: v1\nkind: Service\nmetadata: {name: api, namespace: ns}\nspec:\n  ports: [{name: http, port: 8000}]\n"
	rep := check(t, deployment+service+api, true)
	if len(rep.Problems) != 0 || len(rep.Notes) != 0 {
		t.Fatalf("report %+v", rep)
	}
}

func TestCheckFindsWiringMistakes(t *testing.T) {
	for name, tc := range map[string]struct {
		doc   string
		stack bool
		want  string
	}{
		"selector matches nothing": {deployment + strings.Replace(service, "selector: {app: web}", "selector: {app: webb}", 1), false, "matches no pod template"},
		"target port not served":   {deployment + strings.Replace(service, "targetPort: http", "targetPort: metrics", 1), false, "exposes no TCP port metrics"},
		"rendered twice":           {deployment + deployment, false, "rendered twice"},
		"env twice":                {strings.Replace(deployment, "          ports:", "            - {name: UPSTREAM, value: x}\n          ports:", 1), false, "env UPSTREAM set twice"},
		"address of no service":    {deployment + service, true, "api names no Service"},
		"missing secret in stack": {strings.Replace(deployment, "          ports:", "            - name: T\n              valueFrom: {secretKeyRef: {name: s, key: k}}\n          ports:", 1), true,
			`Secret "s" is not in the render`},
		"long service name":  {strings.Replace(service, "name: web\n", "name: "+strings.Repeat("w", 64)+"\n", 1) + deployment, false, "must be no more than 63"},
		"bad port name":      {strings.Replace(deployment, "name: http", "name: http_port_too_long", 1), false, "port name"},
		"mount of no volume": {strings.Replace(deployment, "          ports:", "          volumeMounts: [{name: v, mountPath: /v}]\n          ports:", 1), false, `volume "v"`},
	} {
		rep := check(t, tc.doc, tc.stack)
		if !strings.Contains(strings.Join(rep.Problems, "\n"), tc.want) {
			t.Errorf("%s: problems %v, want one containing %q", name, rep.Problems, tc.want)
		}
	}
}

func TestCheckOutsideAStackOnlyNotesMissingReferences(t *testing.T) {
	rep := check(t, deployment+service, false)
	if len(rep.Problems) != 0 || len(rep.Notes) != 1 || !strings.Contains(rep.Notes[0], "api names no Service") {
		t.Fatalf("report %+v", rep)
	}
}

func TestCheckResolvesStatefulSetPodNames(t *testing.T) {
	sts := `---
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: eng, namespace: ns}
spec:
  replicas: 2
  serviceName: eng-headless
  selector: {matchLabels: {app: eng}}
  template:
    metadata: {labels: {app: eng}}
    spec:
      containers: [{name: e, image: x, ports: [{name: http, containerPort: 8090}]}]
---
apiVersion: v1
kind: Service
metadata: {name: eng-headless, namespace: ns}
spec:
  clusterIP: None
  selector: {app: eng}
  ports: [{name: http, port: 8090, targetPort: http}]
`
	client := func(url string) string {
		return strings.NewReplacer("http://api:8000", url, "name: web", "name: cli", "app: web", "app: cli").Replace(deployment)
	}
	if rep := check(t, sts+client("http://eng-1.eng-headless.ns.svc.cluster.local:8090"), true); len(rep.Problems) != 0 {
		t.Fatalf("pod 1 of 2: %v", rep.Problems)
	}
	rep := check(t, sts+client("http://eng-2.eng-headless.ns.svc.cluster.local:8090,http://eng-0.eng-headless.ns.svc:9999"), true)
	got := strings.Join(rep.Problems, "\n")
	for _, want := range []string{"eng-2.eng-headless.ns.svc.cluster.local names no StatefulSet pod", "serve no TCP port 9999"} {
		if !strings.Contains(got, want) {
			t.Errorf("missing %q in %v", want, rep.Problems)
		}
	}
}
