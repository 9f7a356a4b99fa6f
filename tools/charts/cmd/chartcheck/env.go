package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/stargate-router/stargate/tools/charts/internal/envcheck"
	"github.com/stargate-router/stargate/tools/charts/internal/helpenv"
	"github.com/stargate-router/stargate/tools/charts/internal/manifest"
)

func runEnv(args []string, out io.Writer) error {
	fs := flag.NewFlagSet("env", flag.ContinueOnError)
	helm := fs.String("helm", "helm", "helm binary")
	chart := fs.String("chart", "", "chart directory")
	binary := fs.String("binary", "", "the binary whose --help lists the variables")
	container := fs.String("container", "", "name of the binary's container in the chart's workloads")
	runtime := fs.String("runtime", "GOMEMLIMIT", "comma-separated names the chart may set that are not flags")
	var values listFlag
	fs.Var(&values, "values", "values file with every feature of the chart on (repeatable)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *chart == "" || *binary == "" || *container == "" {
		return errors.New("-chart, -binary and -container are required")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	helpText, err := exec.CommandContext(ctx, *binary, "--help").CombinedOutput() // #nosec G204 -- the Makefile names the binary
	if err != nil {
		return fmt.Errorf("%s --help: %w", *binary, err)
	}
	help, err := helpenv.Parse(string(helpText))
	if err != nil {
		return fmt.Errorf("%s --help: %w", *binary, err)
	}
	allowed, err := envcheck.SchemaConfigNames(filepath.Join(*chart, "values.schema.json"))
	if err != nil {
		return err
	}
	r := renderer{helm: *helm, chart: *chart, values: values, container: *container}
	plain, err := r.env(ctx, nil)
	if err != nil {
		return err
	}
	probe := map[string]string{}
	for _, n := range allowed {
		probe[n] = envcheck.Probe(n)
	}
	probed, err := r.env(ctx, probe)
	if err != nil {
		return err
	}
	runtimeNames := strings.Split(*runtime, ",")
	rendered := make([]string, 0, len(plain))
	for n := range plain {
		rendered = append(rendered, n)
	}
	problems := envcheck.Check(envcheck.Input{Chart: *chart, Help: help, Allowed: allowed, Rendered: rendered,
		Runtime: runtimeNames, Probed: probed})
	for _, p := range problems {
		fmt.Fprintln(out, "  FAIL:", p)
	}
	wired := 0
	for _, n := range rendered {
		if _, ok := probe[n]; !ok && !slices.Contains(runtimeNames, n) {
			wired++
		}
	}
	fmt.Fprintf(out, "env %s: %d variables in %s --help; %d wired by the templates, %d settable under config; %d problems\n",
		*chart, len(help), filepath.Base(*binary), wired, len(allowed), len(problems))
	if len(problems) > 0 {
		return errors.New("the chart cannot set every setting of its binary")
	}
	return nil
}

// renderer renders a chart and reads its binary's container env.
type renderer struct {
	helm, chart, container string
	values                 []string
}

// env renders with config set to cfg (nil: as the values files say) and
// returns the env of the container, the same in every workload that runs
// it (pylon renders one workload per backend).
func (r renderer) env(ctx context.Context, cfg map[string]string) (map[string]string, error) {
	args := []string{"template", "envcheck", r.chart, "--namespace", "envcheck"}
	for _, v := range r.values {
		args = append(args, "-f", v)
	}
	if cfg != nil {
		doc, err := yaml.Marshal(map[string]any{"config": cfg})
		if err != nil {
			return nil, err
		}
		f, err := os.CreateTemp("", "envcheck-*.yaml")
		if err != nil {
			return nil, err
		}
		defer func() { _ = os.Remove(f.Name()) }()
		if _, err := f.Write(doc); err != nil {
			return nil, err
		}
		if err := f.Close(); err != nil {
			return nil, err
		}
		args = append(args, "-f", f.Name())
	}
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, r.helm, args...) // #nosec G204 -- the Makefile names helm and the chart
	cmd.Stderr = &stderr
	rendered, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("helm %s: %w: %s", strings.Join(args, " "), err, stderr.String())
	}
	dec, err := manifest.NewDecoder([]string{"monitoring.coreos.com"})
	if err != nil {
		return nil, err
	}
	objs, _, errs := dec.Decode(bytes.NewReader(rendered))
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	var env map[string]string
	for _, o := range objs {
		spec := podSpec(o)
		if spec == nil {
			continue
		}
		for _, c := range spec.Containers {
			if c.Name != r.container {
				continue
			}
			got := map[string]string{}
			for _, e := range c.Env {
				got[e.Name] = e.Value
			}
			if env != nil && !sameKeys(env, got) {
				return nil, fmt.Errorf("%s: container %s sets other variables than the first workload's", o.Ref(), r.container)
			}
			env = got
		}
	}
	if env == nil {
		return nil, fmt.Errorf("no workload of %s runs a container named %s", r.chart, r.container)
	}
	return env, nil
}

func podSpec(o manifest.Object) *corev1.PodSpec {
	switch v := o.Obj.(type) {
	case *appsv1.Deployment:
		return &v.Spec.Template.Spec
	case *appsv1.StatefulSet:
		return &v.Spec.Template.Spec
	case *appsv1.DaemonSet:
		return &v.Spec.Template.Spec
	}
	return nil
}

func sameKeys(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k := range a {
		if _, ok := b[k]; !ok {
			return false
		}
	}
	return true
}

func runEnvValues(args []string, stdin io.Reader, out io.Writer) error {
	fs := flag.NewFlagSet("env-values", flag.ContinueOnError)
	name := fs.String("name", "", "environment variable to print")
	all := fs.String("all", "", "print every variable of this container as NAME=VALUE instead (a field of the pod as NAME=@fieldRef:PATH)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if (*name == "") == (*all == "") {
		return errors.New("give -name or -all")
	}
	r, closeAll, err := inputs(fs.Args(), stdin)
	if err != nil {
		return err
	}
	defer closeAll()
	dec, err := manifest.NewDecoder([]string{"monitoring.coreos.com"})
	if err != nil {
		return err
	}
	objs, _, errs := dec.Decode(r)
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	for _, o := range objs {
		spec := podSpec(o)
		if spec == nil {
			continue
		}
		for _, c := range spec.Containers {
			for _, e := range c.Env {
				switch {
				case *all != "" && c.Name == *all && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil:
					fmt.Fprintf(out, "%s=@fieldRef:%s\n", e.Name, e.ValueFrom.FieldRef.FieldPath)
				case *all != "" && c.Name == *all:
					fmt.Fprintf(out, "%s=%s\n", e.Name, e.Value)
				case e.Name == *name:
					fmt.Fprintln(out, e.Value)
				}
			}
		}
	}
	return nil
}

// inputs reads the named files one after another, or stdin without names.
func inputs(names []string, stdin io.Reader) (io.Reader, func(), error) {
	if len(names) == 0 {
		return stdin, func() {}, nil
	}
	var (
		readers []io.Reader
		files   []*os.File
	)
	closeAll := func() {
		for _, f := range files {
			_ = f.Close()
		}
	}
	for _, n := range names {
		f, err := os.Open(n) // #nosec G304 -- the caller names the files to read
		if err != nil {
			closeAll()
			return nil, nil, err
		}
		files = append(files, f)
		// A file may end without a newline: keep the next one's first
		// document apart.
		readers = append(readers, f, strings.NewReader("\n---\n"))
	}
	return io.MultiReader(readers...), closeAll, nil
}
