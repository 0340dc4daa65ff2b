package cli_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/pgshard/pgshard/cluster/clustertest"
)

// TestStoreDemo runs `pgshard store demo` against a migrated database of
// the shared cluster, through PgBouncer and directly: every execution is
// found on its shard at version 2 with its outbox rows, placement checks
// pass, and the table accounts for every execution.
func TestStoreDemo(t *testing.T) {
	m := clustertest.MigratedMap(t, clustertest.Get(t))
	data, err := m.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(t.TempDir(), "shardmap.yaml")
	if err := os.WriteFile(cfg, data, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name string
		args []string
		via  string
	}{
		{"pgbouncer", nil, "through each shard's PgBouncer"},
		{"direct", []string{"--direct"}, "directly"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := mustRun(t, "", append([]string{"store", "demo", "--config", cfg, "--executions", "60"}, tt.args...)...)
			out := r.stdout
			for _, want := range []string{"committed 60 executions through the router " + tt.via, "120 commits, 120 round trips (1.00 per commit)",
				"shard0", "shard1", "shard2", "shard3", "placement checked"} {
				if !strings.Contains(out, want) {
					t.Errorf("output lacks %q:\n%s", want, out)
				}
			}
			total := regexp.MustCompile(`(?m)^\s*TOTAL\s+4096\s+100%\s+60\s+100\.0%\s+60\s+120\s+100\.0%`)
			if !total.MatchString(out) {
				t.Errorf("no TOTAL line accounting for 60 executions at version 2 and 120 outbox rows:\n%s", out)
			}
			if strings.Contains(out, "MISPLACED") {
				t.Errorf("misplaced rows:\n%s", out)
			}
		})
	}
}

func TestStoreDemoUsage(t *testing.T) {
	r := run(t, "", "store", "demo", "--executions", "0")
	if r.code != 2 || !strings.Contains(r.stderr, "--executions") {
		t.Errorf("exit %d, stderr %q", r.code, r.stderr)
	}
}
