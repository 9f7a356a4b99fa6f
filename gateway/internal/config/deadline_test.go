package config

import (
	"io"
	"strings"
	"testing"
	"time"
)

// TestRequestDeadline: --request-deadline is off (0) by default, so a
// client that sends no timeout keeps today's behaviour; it comes from its
// flag or variable and refuses a negative value or one above a day,
// naming the flag and the variable.
func TestRequestDeadline(t *testing.T) {
	c, err := Load([]string{"--insecure-no-auth"}, env(nil), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.RequestDeadline != 0 {
		t.Fatalf("default %v; want 0 (none)", c.RequestDeadline)
	}
	c, err = Load([]string{"--insecure-no-auth"}, env(map[string]string{"GATEWAY_REQUEST_DEADLINE": "90s"}), io.Discard)
	if err != nil || c.RequestDeadline != 90*time.Second {
		t.Fatalf("%v: %v; want 90s", err, c.RequestDeadline)
	}
	c, err = Load([]string{"--insecure-no-auth", "--request-deadline", "24h"}, env(nil), io.Discard)
	if err != nil || c.RequestDeadline != 24*time.Hour {
		t.Fatalf("%v: %v; want 24h (the bound is allowed)", err, c.RequestDeadline)
	}
	for _, bad := range []string{"-1s", "24h0m1s", "25h"} {
		_, err := Load([]string{"--insecure-no-auth", "--request-deadline", bad}, env(nil), io.Discard)
		if err == nil || !strings.Contains(err.Error(), "--request-deadline (GATEWAY_REQUEST_DEADLINE)") {
			t.Errorf("--request-deadline %s: err %v; want one naming the flag and variable", bad, err)
		}
	}
}
