package configdoc

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"strings"
)

// Flag is one row of a binary's flag table.
type Flag struct {
	Name    string // with its leading "--"
	Env     string // "-" when the flag has no environment variable
	Default string // `""` for an empty default
	Meaning string
}

// Binary is one binary's configuration: its one-line summary and flags.
type Binary struct {
	Name    string
	Summary string
	Flags   []Flag
}

// ErrNoTable reports help text without the FLAG/ENV/DEFAULT/MEANING table.
var ErrNoTable = errors.New("no FLAG ENV DEFAULT MEANING table in the help text")

// Parse reads a binary's --help output. The table is aligned in columns
// (text/tabwriter), so the header's column starts cut every row; only the
// last column, the meaning, may hold spaces.
func Parse(name string, help io.Reader) (Binary, error) {
	b := Binary{Name: name}
	sc := bufio.NewScanner(help)
	var cols [3]int // starts of ENV, DEFAULT, MEANING
	inTable := false
	for sc.Scan() {
		line := sc.Text()
		switch {
		case !inTable && strings.HasPrefix(line, "FLAG "):
			for i, h := range []string{" ENV ", " DEFAULT ", " MEANING"} {
				at := strings.Index(line, h)
				if at < 0 {
					return b, fmt.Errorf("%s: %w", name, ErrNoTable)
				}
				cols[i] = at + 1
			}
			inTable = true
		case !inTable:
			if b.Summary == "" && strings.TrimSpace(line) != "" {
				b.Summary = strings.TrimSpace(line)
			}
		case strings.TrimSpace(line) == "":
			inTable = false
		default:
			f, err := row(line, cols)
			if err != nil {
				return b, fmt.Errorf("%s: %w", name, err)
			}
			b.Flags = append(b.Flags, f)
		}
	}
	if err := sc.Err(); err != nil {
		return b, err
	}
	if len(b.Flags) == 0 {
		return b, fmt.Errorf("%s: %w", name, ErrNoTable)
	}
	return b, nil
}

// row cuts one table line at the column starts.
func row(line string, cols [3]int) (Flag, error) {
	if len(line) <= cols[2] || !strings.HasPrefix(line, "--") {
		return Flag{}, fmt.Errorf("malformed flag row %q", line)
	}
	f := Flag{
		Name:    strings.TrimSpace(line[:cols[0]]),
		Env:     strings.TrimSpace(line[cols[0]:cols[1]]),
		Default: strings.TrimSpace(line[cols[1]:cols[2]]),
		Meaning: strings.TrimSpace(line[cols[2]:]),
	}
	if f.Name == "" || f.Env == "" || f.Default == "" || strings.Contains(f.Name, " ") || strings.Contains(f.Env, " ") {
		return Flag{}, fmt.Errorf("malformed flag row %q", line)
	}
	return f, nil
}

// Render writes the configuration reference for bins, in order. Defaults
// that depend on the machine the generator ran on are replaced by what
// they stand for, so the document is the same everywhere.
func Render(w io.Writer, bins []Binary, hostDependent map[string]string) error {
	var b strings.Builder
	b.WriteString(header)
	for _, bin := range bins {
		fmt.Fprintf(&b, "\n## %s\n\n%s\n\n", bin.Name, bin.Summary)
		b.WriteString("| flag | environment | default | meaning |\n| --- | --- | --- | --- |\n")
		for _, f := range bin.Flags {
			def := f.Default
			if v, ok := hostDependent[def]; ok {
				def = v
			} else {
				def = "`" + def + "`"
			}
			fmt.Fprintf(&b, "| `%s` | `%s` | %s | %s |\n", f.Name, f.Env, def, cell(f.Meaning))
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// cell escapes what would end a Markdown table cell.
func cell(s string) string { return strings.ReplaceAll(s, "|", `\|`) }

const header = `# Configuration reference

Every flag of the deployable binaries, with its environment variable and
default. A flag on the command line wins over its environment variable;
configuration is validated at startup and an error names the flag.

This file is generated from the binaries' own ` + "`--help`" + ` by
` + "`make config-doc`" + ` (pkg/internal/cmd/configdoc); ` + "`make test`" + ` regenerates it
and fails if it differs, so it cannot drift from the code. Do not edit it
by hand: change the flag's usage text instead. What the settings mean in
practice is in each binary's guide: [gateway](gateway.md), [hub](hub.md),
[load balancing](load-balancing.md), [pylon](pylon.md),
[mock engine](mock-engine.md); the Helm values that set them are in
[deploy.md](deploy.md).
`
