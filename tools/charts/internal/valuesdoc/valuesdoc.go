// Package valuesdoc turns a chart's values.yaml into the table of its
// values in docs/deploy.md, from the "# --" comment above each value, so
// the table is never older than the chart. A value without such a comment
// is an error: every value a chart reads is documented.
package valuesdoc

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"gopkg.in/yaml.v3"
)

// Row documents one value.
type Row struct {
	Path    string // dotted, e.g. olric.replicaCount
	Default string // compact JSON of the default
	Doc     string
}

// Rows reads values.yaml. A key whose comment starts with "# --" is one
// row, its whole value the default (so a map such as resources is one
// row); a map without such a comment is a group: its keys are rows.
func Rows(values []byte) ([]Row, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(values, &doc); err != nil {
		return nil, err
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) != 1 || doc.Content[0].Kind != yaml.MappingNode {
		return nil, errors.New("values.yaml is not a mapping")
	}
	var rows []Row
	var errs []error
	walk(doc.Content[0], "", &rows, &errs)
	return rows, errors.Join(errs...)
}

func walk(m *yaml.Node, prefix string, rows *[]Row, errs *[]error) {
	for i := 0; i+1 < len(m.Content); i += 2 {
		k, v := m.Content[i], m.Content[i+1]
		path := prefix + k.Value
		text, ok := description(k.HeadComment)
		switch {
		case ok:
			def, err := compact(v)
			if err != nil {
				*errs = append(*errs, fmt.Errorf("%s: %w", path, err))
				continue
			}
			*rows = append(*rows, Row{Path: path, Default: def, Doc: text})
		case v.Kind == yaml.MappingNode && len(v.Content) > 0:
			walk(v, path+".", rows, errs)
		default:
			*errs = append(*errs, fmt.Errorf("%s (line %d) has no \"# --\" comment", path, k.Line))
		}
	}
}

// description is the "# --" paragraph of a head comment: the line that
// starts it and the comment lines after it.
func description(head string) (string, bool) {
	var parts []string
	found := false
	for line := range strings.SplitSeq(head, "\n") {
		line = strings.TrimSpace(line)
		if rest, ok := strings.CutPrefix(line, "# --"); ok {
			found, parts = true, []string{strings.TrimSpace(rest)}
			continue
		}
		if found {
			if line == "" {
				break
			}
			parts = append(parts, strings.TrimSpace(strings.TrimPrefix(line, "#")))
		}
	}
	return strings.Join(parts, " "), found
}

func compact(v *yaml.Node) (string, error) {
	var x any
	if err := v.Decode(&x); err != nil {
		return "", err
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(x); err != nil {
		return "", err
	}
	return strings.TrimSpace(b.String()), nil
}

// Table renders rows as a Markdown table.
func Table(rows []Row) string {
	var b strings.Builder
	b.WriteString("| value | default | meaning |\n| --- | --- | --- |\n")
	for _, r := range rows {
		fmt.Fprintf(&b, "| `%s` | `%s` | %s |\n", r.Path, cell(r.Default), cell(r.Doc))
	}
	return b.String()
}

func cell(s string) string { return strings.ReplaceAll(s, "|", `\|`) }

// Splice replaces the table between the markers of chart in doc:
//
//	<!-- values: charts/gateway -->
//	...
//	<!-- end values -->
func Splice(doc, chart, table string) (string, error) {
	begin := "<!-- values: " + chart + " -->\n"
	const end = "<!-- end values -->"
	i := strings.Index(doc, begin)
	if i < 0 {
		return "", fmt.Errorf("no %q marker", strings.TrimSpace(begin))
	}
	j := strings.Index(doc[i:], end)
	if j < 0 {
		return "", fmt.Errorf("no %q after the %s marker", end, chart)
	}
	start := i + len(begin)
	return doc[:start] + table + doc[i+j:], nil
}
