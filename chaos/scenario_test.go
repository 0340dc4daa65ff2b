package chaos_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pgshard/pgshard/chaos"
)

// TestScenarios: every shipped scenario parses and validates, and the
// built-in one too.
func TestScenarios(t *testing.T) {
	files, err := filepath.Glob("../configs/chaos/*.yaml")
	if err != nil || len(files) < 4 {
		t.Fatalf("scenarios %v: %v", files, err)
	}
	for _, f := range files {
		sc, err := chaos.LoadScenario(f)
		if err != nil {
			t.Errorf("%s: %v", f, err)
			continue
		}
		if sc.Name == "" || sc.Duration <= 0 {
			t.Errorf("%s: %+v", f, sc)
		}
	}
	sc, err := chaos.DefaultScenarioFile()
	if err != nil || sc.Name != "default" || len(sc.Faults) == 0 {
		t.Fatalf("built-in scenario %+v: %v", sc, err)
	}
}

// TestScenarioErrors: a bad scenario is refused with every problem named
// by its key.
func TestScenarioErrors(t *testing.T) {
	for _, c := range []struct{ yaml, want string }{
		{"duraton: 5s\n", "duraton"},
		{"duration: five\n", "not a duration"},
		{"duration: 0s\n", "duration: must be in (0, 24h]"},
		{"target: elsewhere\n", "target: want direct, pgbouncer, proxy, pgbouncer+proxy"},
		{"faults:\n  - {kind: meteor, every: 1s}\n", `faults[0].kind: unknown fault kind "meteor"`},
		{"faults:\n  - {kind: reset}\n", "faults[0]: reset needs every"},
		{"faults:\n  - {kind: reset, at: [2m]}\n", "faults[0].at[0]"},
		{"target: pgbouncer\nfaults:\n  - {kind: proxy-restart, every: 2s}\n", "needs a proxy target"},
		{"workload:\n  keys: pareto\n", "workload.keys"},
		{"workload:\n  concurrency: 0\n", "workload.concurrency"},
		{"workload:\n  op_timeout: 0s\n", "workload.op_timeout"},
		{"workload:\n  colour: blue\n", "colour"},
		{"duration: 10s\nmax_duration: 1m\n", "max_duration: extends the run until min_commits"},
		{"duration: 10s\nmin_commits: 5\nmax_duration: 5s\n", "max_duration: must be in [duration 10s, 24h]"},
	} {
		_, err := chaos.ParseScenario([]byte(c.yaml))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: %v, want an error with %q", c.yaml, err, c.want)
		}
	}
	sc, err := chaos.ParseScenario([]byte("duration: 3s\nfaults:\n  - {kind: latency, every: 1s, hold: 200ms, params: {delay: 5ms}}\n"))
	if err != nil || time.Duration(sc.Duration) != 3*time.Second || sc.Target != chaos.TargetPgBouncer || sc.Faults[0].Params["delay"] != "5ms" {
		t.Errorf("defaults and a valid scenario: %+v, %v", sc, err)
	}
	if sc, err := chaos.ParseScenario([]byte("duration: 10s\nmin_commits: 100\nmax_duration: 1m\n")); err != nil || time.Duration(sc.MaxDuration) != time.Minute {
		t.Errorf("an extended run: %+v, %v", sc, err)
	}
	p := filepath.Join(t.TempDir(), "named.yaml")
	if err := os.WriteFile(p, []byte("duration: 2s\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if sc, err := chaos.LoadScenario(p); err != nil || sc.Name != "named" {
		t.Errorf("the file names a scenario without a name: %+v, %v", sc, err)
	}
}
