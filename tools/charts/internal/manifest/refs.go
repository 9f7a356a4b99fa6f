package manifest

import (
	"fmt"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"
)

// Options of Check.
type Options struct {
	// Stack says the objects are a whole deployment (every release of the
	// dev stack): a Secret, ConfigMap or in-cluster address that no object
	// provides is then a problem; in one chart's render it is a note (it
	// must exist in the namespace, e.g. a Secret another release creates).
	Stack bool
}

// Report lists what Check found.
type Report struct {
	Problems []string
	Notes    []string
}

// template is a pod template and the workload that owns it.
type template struct {
	owner    Object
	labels   map[string]string
	spec     *corev1.PodSpec
	replicas int32 // StatefulSet pods, for pod DNS names; 0 for others
	service  string
}

type checker struct {
	opt       Options
	objs      []Object
	templates []template
	secrets   map[string]map[string]bool // ns/name -> keys
	configs   map[string]map[string]bool
	services  map[string]*corev1.Service // ns/name
	report    Report
}

// Check runs the checks an API server and a running cluster would make
// that a schema cannot: names and labels Kubernetes accepts, unique
// objects, env and port names, volumes and the Secrets and ConfigMaps they
// name, Service selectors and target ports that reach a pod, PDB and HPA
// targets, and addresses in env values that name a Service of the render.
func Check(objs []Object, opt Options) Report {
	c := &checker{opt: opt, objs: objs, secrets: map[string]map[string]bool{},
		configs: map[string]map[string]bool{}, services: map[string]*corev1.Service{}}
	c.index()
	c.unique()
	for _, o := range objs {
		c.names(o)
	}
	for _, t := range c.templates {
		c.podSpec(t)
	}
	for _, o := range objs {
		switch v := o.Obj.(type) {
		case *corev1.Service:
			c.service(o, v)
		case *policyv1.PodDisruptionBudget:
			c.selects(o, v.Spec.Selector)
		case *autoscalingv2.HorizontalPodAutoscaler:
			c.scaleTarget(o, v)
		}
	}
	// A volume naming two keys of one missing Secret is one finding.
	c.report.Problems = slices.Compact(c.report.Problems)
	c.report.Notes = slices.Compact(c.report.Notes)
	return c.report
}

func (c *checker) problem(o Object, format string, args ...any) {
	c.report.Problems = append(c.report.Problems, fmt.Sprintf("%s (%s): %s", o.Ref(), o.Source, fmt.Sprintf(format, args...)))
}

func (c *checker) missing(o Object, format string, args ...any) {
	msg := fmt.Sprintf("%s (%s): %s", o.Ref(), o.Source, fmt.Sprintf(format, args...))
	if c.opt.Stack {
		c.report.Problems = append(c.report.Problems, msg)
		return
	}
	c.report.Notes = append(c.report.Notes, msg)
}

func key(ns, name string) string { return ns + "/" + name }

func (c *checker) index() {
	for _, o := range c.objs {
		ns := o.Meta.GetNamespace()
		switch v := o.Obj.(type) {
		case *corev1.Secret:
			keys := map[string]bool{}
			for k := range v.Data {
				keys[k] = true
			}
			for k := range v.StringData {
				keys[k] = true
			}
			c.secrets[key(ns, v.Name)] = keys
		case *corev1.ConfigMap:
			keys := map[string]bool{}
			for k := range v.Data {
				keys[k] = true
			}
			for k := range v.BinaryData {
				keys[k] = true
			}
			c.configs[key(ns, v.Name)] = keys
		case *corev1.Service:
			c.services[key(ns, v.Name)] = v
		case *appsv1.Deployment:
			c.addTemplate(o, v.Spec.Selector, &v.Spec.Template, 0, "")
		case *appsv1.StatefulSet:
			replicas := int32(1)
			if v.Spec.Replicas != nil {
				replicas = *v.Spec.Replicas
			}
			c.addTemplate(o, v.Spec.Selector, &v.Spec.Template, replicas, v.Spec.ServiceName)
		case *appsv1.DaemonSet:
			c.addTemplate(o, v.Spec.Selector, &v.Spec.Template, 0, "")
		case *batchv1.Job:
			c.templates = append(c.templates, template{owner: o, labels: v.Spec.Template.Labels, spec: &v.Spec.Template.Spec})
		case *corev1.Pod:
			c.templates = append(c.templates, template{owner: o, labels: v.Labels, spec: &v.Spec})
		}
	}
}

