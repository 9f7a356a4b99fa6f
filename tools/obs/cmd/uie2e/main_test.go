package main

import (
	"io"
	"reflect"
	"strings"
	"testing"
)

func TestParseOptions(t *testing.T) {
	o, err := parseOptions([]string{"-bin", "/b"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if o.bin != "/b" || o.chromium != "/usr/bin/chromium" || !strings.HasPrefix(o.out, "results/ui-e2e-") || o.width != 1600 || o.height != 2400 {
		t.Errorf("defaults: %+v", o)
	}
	want := []string{"--sessions", "64", "--turns", "4", "--workers", "96", "--affinity-wait-ms", "20", "--prefix-affinity"}
	if got := o.demoArgs(); !reflect.DeepEqual(got, want) {
		t.Errorf("demo args %v, want %v", got, want)
	}
	for _, args := range [][]string{{"-turns", "1"}, {"-workers", "0"}, {"-timeout", "0s"}, {"-affinity-wait-ms", "-1"}, {"stray"}} {
		if _, err := parseOptions(args, io.Discard); err == nil {
			t.Errorf("%v: accepted", args)
		}
	}
}
