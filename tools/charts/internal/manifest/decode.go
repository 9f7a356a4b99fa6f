// Package manifest decodes rendered Kubernetes manifests strictly against
// the k8s.io/api types, the check an API server's schema would make
// (unknown fields, wrong types, duplicate fields), since no cluster and no
// downloadable schema is available where charts-check runs. It also checks
// how the objects of one render refer to each other (refs.go).
package manifest

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

// Object is one decoded manifest.
type Object struct {
	// Source is the template that rendered it (helm's "# Source:" line), or
	// the document's position when there is none.
	Source string
	GVK    schema.GroupVersionKind
	// Obj is the typed object (*appsv1.Deployment, *corev1.Service, ...).
	Obj runtime.Object
	// Meta is the object's metadata.
	Meta metav1.Object
}

// Ref names the object for messages: Kind/namespace/name.
func (o Object) Ref() string {
	return fmt.Sprintf("%s/%s/%s", o.GVK.Kind, o.Meta.GetNamespace(), o.Meta.GetName())
}

// Skipped is a document of an API group the decoder was told to skip
// (custom resources such as the Prometheus Operator's, which k8s.io/api
// does not define).
type Skipped struct {
	Source     string
	APIVersion string
	Kind       string
	Name       string
}

// Decoder decodes strictly; it is safe for one goroutine.
type Decoder struct {
	codec      runtime.Decoder
	skipGroups map[string]bool
}

// NewDecoder knows the built-in API groups a chart of this repository can
// render; documents whose API group is in skipGroups are reported as
// skipped instead of failing as unknown kinds.
func NewDecoder(skipGroups []string) (*Decoder, error) {
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{corev1.AddToScheme, appsv1.AddToScheme,
		autoscalingv2.AddToScheme, batchv1.AddToScheme, networkingv1.AddToScheme, policyv1.AddToScheme,
		rbacv1.AddToScheme} {
		if err := add(scheme); err != nil {
			return nil, fmt.Errorf("building the scheme: %w", err)
		}
	}
	skip := map[string]bool{}
	for _, g := range skipGroups {
		skip[g] = true
	}
	codec := serializer.NewCodecFactory(scheme, serializer.EnableStrict).UniversalDeserializer()
	return &Decoder{codec: codec, skipGroups: skip}, nil
}

// typeHead is what is read of a document before its kind is known.
type typeHead struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name string `json:"name"`
	} `json:"metadata"`
}

// Decode reads a stream of YAML documents. Documents holding only comments
// (helm prints a "# Source:" line even for an empty template) are ignored.
// Every document that fails is one error naming its source; decoding goes
// on after a failure so one run reports them all.
func (d *Decoder) Decode(r io.Reader) ([]Object, []Skipped, []error) {
	var (
		objs    []Object
		skipped []Skipped
		errs    []error
	)
	reader := utilyaml.NewYAMLReader(bufio.NewReader(r))
	for n := 1; ; n++ {
		doc, err := reader.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("document %d: reading: %w", n, err))
			break
		}
		source := sourceOf(doc, n)
		if isEmpty(doc) {
			continue
		}
		var head typeHead
		if err := yaml.Unmarshal(doc, &head); err != nil {
			errs = append(errs, fmt.Errorf("%s: not YAML: %w", source, err))
			continue
		}
		gv, err := schema.ParseGroupVersion(head.APIVersion)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: apiVersion %q: %w", source, head.APIVersion, err))
			continue
		}
		if d.skipGroups[gv.Group] {
			skipped = append(skipped, Skipped{Source: source, APIVersion: head.APIVersion, Kind: head.Kind, Name: head.Metadata.Name})
			continue
		}
		obj, gvk, err := d.codec.Decode(doc, nil, nil)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s (%s %q): %w", source, head.Kind, head.Metadata.Name, err))
			continue
		}
		meta, ok := obj.(metav1.Object)
		if !ok {
			errs = append(errs, fmt.Errorf("%s: %s has no object metadata", source, gvk.Kind))
			continue
		}
		objs = append(objs, Object{Source: source, GVK: *gvk, Obj: obj, Meta: meta})
	}
	return objs, skipped, errs
}

// sourceOf is the template path helm writes above each document.
func sourceOf(doc []byte, n int) string {
	for line := range strings.SplitSeq(string(doc), "\n") {
		if s, ok := strings.CutPrefix(strings.TrimSpace(line), "# Source: "); ok {
			return s
		}
	}
	return fmt.Sprintf("document %d", n)
}

// isEmpty reports a document of comments and blank lines only.
func isEmpty(doc []byte) bool {
	for line := range bytes.SplitSeq(doc, []byte("\n")) {
		t := bytes.TrimSpace(line)
		if len(t) > 0 && t[0] != '#' && !bytes.Equal(t, []byte("---")) {
			return false
		}
	}
	return true
}