func (c *checker) addTemplate(o Object, sel *metav1.LabelSelector, t *corev1.PodTemplateSpec, replicas int32, svc string) {
	s, err := metav1.LabelSelectorAsSelector(sel)
	switch {
	case err != nil:
		c.problem(o, "selector: %v", err)
	case s.Empty():
		c.problem(o, "empty selector")
	case !s.Matches(labels.Set(t.Labels)):
		c.problem(o, "selector %s does not match its own pod template's labels", s)
	}
	c.templates = append(c.templates, template{owner: o, labels: t.Labels, spec: &t.Spec, replicas: replicas, service: svc})
}

func (c *checker) unique() {
	seen := map[string]Object{}
	for _, o := range c.objs {
		k := o.GVK.Kind + "/" + key(o.Meta.GetNamespace(), o.Meta.GetName())
		if first, ok := seen[k]; ok {
			c.problem(o, "rendered twice (also by %s): the install would fail", first.Source)
			continue
		}
		seen[k] = o
	}
}

func (c *checker) names(o Object) {
	name := o.Meta.GetName()
	var errs []string
	if o.GVK.Kind == "Service" {
		errs = validation.IsDNS1035Label(name)
	} else {
		errs = validation.IsDNS1123Subdomain(name)
	}
	for _, e := range errs {
		c.problem(o, "name %q: %s", name, e)
	}
	c.labels(o, "metadata.labels", o.Meta.GetLabels())
}

func (c *checker) labels(o Object, where string, l map[string]string) {
	for k, v := range l {
		for _, e := range validation.IsQualifiedName(k) {
			c.problem(o, "%s key %q: %s", where, k, e)
		}
		for _, e := range validation.IsValidLabelValue(v) {
			c.problem(o, "%s %s=%q: %s", where, k, v, e)
		}
	}
}

func (c *checker) podSpec(t template) {
	o, ns := t.owner, t.owner.Meta.GetNamespace()
	c.labels(o, "pod template labels", t.labels)
	volumes := map[string]corev1.Volume{}
	for _, v := range t.spec.Volumes {
		volumes[v.Name] = v
		c.volumeRefs(o, ns, v)
	}
	ports := map[string]bool{}
	for _, ctr := range slices.Concat(t.spec.InitContainers, t.spec.Containers) {
		env := map[string]bool{}
		for _, e := range ctr.Env {
			if env[e.Name] {
				c.problem(o, "container %s: env %s set twice (the last one wins silently)", ctr.Name, e.Name)
			}
			env[e.Name] = true
			for _, msg := range validation.IsEnvVarName(e.Name) {
				c.problem(o, "container %s: env %q: %s", ctr.Name, e.Name, msg)
			}
			c.envRefs(o, ns, ctr.Name, e)
		}
		for _, p := range ctr.Ports {
			if p.Name == "" {
				continue
			}
			for _, msg := range validation.IsValidPortName(p.Name) {
				c.problem(o, "container %s: port name %q: %s", ctr.Name, p.Name, msg)
			}
			if ports[p.Name] {
				c.problem(o, "port name %q used twice in the pod", p.Name)
			}
			ports[p.Name] = true
		}
		for _, m := range ctr.VolumeMounts {
			if _, ok := volumes[m.Name]; !ok {
				c.problem(o, "container %s mounts volume %q, which the pod does not define", ctr.Name, m.Name)
			}
		}
	}
}

