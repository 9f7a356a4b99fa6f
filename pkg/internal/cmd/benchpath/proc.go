package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
)

// userHZ is the unit of utime and stime in /proc/<pid>/stat. Linux
// reports them in USER_HZ, fixed at 100 for user space whatever the
// kernel's own tick rate, so no sysconf call (which needs cgo) is needed.
const userHZ = 100

// procSample is one process's counters at one instant, read from /proc.
type procSample struct {
	// CPUTicks is utime+stime of every thread, dead ones included, in
	// 1/userHZ s.
	CPUTicks uint64
	// SysR and SysW are /proc/<pid>/io's syscr and syscw: the read-class
	// (read, readv, pread...) and write-class (write, writev, ...) system
	// calls of every thread. Go's network I/O is read and write(v) on the
	// socket, so these count its socket calls; epoll, futex, accept and
	// the like are not counted anywhere in /proc.
	SysR, SysW uint64
	// Voluntary and Involuntary are context switches summed over the
	// live threads (/proc/<pid>/task/*/status): a voluntary one is a
	// thread going to sleep (waiting on epoll or a futex), which is how
	// the wakeups the syscall counters miss show up.
	Voluntary, Involuntary uint64
}

// procDelta is what a process spent between two samples.
type procDelta struct {
	CPUSeconds  float64 `json:"cpu_seconds"`
	SysR        uint64  `json:"syscr"`
	SysW        uint64  `json:"syscw"`
	Voluntary   uint64  `json:"voluntary_ctxt_switches"`
	Involuntary uint64  `json:"nonvoluntary_ctxt_switches"`
}

// syscalls is the read- and write-class system calls together.
func (d procDelta) syscalls() uint64 { return d.SysR + d.SysW }

// switches is the context switches of both kinds together.
func (d procDelta) switches() uint64 { return d.Voluntary + d.Involuntary }

// sub is the counters spent from a to b.
func (b procSample) sub(a procSample) procDelta {
	d := procDelta{CPUSeconds: float64(b.CPUTicks-a.CPUTicks) / userHZ, SysR: b.SysR - a.SysR, SysW: b.SysW - a.SysW}
	// Threads that exited take their switches with them, so a count may
	// go down; it is then taken as zero rather than wrapping.
	if b.Voluntary >= a.Voluntary {
		d.Voluntary = b.Voluntary - a.Voluntary
	}
	if b.Involuntary >= a.Involuntary {
		d.Involuntary = b.Involuntary - a.Involuntary
	}
	return d
}

// readProc reads pid's counters under root ("/proc", or a test's copy).
func readProc(root string, pid int) (procSample, error) {
	dir := filepath.Join(root, strconv.Itoa(pid))
	var s procSample
	stat, err := os.ReadFile(filepath.Join(dir, "stat")) //nolint:gosec // G304: /proc of a child this command started
	if err != nil {
		return s, err
	}
	if s.CPUTicks, err = parseStat(stat); err != nil {
		return s, fmt.Errorf("%s/stat: %w", dir, err)
	}
	io, err := os.ReadFile(filepath.Join(dir, "io")) //nolint:gosec // G304: as above
	if err != nil {
		return s, err
	}
	if s.SysR, s.SysW, err = parseIO(io); err != nil {
		return s, fmt.Errorf("%s/io: %w", dir, err)
	}
	tasks, err := filepath.Glob(filepath.Join(dir, "task", "*", "status"))
	if err != nil {
		return s, err
	}
	for _, t := range tasks {
		b, err := os.ReadFile(t) //nolint:gosec // G304: as above
		if err != nil {
			continue // the thread exited between the glob and the read
		}
		v, n, err := parseSwitches(b)
		if err != nil {
			return s, fmt.Errorf("%s: %w", t, err)
		}
		s.Voluntary += v
		s.Involuntary += n
	}
	return s, nil
}

// parseStat returns utime+stime from a /proc/<pid>/stat line. The command
// name (field 2) is in parentheses and may itself hold spaces or
// parentheses, so fields are counted from the last ')'.
func parseStat(b []byte) (uint64, error) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, errors.New("no command name")
	}
	// After ')' field 3 (state) comes first: field n is at index n-3.
	f := bytes.Fields(b[i+1:])
	if len(f) < 13 {
		return 0, fmt.Errorf("%d fields after the command name, want at least 13", len(f))
	}
	utime, err := strconv.ParseUint(string(f[14-3]), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("utime: %w", err)
	}
	stime, err := strconv.ParseUint(string(f[15-3]), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("stime: %w", err)
	}
	return utime + stime, nil
}

// parseIO returns syscr and syscw from /proc/<pid>/io.
func parseIO(b []byte) (syscr, syscw uint64, err error) {
	v, err := fields(b, "syscr:", "syscw:")
	return v[0], v[1], err
}

// parseSwitches returns the context switch counts of /proc/<pid>/status.
func parseSwitches(b []byte) (voluntary, involuntary uint64, err error) {
	v, err := fields(b, "voluntary_ctxt_switches:", "nonvoluntary_ctxt_switches:")
	return v[0], v[1], err
}

// fields reads the unsigned value of each "name: value" line named in
// names; every one must be present.
func fields(b []byte, names ...string) ([]uint64, error) {
	out := make([]uint64, len(names))
	found := make([]bool, len(names))
	for line := range bytes.SplitSeq(b, []byte("\n")) {
		for i, n := range names {
			rest, ok := bytes.CutPrefix(line, []byte(n))
			if !ok {
				continue
			}
			v, err := strconv.ParseUint(string(bytes.TrimSpace(rest)), 10, 64)
			if err != nil {
				return out, fmt.Errorf("%s %w", n, err)
			}
			out[i], found[i] = v, true
		}
	}
	for i, ok := range found {
		if !ok {
			return out, fmt.Errorf("no %s line", names[i])
		}
	}
	return out, nil
}
