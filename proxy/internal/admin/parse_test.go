package admin

import (
	"strings"
	"testing"
)

func TestParseQuery(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []string
	}{
		{"SHOW POOLS", []string{"SHOW POOLS"}},
		{"show pools;  show  stats ;", []string{"SHOW pools", "SHOW stats"}},
		{"-- ping", nil},
		{"/* a */ PAUSE shard0 -- b\n; resume", []string{"PAUSE shard0", "RESUME"}},
		{";;", nil},
	} {
		var got []string
		for _, c := range parseQuery(tc.in) {
			got = append(got, strings.Join(append([]string{c.verb}, c.args...), " "))
		}
		if strings.Join(got, "|") != strings.Join(tc.want, "|") {
			t.Errorf("parseQuery(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