func (c *checker) volumeRefs(o Object, ns string, v corev1.Volume) {
	if s := v.Secret; s != nil && (s.Optional == nil || !*s.Optional) {
		for _, it := range s.Items {
			c.secretKey(o, ns, s.SecretName, it.Key, "volume "+v.Name)
		}
		if len(s.Items) == 0 {
			c.secretKey(o, ns, s.SecretName, "", "volume "+v.Name)
		}
	}
	if cm := v.ConfigMap; cm != nil && (cm.Optional == nil || !*cm.Optional) {
		keys, ok := c.configs[key(ns, cm.Name)]
		if !ok {
			c.missing(o, "volume %s: ConfigMap %q is not in the render", v.Name, cm.Name)
			return
		}
		for _, it := range cm.Items {
			if !keys[it.Key] {
				c.problem(o, "volume %s: ConfigMap %q has no key %q", v.Name, cm.Name, it.Key)
			}
		}
	}
}

func (c *checker) envRefs(o Object, ns, ctr string, e corev1.EnvVar) {
	if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
		r := e.ValueFrom.SecretKeyRef
		if r.Optional == nil || !*r.Optional {
			c.secretKey(o, ns, r.Name, r.Key, "container "+ctr+" env "+e.Name)
		}
	}
	if e.Value != "" {
		c.addresses(o, ns, ctr, e)
	}
}

// secretKey checks that the render holds the Secret (and the key, when
// one is named).
func (c *checker) secretKey(o Object, ns, name, k, where string) {
	keys, ok := c.secrets[key(ns, name)]
	if !ok {
		c.missing(o, "%s: Secret %q is not in the render", where, name)
		return
	}
	if k != "" && !keys[k] {
		c.problem(o, "%s: Secret %q has no key %q", where, name, k)
	}
}

// selected returns the pod templates of ns that sel matches.
func (c *checker) selected(ns string, sel labels.Selector) []template {
	var out []template
	for _, t := range c.templates {
		if t.owner.Meta.GetNamespace() == ns && sel.Matches(labels.Set(t.labels)) {
			out = append(out, t)
		}
	}
	return out
}

func (c *checker) selects(o Object, ls *metav1.LabelSelector) {
	sel, err := metav1.LabelSelectorAsSelector(ls)
	if err != nil {
		c.problem(o, "selector: %v", err)
		return
	}
	if len(c.selected(o.Meta.GetNamespace(), sel)) == 0 {
		c.problem(o, "selector %s matches no pod template of the render", sel)
	}
}

func (c *checker) scaleTarget(o Object, h *autoscalingv2.HorizontalPodAutoscaler) {
	ref := h.Spec.ScaleTargetRef
	for _, t := range c.templates {
		if t.owner.GVK.Kind == ref.Kind && t.owner.Meta.GetName() == ref.Name && t.owner.Meta.GetNamespace() == o.Meta.GetNamespace() {
			return
		}
	}
	c.problem(o, "scaleTargetRef %s %q is not in the render", ref.Kind, ref.Name)
}

func (c *checker) service(o Object, s *corev1.Service) {
	names := map[string]bool{}
	for _, p := range s.Spec.Ports {
		if names[p.Name] {
			c.problem(o, "port name %q used twice", p.Name)
		}
		names[p.Name] = true
	}
	if len(s.Spec.Selector) == 0 {
		return
	}
	pods := c.selected(o.Meta.GetNamespace(), labels.SelectorFromSet(s.Spec.Selector))
	if len(pods) == 0 {
		c.problem(o, "selector %v matches no pod template of the render", s.Spec.Selector)
		return
	}
	for _, p := range s.Spec.Ports {
		name, number := "", int(p.TargetPort.IntVal)
		switch {
		case p.TargetPort.Type == intstr.String:
			name, number = p.TargetPort.StrVal, 0
		case number == 0:
			number = int(p.Port) // an unset target port is the Service port
		}
		for _, t := range pods {
			if !servesPort(t.spec, name, number, p.Protocol) {
				c.problem(o, "port %s: %s of %s exposes no %s port %s", p.Name, t.owner.GVK.Kind, t.owner.Meta.GetName(), protocol(p.Protocol), p.TargetPort.String())
			}
		}
	}
}

func protocol(p corev1.Protocol) corev1.Protocol {
	if p == "" {
		return corev1.ProtocolTCP
	}
	return p
}

