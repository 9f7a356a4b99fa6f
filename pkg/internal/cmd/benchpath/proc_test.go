package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParseStat(t *testing.T) {
	for _, tc := range []struct {
		name, line string
		want       uint64
	}{
		{"plain", "1234 (hub) S 1 1234 1234 0 -1 4194560 2000 0 0 0 150 37 0 0 20 0 12 0 100 0 0", 187},
		// A command name may hold spaces and parentheses: fields are
		// counted from the last ')'.
		{"odd name", "77 (a (b) c) R 1 77 77 0 -1 0 0 0 0 0 9 1 0 0 20 0 1 0 5 0 0", 10},
	} {
		got, err := parseStat([]byte(tc.line))
		if err != nil || got != tc.want {
			t.Errorf("%s: parseStat = %d, %v; want %d", tc.name, got, err, tc.want)
		}
	}
	for _, bad := range []string{"no name at all", "1 (x) S 1 2 3", "1 (x) S 1 1 1 0 -1 0 0 0 0 0 u 1 0"} {
		if _, err := parseStat([]byte(bad)); err == nil {
			t.Errorf("parseStat(%q) succeeded", bad)
		}
	}
}

func TestParseIOAndSwitches(t *testing.T) {
	io := "rchar: 6976\nwchar: 12\nsyscr: 10\nsyscw: 4\nread_bytes: 0\n"
	r, w, err := parseIO([]byte(io))
	if err != nil || r != 10 || w != 4 {
		t.Errorf("parseIO = %d, %d, %v; want 10, 4", r, w, err)
	}
	if _, _, err := parseIO([]byte("syscr: 10\n")); err == nil || !strings.Contains(err.Error(), "syscw") {
		t.Errorf("parseIO without syscw: %v", err)
	}
	if _, _, err := parseIO([]byte("syscr: x\nsyscw: 1\n")); err == nil {
		t.Error("parseIO with a bad number succeeded")
	}
	// "nonvoluntary_ctxt_switches" must not be read as the voluntary count.
	st := "Name:\thub\nnonvoluntary_ctxt_switches:\t3\nvoluntary_ctxt_switches:\t41\n"
	v, n, err := parseSwitches([]byte(st))
	if err != nil || v != 41 || n != 3 {
		t.Errorf("parseSwitches = %d, %d, %v; want 41, 3", v, n, err)
	}
}

// fakeProc writes a /proc/<pid> tree with two threads.
func fakeProc(t *testing.T, pid string, utime, stime, syscr, syscw string, switches [][2]string) string {
	t.Helper()
	root := t.TempDir()
	dir := filepath.Join(root, pid)
	write := func(rel, content string) {
		p := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o750); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("stat", pid+" (pylon) S 1 1 1 0 -1 0 0 0 0 0 "+utime+" "+stime+" 0 0 20 0 2 0 9 0 0\n")
	write("io", "rchar: 1\nwchar: 1\nsyscr: "+syscr+"\nsyscw: "+syscw+"\n")
	for i, sw := range switches {
		write(filepath.Join("task", pid+string(rune('0'+i)), "status"),
			"voluntary_ctxt_switches:\t"+sw[0]+"\nnonvoluntary_ctxt_switches:\t"+sw[1]+"\n")
	}
	return root
}

func TestReadProcSumsThreads(t *testing.T) {
	root := fakeProc(t, "42", "120", "30", "500", "300", [][2]string{{"10", "1"}, {"5", "2"}})
	s, err := readProc(root, 42)
	if err != nil {
		t.Fatal(err)
	}
	if want := (procSample{CPUTicks: 150, SysR: 500, SysW: 300, Voluntary: 15, Involuntary: 3}); s != want {
		t.Errorf("readProc = %+v, want %+v", s, want)
	}
	if _, err := readProc(root, 43); err == nil {
		t.Error("readProc of a missing pid succeeded")
	}
}

func TestSampleSub(t *testing.T) {
	a := procSample{CPUTicks: 100, SysR: 10, SysW: 5, Voluntary: 50, Involuntary: 7}
	b := procSample{CPUTicks: 350, SysR: 40, SysW: 25, Voluntary: 40, Involuntary: 9}
	d := b.sub(a)
	// 250 ticks at 100 per second; a thread that exited took its
	// switches along, so the voluntary count went down: zero, not a wrap.
	if d.CPUSeconds != 2.5 || d.syscalls() != 50 || d.Voluntary != 0 || d.Involuntary != 2 || d.switches() != 2 {
		t.Errorf("sub = %+v", d)
	}
}

// The real /proc of this process parses: the test has read files, so it
// has made read-class calls.
func TestReadProcSelf(t *testing.T) {
	s, err := readProc("/proc", os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if s.SysR == 0 || s.Voluntary+s.Involuntary == 0 {
		t.Errorf("readProc(self) = %+v: no reads or switches", s)
	}
}
