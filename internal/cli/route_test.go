package cli_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestRoute pins the text explanation of a few statements.
func TestRoute(t *testing.T) {
	var out strings.Builder
	for _, args := range [][]string{
		{"SELECT data FROM executions WHERE id = $1", "0123456789abcdef0123456789abcdef"},
		{"--types", "int8", "--binary", "BEGIN; DELETE FROM outbox WHERE seq = $1; COMMIT", "1026"},
		{"SELECT id, version FROM executions ORDER BY version DESC LIMIT 10 OFFSET 5"},
		{"SELECT count(*), max(version) FROM timers JOIN executions ON executions.id = timers.execution_id"},
		{"UPDATE executions SET version = 0 WHERE id IN ('a', 'c')"},
		{"/* pgshard:shard=s1 */ SELECT * FROM definitions"},
		{"SET LOCAL pgshard.key = 'abc'"},
		{"SELECT avg(version) FROM executions"},
		{"SELECT * FROM executions WHERE id = $1", `\N`},
		// Reads in two stages: each stage's own SQL, where it runs.
		{"SELECT d.id, rank() OVER (ORDER BY d.id) FROM (SELECT id FROM executions ORDER BY id LIMIT 3) d"},
		{"SELECT count(*) FROM executions e JOIN outbox o ON o.target_id = e.id WHERE e.version > $1", "3"},
		{"SELECT e.id, (SELECT count(*) FROM outbox o WHERE o.target_id = e.id) FROM executions e WHERE e.version > $1", "3"},
		// a spread plan (stage 2 routed as any read) whose subquery names
		// the row's column without a qualifier (learned at run time)
		{"SELECT seq FROM outbox WHERE NOT EXISTS (SELECT 1 FROM executions WHERE id = target_id) ORDER BY seq"},
	} {
		r := mustRun(t, "", append([]string{"route", "--map", testMap}, args...)...)
		out.WriteString("$ pgshard route " + strings.Join(args, " ") + "\n" + r.stdout + "\n")
	}
	golden(t, "route.golden", out.String())
}