// servesPort reports whether a container of the pod declares the port: by
// number when number > 0, else by name.
func servesPort(spec *corev1.PodSpec, name string, number int, proto corev1.Protocol) bool {
	for _, ctr := range spec.Containers {
		for _, cp := range ctr.Ports {
			if protocol(cp.Protocol) != protocol(proto) {
				continue
			}
			if number > 0 && int(cp.ContainerPort) == number || number == 0 && cp.Name == name {
				return true
			}
		}
	}
	return false
}

// addresses checks every in-cluster address in an env value (URLs and
// host:port lists, comma separated): its host must name a Service of the
// render (or a StatefulSet pod under its headless Service) that serves the
// port. Only hosts that look like cluster names are checked: a single
// label, or a name under ".svc".
func (c *checker) addresses(o Object, ns, ctr string, e corev1.EnvVar) {
	for part := range strings.SplitSeq(e.Value, ",") {
		host, port, ok := hostPort(strings.TrimSpace(part))
		if !ok {
			continue
		}
		labelsOf := strings.Split(host, ".")
		inCluster := len(labelsOf) == 1 || slices.Contains(labelsOf, "svc")
		if !inCluster || net.ParseIP(host) != nil || host == "localhost" {
			continue
		}
		c.address(o, ns, ctr, e.Name, host, labelsOf, port)
	}
}

func (c *checker) address(o Object, ns, ctr, env, host string, parts []string, port int) {
	// svc, svc.ns, svc.ns.svc[.domain], or pod.svc.ns.svc[.domain].
	svcName, svcNS, pod := parts[0], ns, ""
	if i := slices.Index(parts, "svc"); i >= 2 {
		svcName, svcNS = parts[i-2], parts[i-1]
		if i == 3 {
			pod = parts[0]
		}
	} else if len(parts) == 2 {
		svcNS = parts[1]
	}
	s, ok := c.services[key(svcNS, svcName)]
	if !ok {
		c.missing(o, "container %s env %s: %s names no Service of the render", ctr, env, host)
		return
	}
	pods := c.selected(svcNS, labels.SelectorFromSet(s.Spec.Selector))
	if pod != "" {
		c.statefulPod(o, ctr, env, host, svcName, pod, pods)
	}
	if s.Spec.ClusterIP == corev1.ClusterIPNone {
		// DNS gives the pods' addresses: the port is a container port.
		for _, t := range pods {
			if !servesPort(t.spec, "", port, corev1.ProtocolTCP) {
				c.problem(o, "container %s env %s: %s:%d: pods of %s serve no TCP port %d", ctr, env, host, port, t.owner.Meta.GetName(), port)
			}
		}
		return
	}
	for _, p := range s.Spec.Ports {
		if int(p.Port) == port && protocol(p.Protocol) == corev1.ProtocolTCP {
			return
		}
	}
	c.problem(o, "container %s env %s: Service %s has no TCP port %d", ctr, env, svcName, port)
}

// statefulPod checks a pod DNS name: a StatefulSet governed by the Service
// must have a pod of that name.
func (c *checker) statefulPod(o Object, ctr, env, host, svc, pod string, pods []template) {
	for _, t := range pods {
		if t.service != svc || t.replicas == 0 {
			continue
		}
		base := t.owner.Meta.GetName() + "-"
		if idx, ok := strings.CutPrefix(pod, base); ok {
			if i, err := strconv.ParseInt(idx, 10, 32); err == nil && i >= 0 && i < int64(t.replicas) {
				return
			}
		}
	}
	c.problem(o, "container %s env %s: %s names no StatefulSet pod governed by Service %s", ctr, env, host, svc)
}

// hostPort extracts host and port from a URL or a host:port; ok is false
// for anything else (paths, plain words, numbers).
func hostPort(s string) (string, int, bool) {
	if strings.Contains(s, "://") {
		u, err := url.Parse(s)
		if err != nil || u.Host == "" {
			return "", 0, false
		}
		port := u.Port()
		if port == "" {
			port = map[string]string{"http": "80", "https": "443"}[u.Scheme]
		}
		n, err := strconv.Atoi(port)
		return u.Hostname(), n, err == nil
	}
	h, p, err := net.SplitHostPort(s)
	if err != nil || h == "" {
		return "", 0, false
	}
	n, err := strconv.Atoi(p)
	return h, n, err == nil
}
