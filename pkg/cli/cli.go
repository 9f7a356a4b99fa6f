package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// ErrHelp is returned by Parse when -h or --help was given; the help text has
// already been written and the binary should exit 0.
var ErrHelp = flag.ErrHelp

// FlagSet is a flag.FlagSet in which every flag also reads an environment
// variable.
type FlagSet struct {
	fs      *flag.FlagSet
	out     io.Writer
	summary string
	entries []entry
}

type entry struct {
	name, env, usage string
}

// New returns a FlagSet for the binary name. summary is printed above the
// flag table by --help; out receives help and parse errors.
func New(name, summary string, out io.Writer) *FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(out)
	f := &FlagSet{fs: fs, out: out, summary: summary}
	fs.Usage = f.usage
	return f
}

// String defines a string flag read also from env.
func (f *FlagSet) String(p *string, name, env, def, usage string) {
	f.fs.StringVar(p, name, def, usage)
	f.add(name, env, usage)
}

// Int defines an int flag read also from env.
func (f *FlagSet) Int(p *int, name, env string, def int, usage string) {
	f.fs.IntVar(p, name, def, usage)
	f.add(name, env, usage)
}

// Int64 defines an int64 flag read also from env.
func (f *FlagSet) Int64(p *int64, name, env string, def int64, usage string) {
	f.fs.Int64Var(p, name, def, usage)
	f.add(name, env, usage)
}

// Uint64 defines a uint64 flag read also from env.
func (f *FlagSet) Uint64(p *uint64, name, env string, def uint64, usage string) {
	f.fs.Uint64Var(p, name, def, usage)
	f.add(name, env, usage)
}

// Float64 defines a float64 flag read also from env.
func (f *FlagSet) Float64(p *float64, name, env string, def float64, usage string) {
	f.fs.Float64Var(p, name, def, usage)
	f.add(name, env, usage)
}

// Bool defines a bool flag read also from env.
func (f *FlagSet) Bool(p *bool, name, env string, def bool, usage string) {
	f.fs.BoolVar(p, name, def, usage)
	f.add(name, env, usage)
}

// Duration defines a time.Duration flag (Go syntax: 250ms, 10s) read also
// from env.
func (f *FlagSet) Duration(p *time.Duration, name, env string, def time.Duration, usage string) {
	f.fs.DurationVar(p, name, def, usage)
	f.add(name, env, usage)
}

// Alias makes old an alternative spelling of the existing flag name, for
// the names upstream Stargate's binaries use, so deployment scripts written
// for them keep working. It has no env var of its own and is listed under
// the flag it aliases.
func (f *FlagSet) Alias(old, name string) {
	fl := f.fs.Lookup(name)
	if fl == nil {
		panic("cli: alias for undefined flag " + name)
	}
	f.fs.Var(fl.Value, old, "alias of --"+name)
	for i := range f.entries {
		if f.entries[i].name == name {
			f.entries[i].usage += " (alias --" + old + ")"
		}
	}
}

func (f *FlagSet) add(name, env, usage string) {
	if env != "" && slices.ContainsFunc(f.entries, func(e entry) bool { return e.env == env }) {
		panic("cli: env var " + env + " bound twice")
	}
	f.entries = append(f.entries, entry{name: name, env: env, usage: usage})
}

// Parse applies the environment (through getenv), then args. A bad
// environment value is reported with the variable and its flag; unknown
// flags and stray arguments are errors.
func (f *FlagSet) Parse(args []string, getenv func(string) string) error {
	for _, e := range f.entries {
		if e.env == "" {
			continue
		}
		v := getenv(e.env)
		if v == "" {
			continue
		}
		if err := f.fs.Set(e.name, v); err != nil {
			return fmt.Errorf("environment variable %s (flag --%s): %w", e.env, e.name, err)
		}
	}
	if err := f.fs.Parse(args); err != nil {
		return err
	}
	if f.fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q: every setting is a --flag", f.fs.Arg(0))
	}
	return nil
}

// Set reports whether the flag name was given on the command line or
// through its environment variable.
func (f *FlagSet) Set(name string) bool {
	found := false
	f.fs.Visit(func(fl *flag.Flag) {
		if fl.Name == name {
			found = true
		}
	})
	return found
}

func (f *FlagSet) usage() {
	var b strings.Builder
	if f.summary != "" {
		b.WriteString(f.summary)
		b.WriteString("\n\n")
	}
	fmt.Fprintf(&b, "Usage: %s [flags]\n\nEvery flag can also be set through its environment variable; a flag on the\ncommand line wins over the environment.\n\n", f.fs.Name())
	tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "FLAG\tENV\tDEFAULT\tMEANING")
	for _, e := range f.entries {
		def := f.fs.Lookup(e.name).DefValue
		if def == "" {
			def = `""`
		}
		env := e.env
		if env == "" {
			env = "-"
		}
		fmt.Fprintf(tw, "--%s\t%s\t%s\t%s\n", e.name, env, def, e.usage)
	}
	_ = tw.Flush()
	_, _ = io.WriteString(f.out, b.String())
}

// IsHelp reports whether err is the --help request.
func IsHelp(err error) bool { return errors.Is(err, ErrHelp) }

// Millis defines a duration flag given as a number of milliseconds (decimals
// allowed), for flag names that carry an -ms suffix by contract.
func (f *FlagSet) Millis(p *time.Duration, name, env string, def time.Duration, usage string) {
	*p = def
	f.fs.Var((*millis)(p), name, usage)
	f.add(name, env, usage)
}

type millis time.Duration

func (m *millis) String() string {
	if m == nil {
		return "0"
	}
	return strconv.FormatFloat(float64(*m)/float64(time.Millisecond), 'f', -1, 64)
}

func (m *millis) Set(s string) error {
	v, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsNaN(v) || math.IsInf(v, 0) || math.Abs(v) > float64(math.MaxInt64/int64(time.Millisecond)) {
		return fmt.Errorf("want a number of milliseconds, got %q", s)
	}
	*m = millis(time.Duration(v * float64(time.Millisecond)))
	return nil
}

// ReadSecretFile reads a token or key file as operators mount them (a
// Kubernetes Secret): trimmed, and an empty file is an error. Callers
// re-read it on every use so a rotated secret takes effect without a
// restart; the value is never logged.
func ReadSecretFile(path string) (string, error) {
	b, err := os.ReadFile(path) //nolint:gosec // G304: the operator names this file.
	if err != nil {
		return "", err
	}
	tok := strings.TrimSpace(string(b))
	if tok == "" {
		return "", fmt.Errorf("%s is empty", path)
	}
	return tok, nil
}
