package scrape

import (
	"bufio"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// Sample is one line of the text exposition format: a series and its value.
type Sample struct {
	Name   string
	Labels map[string]string
	Value  float64
}

// Text is a parsed exposition: the declared types by family name and the
// samples in order.
type Text struct {
	Types   map[string]string
	Samples []Sample
}

// ParseText reads the Prometheus text exposition format (version 0.0.4,
// what every binary here serves): # TYPE lines, samples with optional
// labels and timestamps. It is strict about what it reads, so a broken
// /metrics fails the check instead of passing it quietly.
func ParseText(r io.Reader) (Text, error) {
	t := Text{Types: map[string]string{}}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "":
		case strings.HasPrefix(line, "#"):
			f := strings.Fields(line)
			if len(f) >= 4 && f[1] == "TYPE" {
				t.Types[f[2]] = strings.ToLower(f[3])
			}
		default:
			s, err := sample(line)
			if err != nil {
				return t, fmt.Errorf("line %d: %w", n, err)
			}
			t.Samples = append(t.Samples, s)
		}
	}
	return t, sc.Err()
}

// sample parses `name{label="value",...} value [timestamp]`.
func sample(line string) (Sample, error) {
	s := Sample{Labels: map[string]string{}}
	i := 0
	for i < len(line) && line[i] != '{' && line[i] != ' ' && line[i] != '\t' {
		i++
	}
	s.Name = line[:i]
	if !validName(s.Name) {
		return s, fmt.Errorf("bad metric name %q", s.Name)
	}
	rest := line[i:]
	if strings.HasPrefix(rest, "{") {
		end, err := labels(rest, s.Labels)
		if err != nil {
			return s, fmt.Errorf("%s: %w", s.Name, err)
		}
		rest = rest[end:]
	}
	f := strings.Fields(rest)
	if len(f) < 1 || len(f) > 2 {
		return s, fmt.Errorf("%s: want a value and an optional timestamp, got %q", s.Name, rest)
	}
	v, err := strconv.ParseFloat(f[0], 64)
	if err != nil {
		return s, fmt.Errorf("%s: value %q: %w", s.Name, f[0], err)
	}
	s.Value = v
	return s, nil
}

// labels parses {a="b",...} at the start of s into into and returns the
// index after the closing brace.
func labels(s string, into map[string]string) (int, error) {
	i := 1
	for {
		for i < len(s) && (s[i] == ' ' || s[i] == ',') {
			i++
		}
		if i < len(s) && s[i] == '}' {
			return i + 1, nil
		}
		j := i
		for j < len(s) && s[j] != '=' {
			j++
		}
		name := strings.TrimSpace(s[i:j])
		if j+1 >= len(s) || s[j+1] != '"' || !validName(name) || strings.Contains(name, ":") {
			return 0, fmt.Errorf("bad label near %q", s[i:min(len(s), i+20)])
		}
		var val strings.Builder
		k := j + 2
		for ; k < len(s) && s[k] != '"'; k++ {
			if s[k] == '\\' && k+1 < len(s) {
				k++
				switch s[k] {
				case 'n':
					val.WriteByte('\n')
				default:
					val.WriteByte(s[k])
				}
				continue
			}
			val.WriteByte(s[k])
		}
		if k >= len(s) {
			return 0, fmt.Errorf("label %s: unterminated value", name)
		}
		into[name] = val.String()
		i = k + 1
	}
}

// validName reports whether n is a legacy Prometheus metric name.
func validName(n string) bool {
	if n == "" {
		return false
	}
	for i := 0; i < len(n); i++ {
		c := n[i]
		ok := c == '_' || c == ':' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (i > 0 && c >= '0' && c <= '9')
		if !ok {
			return false
		}
	}
	return true
}

// family returns the family a sample belongs to given the declared types:
// a histogram's _bucket, _sum and _count samples (a summary's _sum and
// _count) belong to the histogram's family.
func family(name string, types map[string]string) string {
	if _, ok := types[name]; ok {
		return name
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(name, suffix); ok {
			switch types[base] {
			case "histogram":
				return base
			case "summary":
				if suffix != "_bucket" {
					return base
				}
			}
		}
	}
	return name
}
