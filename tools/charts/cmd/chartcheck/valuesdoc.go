package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/stargate-router/stargate/tools/charts/internal/valuesdoc"
)

func runValuesDoc(args []string, out io.Writer) error {
	fs := flag.NewFlagSet("values-doc", flag.ContinueOnError)
	docPath := fs.String("doc", "docs/deploy.md", "document holding the tables")
	write := fs.Bool("write", false, "rewrite the tables instead of checking them")
	if err := fs.Parse(args); err != nil {
		return err
	}
	raw, err := os.ReadFile(*docPath)
	if err != nil {
		return err
	}
	doc := string(raw)
	var errs []error
	for _, chart := range fs.Args() {
		values, err := os.ReadFile(filepath.Join(chart, "values.yaml")) // #nosec G304 -- charts named by the Makefile
		if err != nil {
			errs = append(errs, err)
			continue
		}
		rows, err := valuesdoc.Rows(values)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s/values.yaml: %w", chart, err))
			continue
		}
		next, err := valuesdoc.Splice(doc, filepath.ToSlash(filepath.Clean(chart)), valuesdoc.Table(rows))
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", *docPath, err))
			continue
		}
		fmt.Fprintf(out, "values-doc %s: %d values\n", chart, len(rows))
		doc = next
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	if doc == string(raw) {
		return nil
	}
	if *write {
		return os.WriteFile(*docPath, []byte(doc), 0o644) // #nosec G306 G703 -- the Makefile names a document of the repository
	}
	return fmt.Errorf("%s: the values tables are not current: run make charts-doc", *docPath)
}
