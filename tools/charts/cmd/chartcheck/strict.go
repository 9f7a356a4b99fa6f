package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/stargate-router/stargate/tools/charts/internal/manifest"
)

// listFlag collects a repeated flag.
type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }

func runStrict(args []string, stdin io.Reader, out io.Writer) error {
	fs := flag.NewFlagSet("strict", flag.ContinueOnError)
	stack := fs.Bool("stack", false, "the input is a whole deployment: Secrets, ConfigMaps and Services it refers to must be in it")
	var skip listFlag
	fs.Var(&skip, "skip-group", "API group to skip instead of decoding (repeatable), e.g. monitoring.coreos.com")
	label := fs.String("label", "", "name of the render in the summary line")
	if err := fs.Parse(args); err != nil {
		return err
	}
	dec, err := manifest.NewDecoder(skip)
	if err != nil {
		return err
	}
	r, closeAll, err := inputs(fs.Args(), stdin)
	if err != nil {
		return err
	}
	defer closeAll()
	objs, skipped, errs := dec.Decode(r)
	rep := manifest.Check(objs, manifest.Options{Stack: *stack})
	for _, s := range skipped {
		fmt.Fprintf(out, "  skipped %s %s %q (%s): not a k8s.io/api kind, not decoded\n", s.APIVersion, s.Kind, s.Name, s.Source)
	}
	for _, n := range rep.Notes {
		fmt.Fprintln(out, "  note:", n)
	}
	problems := len(errs) + len(rep.Problems)
	for _, e := range errs {
		fmt.Fprintln(out, "  FAIL:", e)
	}
	for _, p := range rep.Problems {
		fmt.Fprintln(out, "  FAIL:", p)
	}
	fmt.Fprintf(out, "strict %s: %d objects decoded (%s), %d skipped, %d problems\n", *label, len(objs), kinds(objs), len(skipped), problems)
	if problems > 0 {
		return errors.New("the render is not what Kubernetes would accept and run as intended")
	}
	if len(objs) == 0 {
		return errors.New("nothing rendered")
	}
	return nil
}

// kinds summarises the render, e.g. "Deployment 1, Service 2".
func kinds(objs []manifest.Object) string {
	n := map[string]int{}
	for _, o := range objs {
		n[o.GVK.Kind]++
	}
	names := make([]string, 0, len(n))
	for k := range n {
		names = append(names, k)
	}
	sort.Strings(names)
	parts := make([]string, len(names))
	for i, k := range names {
		parts[i] = fmt.Sprintf("%s %d", k, n[k])
	}
	return strings.Join(parts, ", ")
}
