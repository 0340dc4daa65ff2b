package cli_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgshard/pgshard/cluster/clustertest"
	"github.com/pgshard/pgshard/internal/cli"
	"github.com/pgshard/pgshard/verify"
)

// TestVerify runs `pgshard verify` on a migrated database of the shared
// cluster holding one execution written by SQL, against a hand-written
// history of it (a first save, a step, a terminate fault that landed):
// PASS with the table and the report files; JSON; VACUOUS when the fault
// must land twice; FAIL once the step's processed_events row is deleted;
// PASS again against the saved state, without a database; usage and
// decode errors exit 2.
func TestVerify(t *testing.T) {
	m := clustertest.MigratedMap(t, clustertest.Get(t))
	dir := t.TempDir()
	data, err := m.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "shardmap.yaml")
	if err := os.WriteFile(cfg, data, 0o644); err != nil {
		t.Fatal(err)
	}
	key := fmt.Sprintf("%032x", 0xc0ffee)
	sh := m.Lookup(key)
	mj, _ := json.Marshal(verify.MapInfoOf(m))
	history := strings.Join([]string{
		`{"type":"header","format":"pgshard-history","version":1,"run":"r1","started_at":"2026-12-01T10:00:00Z","seed":3,"scenario":"cli",` +
			`"workload":{"definition_id":"chaos","trace_max":8},"map":` + string(mj) + `,` +
			`"schedule":[{"id":"f1","kind":"terminate","shard":"` + sh.Name + `","at_ms":3,"hold_ms":2}]}`,
		`{"type":"op","id":"r1/setup/1","kind":"commit","src":"setup","exe":"` + key + `","shard":"` + sh.Name + `","t0":1000000,"t1":2000000,"outcome":"ok","exp":0,"new":1,"cause":"setup","fast":true}`,
		`{"type":"fault","id":"f1","kind":"terminate","phase":"inject","t":3000000,"shard":"` + sh.Name + `","landed":true,"evidence":{"terminated":[{"pid":77,"state":"idle in transaction"}]}}`,
		`{"type":"op","id":"r1/w0/1","kind":"load","src":"w0","exe":"` + key + `","shard":"` + sh.Name + `","t0":3000000,"t1":4000000,"outcome":"fail","err":"terminating connection due to administrator command","sqlstate":"57P01","event":"r1-w0-1","cause":"worker"}`,
		`{"type":"fault","id":"f1","kind":"terminate","phase":"heal","t":5000000,"shard":"` + sh.Name + `"}`,
		`{"type":"op","id":"r1/w0/2","kind":"load","src":"w0","exe":"` + key + `","shard":"` + sh.Name + `","t0":6000000,"t1":7000000,"outcome":"ok","event":"r1-w0-1","cause":"worker","exists":true,"version":1,"writer":"r1/setup/1","processed":false}`,
		`{"type":"op","id":"r1/w0/3","kind":"commit","src":"w0","exe":"` + key + `","shard":"` + sh.Name + `","t0":7000000,"t1":8000000,"outcome":"ok","exp":1,"new":2,"event":"r1-w0-1","input":"r1-w0-1","cause":"worker","fast":true}`,
		`{"type":"end","t":9000000,"ended_at":"2026-12-01T10:00:00.009Z","ops":4,"interrupted":false,"quiesce":{"ok":true,"ms":1,"outbox_left":0,"spawns_left":0,"timers_left":0}}`,
	}, "\n") + "\n"
	hpath := filepath.Join(dir, "history.jsonl")
	if err := os.WriteFile(hpath, []byte(history), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, sh.DSN)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	doc := `{"id":"` + key + `","definition_id":"chaos","version":2,"status":"running","context":{"step":1,"last":"r1-w0-1","op":"r1/w0/3"}}`
	for _, q := range []string{
		`INSERT INTO executions VALUES ('` + key + `', 'chaos', '` + doc + `', 2)`,
		`INSERT INTO processed_events VALUES ('` + key + `', 'r1-w0-1')`,
	} {
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}

	out1 := filepath.Join(dir, "out1")
	r := mustRun(t, "", "verify", "--config", cfg, "--history", hpath, "--out", out1)
	for _, want := range []string{"verdict: PASS", "invariant  checked  violations", "linearizability", "terminate", "report: " + filepath.Join(out1, "report.html")} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("stdout lacks %q:\n%s", want, r.stdout)
		}
	}
	for _, f := range []string{verify.VerdictFile, verify.ReportFile, cli.StateFile} {
		if _, err := os.Stat(filepath.Join(out1, f)); err != nil {
			t.Errorf("no %s: %v", f, err)
		}
	}

	r = mustRun(t, "", "verify", "--config", cfg, "--history", hpath, "--out", filepath.Join(dir, "out2"), "--json")
	var v verify.Verdict
	if err := json.Unmarshal([]byte(r.stdout), &v); err != nil || v.Result != verify.Pass || v.Commits != 2 {
		t.Errorf("--json: %v, %+v", err, v)
	}

	r = run(t, "", "verify", "--config", cfg, "--history", hpath, "--out", filepath.Join(dir, "out3"), "--min-landed", "2")
	if r.code != 2 || !strings.Contains(r.stdout, "verdict: VACUOUS") || !strings.Contains(r.stderr, "verdict VACUOUS") {
		t.Errorf("--min-landed 2: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}

	// Offline, against the state the first run saved.
	r = mustRun(t, "", "verify", "--history", hpath, "--state", filepath.Join(out1, cli.StateFile), "--out", filepath.Join(dir, "out4"))
	if !strings.Contains(r.stdout, "verdict: PASS") {
		t.Errorf("--state: %s", r.stdout)
	}

	if _, err := conn.Exec(ctx, `DELETE FROM processed_events WHERE execution_id = '`+key+`'`); err != nil {
		t.Fatal(err)
	}
	r = run(t, "", "verify", "--config", cfg, "--history", hpath, "--out", filepath.Join(dir, "out5"))
	if r.code != 1 || !strings.Contains(r.stdout, "[dedupe] event r1-w0-1 applied by r1/w0/3") || !strings.Contains(r.stderr, "verdict FAIL") {
		t.Errorf("a deleted ledger row: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
}

func TestVerifyErrors(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "history.jsonl")
	if err := os.WriteFile(bad, []byte(`{"type":"header","format":"pgshard-history","version":9,"run":"r"}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"verify"}, "--history is required"},
		{[]string{"verify", "--history", bad, "--min-landed", "0"}, "--min-landed"},
		{[]string{"verify", "--history", filepath.Join(dir, "missing.jsonl")}, "open history"},
		{[]string{"verify", "--history", bad}, "history line 1: history format version 9"},
	} {
		r := run(t, "", c.args...)
		if r.code != 2 || !strings.Contains(r.stderr, c.want) {
			t.Errorf("%v: exit %d, stderr %q, want 2 and %q", c.args, r.code, r.stderr, c.want)
		}
	}
}
