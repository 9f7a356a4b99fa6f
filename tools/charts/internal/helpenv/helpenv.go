// Package helpenv reads the environment variable names a stargate binary
// accepts from its --help table (FLAG, ENV, DEFAULT, MEANING columns, as
// pkg/cli prints it), so checks compare charts with the binary itself
// rather than with a copy of its flag list.
package helpenv

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
)

// envName is what pkg/cli accepts as a variable name.
var envName = regexp.MustCompile(`^[A-Z][A-Z0-9_]*$`)

// Parse returns the ENV column of the flag table, in the binary's order,
// without duplicates (two flags may share a variable, e.g. an alias).
func Parse(help string) ([]string, error) {
	lines := strings.Split(help, "\n")
	col := -1
	var names []string
	seen := map[string]bool{}
	for i, line := range lines {
		if col < 0 {
			if strings.HasPrefix(line, "FLAG") {
				col = strings.Index(line, " ENV ")
				if col < 0 {
					return nil, fmt.Errorf("line %d: the FLAG header has no ENV column", i+1)
				}
				col++
			}
			continue
		}
		if strings.TrimSpace(line) == "" {
			continue
		}
		if len(line) <= col || line[col-1] != ' ' {
			return nil, fmt.Errorf("line %d: no value in the ENV column: %q", i+1, line)
		}
		name := strings.Fields(line[col:])[0]
		if !envName.MatchString(name) {
			return nil, fmt.Errorf("line %d: %q in the ENV column is not a variable name", i+1, name)
		}
		if !seen[name] {
			seen[name] = true
			names = append(names, name)
		}
	}
	if col < 0 {
		return nil, errors.New("no flag table (a line starting with FLAG) in the help text")
	}
	if len(names) == 0 {
		return nil, errors.New("the flag table lists no variable")
	}
	return names, nil
}
