package main

import (
	"bytes"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"time"
)

// meta is what the report says about the run and the machine.
type meta struct {
	Command           string
	Commit            string
	Dirty             bool
	CPUs              int
	CPUModel, Kernel  string
	GoVersion         string
	LoadStart         string
	LoadEnd           string
	Started, Finished time.Time
	o                 options
}

// newMeta reads the commit and the machine at the start of a run.
func newMeta(o options) meta {
	m := meta{Command: strings.Join(append([]string{"benchpath"}, os.Args[1:]...), " "), CPUs: runtime.NumCPU(), GoVersion: runtime.Version(),
		Started: time.Now().UTC(), LoadStart: loadavg(), o: o}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		m.CPUModel = cpuModel(b)
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	if out, err := gitOutput(o.src, "rev-parse", "HEAD"); err == nil {
		m.Commit = out
	}
	if out, err := gitOutput(o.src, "status", "--porcelain", "--untracked-files=no"); err == nil {
		m.Dirty = out != ""
	}
	return m
}

// finish notes the end of the run.
func (m *meta) finish() { m.Finished, m.LoadEnd = time.Now().UTC(), loadavg() }

// gitOutput runs a read-only git command in dir.
func gitOutput(dir string, args ...string) (string, error) {
	cmd := exec.Command("git", args...) //nolint:gosec // G204: read-only git commands this file spells out
	cmd.Dir = dir
	out, err := cmd.Output()
	return strings.TrimSpace(string(out)), err
}

// loadavg is the first three fields of /proc/loadavg: another user of the
// machine shows there.
func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	return strings.Join(f[:min(3, len(f))], " ")
}

// cpuModel is the first "model name" of /proc/cpuinfo.
func cpuModel(cpuinfo []byte) string {
	for line := range bytes.SplitSeq(cpuinfo, []byte("\n")) {
		k, v, ok := bytes.Cut(line, []byte(":"))
		if ok && string(bytes.TrimSpace(k)) == "model name" {
			return string(bytes.TrimSpace(v))
		}
	}
	return "unknown"
}
