package main

import (
	"strings"
	"testing"
)

func TestParseFlags(t *testing.T) {
	o, err := parseFlags([]string{"-dsn", "postgres://x@127.0.0.1:1/db", "-pid", "42", "-steps", "10, 20,300"})
	if err != nil {
		t.Fatal(err)
	}
	if got := o.steps; len(got) != 3 || got[0] != 10 || got[1] != 20 || got[2] != 300 {
		t.Fatalf("steps = %v", got)
	}
	if o.query != "" {
		t.Fatalf("query = %q by default, want none", o.query)
	}
	if o, err := parseFlags([]string{"-dsn", "postgres://x@h/db", "-pid", "1", "-query", "SELECT 1"}); err != nil || o.query != "SELECT 1" {
		t.Fatalf("-query: %q, %v", o.query, err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-pid", "1"}, "-dsn and -pid are required"},
		{[]string{"-dsn", "postgres://x@h/db"}, "-dsn and -pid are required"},
		{[]string{"-dsn", "postgres://x@h/db", "-pid", "1", "-steps", "20,10"}, "want increasing"},
		{[]string{"-dsn", "postgres://x@h/db", "-pid", "1", "-steps", "a"}, "want increasing"},
		{[]string{"-dsn", "postgres://x@h/db", "-pid", "1", "-steps", "0"}, "want increasing"},
		{[]string{"-dsn", "postgres://x@h/db", "-pid", "1", "-parallel", "0"}, "-parallel"},
	} {
		if _, err := parseFlags(tc.args); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("parseFlags(%q) = %v, want an error containing %q", tc.args, err, tc.want)
		}
	}
}

func TestParseRSS(t *testing.T) {
	const status = "Name:\tpgbouncer\nVmPeak:\t  20000 kB\nVmRSS:\t   12345 kB\nRssAnon:\t 100 kB\n"
	if got, err := parseRSS(status, 7); err != nil || got != 12345 {
		t.Fatalf("parseRSS = %d, %v; want 12345", got, err)
	}
	if _, err := parseRSS("Name:\tkthreadd\n", 2); err == nil || !strings.Contains(err.Error(), "no VmRSS") {
		t.Fatalf("parseRSS without VmRSS = %v", err)
	}
}
