package cli_test

import (
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/pgshard/pgshard/shardmap"
)

var update = flag.Bool("update", false, "rewrite golden files in testdata/")

// golden compares got with testdata/name, or rewrites it with -update.
func golden(t *testing.T, name, got string) {
	t.Helper()
	p := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(p, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(p)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if got != string(want) {
		t.Errorf("output differs from %s (run with -update if intended):\n--- got\n%s\n--- want\n%s", p, got, want)
	}
}

const testMap = "testdata/map4.yaml"

func loadTestMap(t *testing.T) *shardmap.Map {
	t.Helper()
	b, err := os.ReadFile(testMap)
	if err != nil {
		t.Fatal(err)
	}
	m, err := shardmap.Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestMapValidate(t *testing.T) {
	r := mustRun(t, "", "map", "validate", "../../configs/pgshard.yaml", "../../configs/shardmap.yaml", testMap)
	if got := strings.Count(r.stdout, ": ok ("); got != 3 {
		t.Errorf("want 3 ok lines:\n%s", r.stdout)
	}

	// Each bad file yields exactly one line that names the problem.
	want := map[string]string{
		"gap.yaml":                "bucket 31 is not assigned to any shard (gap)",
		"overlap.yaml":            "buckets 32-40 overlap another range",
		"unknown_shard.yaml":      `unknown shard "s9"`,
		"dup_ordinal.yaml":        "duplicate ordinal 0",
		"dup_name.yaml":           `duplicate name "s0"`,
		"not_pow2.yaml":           "buckets: 100 is not a power of two",
		"unknown_key.yaml":        "poolr_dsn",
		"config_unknown_key.yaml": `unknown key "store.max_conn" (did you mean "store.max_conns"?)`,
		"config_bad_value.yaml":   "store.connect_attempts: must be at least 1",
	}
	for file, msg := range want {
		t.Run(file, func(t *testing.T) {
			r := run(t, "", "map", "validate", filepath.Join("testdata/bad", file))
			if r.code != 1 {
				t.Errorf("exit %d, want 1", r.code)
			}
			lines := strings.Split(strings.TrimRight(r.stdout, "\n"), "\n")
			if len(lines) != 1 || !strings.Contains(lines[0], msg) {
				t.Errorf("want one line containing %q, got:\n%s", msg, r.stdout)
			}
			if strings.Contains(r.stderr, "goroutine") || strings.Count(r.stderr, "\n") != 1 {
				t.Errorf("stderr must be one line, no stack trace:\n%s", r.stderr)
			}
		})
	}
	files, _ := filepath.Glob("testdata/bad/*.yaml")
	if len(files) != len(want) {
		t.Errorf("%d bad fixtures but %d expectations", len(files), len(want))
	}
}

func TestMapBucket(t *testing.T) {
	m := loadTestMap(t)
	keys := []string{"", "a", "0123456789abcdef0123456789abcdef", "日本語", "with space"}
	r := mustRun(t, "", append([]string{"map", "bucket", "-c", testMap}, keys...)...)
	fromStdin := mustRun(t, strings.Join(keys, "\n")+"\n", "map", "bucket", "-c", testMap)
	if r.stdout != fromStdin.stdout {
		t.Errorf("args and stdin disagree:\n%s\n%s", r.stdout, fromStdin.stdout)
	}
	lines := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
	if len(lines) != len(keys) {
		t.Fatalf("%d lines for %d keys:\n%s", len(lines), len(keys), r.stdout)
	}
	for i, line := range lines {
		f := strings.Split(line, "\t")
		if len(f) != 3 || f[0] != keys[i] {
			t.Fatalf("line %q is not KEY<TAB>BUCKET<TAB>SHARD for %q", line, keys[i])
		}
		b := m.Bucket(keys[i])
		if f[1] != itoa(b) || f[2] != m.ShardForBucket(b).Name {
			t.Errorf("key %q: got %s/%s, want %d/%s", keys[i], f[1], f[2], b, m.ShardForBucket(b).Name)
		}
	}
	r = mustRun(t, "", "map", "bucket", "-c", testMap, "--int8", "--", "42", "-7")
	if want := "42\t" + itoa(m.BucketInt8(42)) + "\t" + m.LookupInt8(42).Name + "\n"; !strings.HasPrefix(r.stdout, want) {
		t.Errorf("int8: %q, want prefix %q", r.stdout, want)
	}
	if r := run(t, "", "map", "bucket", "-c", testMap, "--int8", "forty-two"); r.code != 1 || !strings.Contains(r.stderr, `"forty-two" is not an int8`) {
		t.Errorf("bad int8 key: exit %d, %q", r.code, r.stderr)
	}
}

func TestMapShowAndPlan(t *testing.T) {
	r := mustRun(t, "", "map", "show", "-c", testMap)
	golden(t, "map_show.golden", r.stdout)

	r = mustRun(t, "", "map", "show", "-c", testMap, "--json")
	var m shardmap.Map
	if err := json.Unmarshal([]byte(r.stdout), &m); err != nil || m.Epoch != 7 || len(m.Ranges) != 4 {
		t.Errorf("json: %v %+v", err, m)
	}

	r = mustRun(t, "", "map", "plan", "-c", testMap, "--add-shard", "s4", "--dsn", "postgres://h4/db")
	golden(t, "map_plan_add.golden", r.stdout)
	next, err := shardmap.Parse([]byte(stripComments(r.stdout)))
	if err != nil {
		t.Fatalf("planned map does not parse: %v", err)
	}
	if next.Epoch != 8 || len(next.Shards) != 5 {
		t.Errorf("planned map: epoch %d, %d shards", next.Epoch, len(next.Shards))
	}

	out := filepath.Join(t.TempDir(), "next.yaml")
	r = mustRun(t, "", "map", "plan", "-c", testMap, "--remove-shard", "s1", "-o", out)
	if r.stdout != "" || !strings.Contains(r.stderr, "wrote "+out) || !strings.Contains(r.stderr, "buckets move") {
		t.Errorf("plan -o: stdout %q stderr %q", r.stdout, r.stderr)
	}
	mustRun(t, "", "map", "validate", out)

	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--add-shard", "x", "--remove-shard", "s1"}, 2, "exactly one of"},
		{[]string{"--add-shard", "x"}, 2, "--add-shard needs --dsn"},
		{[]string{"--add-shard", "s0", "--dsn", "d"}, 1, `shard "s0" is already in the map`},
		{[]string{"--add-shard", "x", "--dsn", "d", "--ordinal", "2"}, 1, "ordinal 2 is already used"},
		{[]string{"--remove-shard", "nope"}, 1, `shard "nope" is not in the map`},
	} {
		r := run(t, "", append([]string{"map", "plan", "-c", testMap}, tc.args...)...)
		if r.code != tc.code || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("plan %v: exit %d stderr %q; want exit %d and %q", tc.args, r.code, r.stderr, tc.code, tc.want)
		}
	}
}

func TestUsageErrors(t *testing.T) {
	r := run(t, "", "map", "show", "--bogus")
	if r.code != 2 || !strings.Contains(r.stderr, "unknown flag: --bogus") || !strings.Contains(r.stderr, "pgshard map show --help") {
		t.Errorf("unknown flag: exit %d, %q", r.code, r.stderr)
	}
	r = run(t, "", "nosuchcommand")
	if r.code != 2 || !strings.Contains(r.stderr, "unknown command") {
		t.Errorf("unknown command: exit %d, %q", r.code, r.stderr)
	}
	r = run(t, "", "map", "show", "-c", "testdata/none.yaml")
	if r.code != 1 || !strings.Contains(r.stderr, "none.yaml") {
		t.Errorf("missing config: exit %d, %q", r.code, r.stderr)
	}
	r = mustRun(t, "", "version")
	if !strings.HasPrefix(r.stdout, "pgshard ") {
		t.Errorf("version: %q", r.stdout)
	}
}

func stripComments(s string) string {
	var b strings.Builder
	for _, l := range strings.SplitAfter(s, "\n") {
		if !strings.HasPrefix(l, "#") {
			b.WriteString(l)
		}
	}
	return b.String()
}

func itoa(i int) string { return strconv.Itoa(i) }
