package main

import (
	"strings"
	"testing"
)

func TestRunRejectsABadTarget(t *testing.T) {
	for _, target := range []string{"", "127.0.0.1:8090", "http://", "::"} {
		err := run([]string{"--listen", "127.0.0.1:0", "--target", target})
		if err == nil || !strings.Contains(err.Error(), "--target") {
			t.Errorf("--target %q: got %v, want an error naming --target", target, err)
		}
	}
}