func TestRouteJSON(t *testing.T) {
	r := mustRun(t, "", "route", "--map", testMap, "--json", "--schema", "../../configs/sharding.yaml",
		"SELECT id FROM executions WHERE id = $1 OR id = $2 ORDER BY id LIMIT 3", "a", "c")
	var reps []struct {
		Kind  string   `json:"kind"`
		Dest  string   `json:"dest"`
		Steps []string `json:"steps"`
		Merge *struct {
			OrderBy []struct{ Column int } `json:"order_by"`
			Limit   int64                  `json:"limit"`
		} `json:"merge"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &reps); err != nil {
		t.Fatalf("%v\n%s", err, r.stdout)
	}
	if len(reps) != 1 || reps[0].Dest != "all" || reps[0].Merge == nil || reps[0].Merge.Limit != 3 || len(reps[0].Steps) == 0 {
		t.Errorf("unexpected report:\n%s", r.stdout)
	}
}

func TestRouteInputs(t *testing.T) {
	// The statement from stdin; NULL with --null.
	r := mustRun(t, "SELECT harel_commit_cas($1, 'd', '{}', 0, '')", "route", "--map", testMap, "--null", "NULL", "-", "NULL")
	if !strings.Contains(r.stdout, "dest:     any shard") {
		t.Errorf("NULL key:\n%s", r.stdout)
	}
	// A config file's map.
	r = mustRun(t, "", "route", "--config", "../../configs/pgshard.yaml", "SELECT 1 FROM trace WHERE execution_id = 'x'")
	if !strings.Contains(r.stdout, "dest:     shard ") {
		t.Errorf("with --config:\n%s", r.stdout)
	}
	// ... and its proxy.schema.
	dir := t.TempDir()
	cfg := filepath.Join(dir, "pgshard.yaml")
	abs, err := filepath.Abs(testMap)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cfg, []byte("shardmap_file: "+abs+"\nproxy:\n  schema:\n    tables: [{table: ledger, column: acct, type: int8}]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	r = mustRun(t, "", "route", "--config", cfg, "SELECT * FROM ledger WHERE acct = 42")
	if !strings.Contains(r.stdout, `key:      "42"`) || !strings.Contains(r.stdout, "ledger.acct = 42") {
		t.Errorf("with the config's proxy.schema:\n%s", r.stdout)
	}
	// A schema file with an int8 key.
	schema := filepath.Join(dir, "s.yaml")
	if err := os.WriteFile(schema, []byte("tables: [{table: accounts, column: k, type: int8}]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	r = mustRun(t, "", "route", "--map", testMap, "--schema", schema, "--types", "int4", "--binary", "SELECT * FROM accounts WHERE k = $1", "42")
	if !strings.Contains(r.stdout, `key:      "42"`) {
		t.Errorf("int8 schema:\n%s", r.stdout)
	}
	for _, c := range []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"route", "--map", testMap}, 2, "requires at least 1 arg"},
		{[]string{"route", "--map", testMap, "--types", "int9", "SELECT 1"}, 2, `unknown type "int9"`},
		{[]string{"route", "--map", testMap, "--types", "int8", "--binary", "SELECT 1", "x"}, 2, `"x" is not an int8`},
		{[]string{"route", "--map", testMap, "--types", "float8", "--binary", "SELECT 1", "1.5"}, 2, "cannot encode type OID 701"},
		{[]string{"route", "--map", "nope.yaml", "SELECT 1"}, 1, "--map"},
		{[]string{"route", "--map", testMap, "--schema", testMap, "SELECT 1"}, 1, "--schema"},
	} {
		r := run(t, "", c.args...)
		if r.code != c.code || !strings.Contains(r.stderr, c.msg) {
			t.Errorf("%q: exit %d, stderr %q; want exit %d mentioning %q", c.args, r.code, r.stderr, c.code, c.msg)
		}
	}
}

// TestRouteTwoStages checks that a read in two stages is explained by what
// each stage sends: stage 1's subqueries with their own per-shard SQL,
// stage 2's statement and its shard — never "the client's statement".
func TestRouteTwoStages(t *testing.T) {
	const sql = "WITH c AS (SELECT count(*) AS n FROM timers) SELECT n + 1 FROM c"
	r := mustRun(t, "", "route", "--map", testMap, sql)
	wantLines(t, "two stages", r.stdout,
		"dest:     in two stages (below)",
		"subquery 1 of 1: SELECT count(*) AS n FROM timers",
		"per-shard SQL: SELECT count(*) AS n, pg_catalog.current_setting('extra_float_digits') AS pgshard_2 FROM timers",
		"stage 2:  on shard s0 (the default shard)",
		"SQL:    WITH c AS (SELECT * FROM pgshard_stage_1_) SELECT n + 1 FROM c")
	if strings.Contains(r.stdout, "the client's statement\n") {
		t.Errorf("a stage's SQL shown as the client's statement:\n%s", r.stdout)
	}
	r = mustRun(t, "", "route", "--map", testMap, "--json", sql)
	var reps []struct {
		Dest   string          `json:"dest"`
		Merge  json.RawMessage `json:"merge"`
		Stages *struct {
			Stage1 []struct {
				SQL   string `json:"sql"`
				Dest  string `json:"dest"`
				Merge struct {
					SQL string `json:"sql"`
				} `json:"merge"`
			} `json:"stage1"`
			Stage2 struct {
				Shard   string   `json:"shard"`
				SQL     string   `json:"sql"`
				Markers []string `json:"markers"`
			} `json:"stage2"`
		} `json:"stages"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &reps); err != nil {
		t.Fatalf("%v\n%s", err, r.stdout)
	}
	if len(reps) != 1 || reps[0].Stages == nil || reps[0].Merge != nil || len(reps[0].Stages.Stage1) != 1 {
		t.Fatalf("want one statement with one stage-1 subquery and no top-level merge:\n%s", r.stdout)
	}
	s1, s2 := reps[0].Stages.Stage1[0], reps[0].Stages.Stage2
	if s1.Dest != "all" || !strings.HasPrefix(s1.Merge.SQL, "SELECT count(*) AS n, ") {
		t.Errorf("stage 1: %+v", s1)
	}
	if s2.Shard != "s0" || len(s2.Markers) != 1 || !strings.Contains(s2.SQL, s2.Markers[0]) {
		t.Errorf("stage 2: %+v", s2)
	}
	// The config's proxy.default_shard runs stage 2.
	dir := t.TempDir()
	cfg := filepath.Join(dir, "pgshard.yaml")
	abs, err := filepath.Abs(testMap)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cfg, []byte("shardmap_file: "+abs+"\nproxy:\n  default_shard: s2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	r = mustRun(t, "", "route", "--config", cfg, sql)
	if !strings.Contains(r.stdout, "stage 2:  on shard s2 (the default shard)") {
		t.Errorf("proxy.default_shard s2:\n%s", r.stdout)
	}
	// A spread plan: the statement keeps its FROM and stage 2 is routed
	// on its own (every shard here), described on the default shard.
	spread := "SELECT id FROM executions WHERE version > (SELECT avg(version) FROM executions)"
	r = mustRun(t, "", "route", "--map", testMap, spread)
	wantLines(t, "spread plan", r.stdout,
		"described on shard s0 (",
		"subquery 1 of 1: SELECT avg(version) FROM executions",
		"stage 2:  after stage 1, the statement with the subqueries' rows, routed on its own",
		"SQL:    SELECT id FROM executions WHERE version > (SELECT * FROM pgshard_stage_1_)",
		"dest:     all shards",
		"result:   stage 2's rows, merged as its routing says")
	r = mustRun(t, "", "route", "--map", testMap, "--json", spread)
	var sp []struct {
		Stages *struct {
			DescribeShard string `json:"describe_shard"`
			Stage2        struct {
				Shard  string `json:"shard"`
				Routed *struct {
					Dest string `json:"dest"`
				} `json:"routed"`
			} `json:"stage2"`
		} `json:"stages"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &sp); err != nil {
		t.Fatalf("%v\n%s", err, r.stdout)
	}
	if len(sp) != 1 || sp[0].Stages == nil || sp[0].Stages.DescribeShard != "s0" || sp[0].Stages.Stage2.Shard != "" ||
		sp[0].Stages.Stage2.Routed == nil || sp[0].Stages.Stage2.Routed.Dest != "all" {
		t.Errorf("spread plan, JSON:\n%s", r.stdout)
	}
}

// wantLines fails the test for each of wants that out (what) lacks.
func wantLines(t *testing.T, what, out string, wants ...string) {
	t.Helper()
	for _, want := range wants {
		if !strings.Contains(out, want) {
			t.Errorf("%s: missing %q:\n%s", what, want, out)
		}
	}
}

// TestRouteMapConfig: --map takes a config file as well as a map file,
// told apart by content (as --config does), with the config's schema.
func TestRouteMapConfig(t *testing.T) {
	const sql = "SELECT 1 FROM trace WHERE execution_id = 'x'"
	viaConfig := mustRun(t, "", "route", "--config", "../../configs/pgshard.yaml", sql)
	viaMap := mustRun(t, "", "route", "--map", "../../configs/pgshard.yaml", sql)
	if viaMap.stdout != viaConfig.stdout || !strings.Contains(viaMap.stdout, "dest:     shard ") {
		t.Errorf("--map CONFIG:\n%s\n--config CONFIG:\n%s", viaMap.stdout, viaConfig.stdout)
	}
	dir := t.TempDir()
	abs, err := filepath.Abs(testMap)
	if err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "pgshard.yaml")
	if err := os.WriteFile(cfg, []byte("shardmap_file: "+abs+"\nproxy:\n  schema:\n    tables: [{table: ledger, column: acct, type: int8}]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	r := mustRun(t, "", "route", "--map", cfg, "SELECT * FROM ledger WHERE acct = 42")
	if !strings.Contains(r.stdout, `key:      "42"`) {
		t.Errorf("--map CONFIG with proxy.schema:\n%s", r.stdout)
	}
	noMap := filepath.Join(dir, "nomap.yaml")
	if err := os.WriteFile(noMap, []byte("proxy:\n  listen: 127.0.0.1:7000\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"route", "--map", cfg, "--config", cfg, "SELECT 1"}, 2, "is a config file, and --config"},
		{[]string{"route", "--map", noMap, "SELECT 1"}, 1, "a pgshard config file without a shard map"},
		{[]string{"route", "--map", "../../configs/sharding.yaml", "SELECT 1"}, 1, "read as a pgshard config file"},
	} {
		r := run(t, "", c.args...)
		if r.code != c.code || !strings.Contains(r.stderr, c.msg) {
			t.Errorf("%q: exit %d, stderr %q; want exit %d mentioning %q", c.args, r.code, r.stderr, c.code, c.msg)
		}
	}
}
