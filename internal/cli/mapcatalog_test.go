package cli_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pgshard/pgshard/cluster/clustertest"
	"github.com/pgshard/pgshard/shardmap"
)

// catalogDSN is a fresh database on the shared cluster's first server,
// reached through its PgBouncer (transaction mode).
func catalogDSN(t *testing.T) string {
	t.Helper()
	c := clustertest.Get(t)
	db := clustertest.FreshDatabase(t, c)
	m, err := c.MapFor(db, 64)
	if err != nil {
		t.Fatal(err)
	}
	if m.Shards[0].PoolerDSN == "" {
		t.Fatal("the shared test cluster has no PgBouncer")
	}
	return m.Shards[0].PoolerDSN
}

// writeMap writes m to a file in dir and returns its path.
func writeMap(t *testing.T, dir, name string, m *shardmap.Map) string {
	t.Helper()
	b, err := m.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestMapCatalogPushShow(t *testing.T) {
	dsn := catalogDSN(t)
	dir := t.TempDir()

	// Nothing installed yet: show says so and how to fix it.
	r := run(t, "", "map", "show", "--catalog", dsn)
	if r.code != 1 || !strings.Contains(r.stderr, "catalog is not installed") || !strings.Contains(r.stderr, "pgshard map push") {
		t.Errorf("show on an empty database: exit %d, %q", r.code, r.stderr)
	}
	// push needs a catalog.
	r = run(t, "", "map", "push", "--map", testMap)
	if r.code != 2 || !strings.Contains(r.stderr, "no catalog: pass --catalog DSN") {
		t.Errorf("push without a catalog: exit %d, %q", r.code, r.stderr)
	}

	r = run(t, "", "map", "push", "--catalog", dsn, "--map", testMap, "--expect-epoch", "-2")
	if r.code != 2 || !strings.Contains(r.stderr, "--expect-epoch: -2 is not an epoch") {
		t.Errorf("push --expect-epoch -2: exit %d, %q", r.code, r.stderr)
	}

	// A push expecting the wrong epoch installs the catalog, then loses
	// the compare-and-swap and writes nothing: the catalog is empty.
	r = run(t, "", "map", "push", "--catalog", dsn, "--map", testMap, "--expect-epoch", "3")
	if r.code != 1 || !strings.Contains(r.stdout, "installed catalog schema 0001_catalog") ||
		!strings.Contains(r.stderr, "the catalog is at epoch 0, not 3 as this push of epoch 7 expected") {
		t.Errorf("push expecting epoch 3 of an empty catalog: exit %d\nstdout %q\nstderr %q", r.code, r.stdout, r.stderr)
	}
	r = run(t, "", "map", "show", "--catalog", dsn)
	if r.code != 1 || !strings.Contains(r.stderr, "holds no shard map yet (epoch 0)") {
		t.Errorf("show of an empty catalog: exit %d, %q", r.code, r.stderr)
	}

	// Bootstrap from a map file.
	r = mustRun(t, "", "map", "push", "--catalog", dsn, "--map", testMap)
	for _, want := range []string{"pushed map epoch 7", "bootstrapping an empty catalog", "from " + testMap} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("push output lacks %q:\n%s", want, r.stdout)
		}
	}

	// show reads the catalog: the same table as from the file.
	fromFile := mustRun(t, "", "map", "show", "-c", testMap).stdout
	fromCat := mustRun(t, "", "map", "show", "--catalog", dsn).stdout
	head := func(s string) (string, string) { first, rest, _ := strings.Cut(s, "\n"); return first, rest }
	fh, fr := head(fromFile)
	ch, cr := head(fromCat)
	if cr != fr || !strings.HasPrefix(ch, "map epoch 7, 64 buckets, 4 shards (from catalog ") ||
		strings.SplitN(fh, " (from", 2)[0] != strings.SplitN(ch, " (from", 2)[0] {
		t.Errorf("show --catalog differs from show of the file:\n--- catalog\n%s--- file\n%s", fromCat, fromFile)
	}
	jf := mustRun(t, "", "map", "show", "-c", testMap, "--json").stdout
	jc := mustRun(t, "", "map", "show", "--catalog", dsn, "--json").stdout
	if jf != jc {
		t.Errorf("show --json differs:\n--- catalog\n%s--- file\n%s", jc, jf)
	}
	// The catalog also comes from the environment (config key catalog.dsn).
	t.Setenv("PGSHARD_CATALOG_DSN", dsn)
	if got := mustRun(t, "", "map", "show").stdout; got != fromCat {
		t.Errorf("show with PGSHARD_CATALOG_DSN:\n%s", got)
	}
	os.Unsetenv("PGSHARD_CATALOG_DSN")

	// The same map again changes nothing.
	r = mustRun(t, "", "map", "push", "--catalog", dsn, "--map", testMap)
	if !strings.Contains(r.stdout, "already holds this map at epoch 7: nothing to do") || strings.Contains(r.stdout, "installed") {
		t.Errorf("pushing the same map again: %s", r.stdout)
	}
	// --map takes a config file too (its shard map), as --config does.
	absMap, err := filepath.Abs(testMap)
	if err != nil {
		t.Fatal(err)
	}
	cfgFile := filepath.Join(dir, "pgshard.yaml")
	if err := os.WriteFile(cfgFile, []byte("shardmap_file: "+absMap+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	r = mustRun(t, "", "map", "push", "--catalog", dsn, "--map", cfgFile)
	if !strings.Contains(r.stdout, "already holds this map at epoch 7: nothing to do") {
		t.Errorf("pushing the map of a config file given as --map: %s", r.stdout)
	}

	m := loadTestMap(t)
	next, err := shardmap.PlanRemove(m, "s3")
	if err != nil {
		t.Fatal(err)
	}
	sameEpoch := next.Clone()
	sameEpoch.Epoch = 7
	older := next.Clone()
	older.Epoch = 6
	newB := next.Clone()
	newB.Epoch, newB.Buckets = 9, 128
	newB.Ranges[len(newB.Ranges)-1].Hi = 127
	for _, tc := range []struct {
		name string
		args []string
		code int
		want []string
	}{
		{"same epoch, other map", []string{"--map", writeMap(t, dir, "same.yaml", sameEpoch)}, 1,
			[]string{"epoch must grow", "catalog is at epoch 7", "pushed map has epoch 7"}},
		{"older epoch", []string{"--map", writeMap(t, dir, "older.yaml", older)}, 1,
			[]string{"epoch must grow", "catalog is at epoch 7", "pushed map has epoch 6"}},
		{"bucket count changed", []string{"--map", writeMap(t, dir, "b128.yaml", newB)}, 1,
			[]string{"buckets: 128, but the cluster has 64"}},
		{"malformed map", []string{"--map", "testdata/bad/gap.yaml"}, 1,
			[]string{"gap.yaml", "bucket 31 is not assigned to any shard (gap)"}},
		{"missing map file", []string{"--map", filepath.Join(dir, "none.yaml")}, 1,
			[]string{"none.yaml"}},
		{"stale expectation", []string{"--map", writeMap(t, dir, "next.yaml", next), "--expect-epoch", "0"}, 1,
			[]string{"catalog epoch conflict", "catalog is at epoch 7, not 0", "push of epoch 8"}},
		{"expected epoch not below the map's", []string{"--map", writeMap(t, dir, "next8.yaml", next), "--expect-epoch", "8"}, 1,
			[]string{"epoch must grow", "--expect-epoch 8 names the epoch to replace", "pushed map has epoch 8", "catalog is at epoch 7)"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := run(t, "", append([]string{"map", "push", "--catalog", dsn}, tc.args...)...)
			if r.code != tc.code {
				t.Errorf("exit %d, want %d; stderr %q", r.code, tc.code, r.stderr)
			}
			for _, w := range tc.want {
				if !strings.Contains(r.stderr, w) {
					t.Errorf("stderr lacks %q: %q", w, r.stderr)
				}
			}
		})
	}
	if got := mustRun(t, "", "map", "show", "--catalog", dsn).stdout; got != fromCat {
		t.Errorf("the refused pushes changed the catalog:\n%s", got)
	}

	// A successor from the config's map (a config naming the map file and
	// the catalog).
	cfg := filepath.Join(dir, "pgshard.yaml")
	writeMap(t, dir, "shardmap.yaml", next)
	if err := os.WriteFile(cfg, []byte("shardmap_file: shardmap.yaml\ncatalog:\n  dsn: \""+dsn+"\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	r = mustRun(t, "", "map", "push", "-c", cfg)
	if !strings.Contains(r.stdout, "pushed map epoch 8") || !strings.Contains(r.stdout, "replacing epoch 7") {
		t.Errorf("push from the config: %s", r.stdout)
	}
	var got shardmap.Map
	if err := json.Unmarshal([]byte(mustRun(t, "", "map", "show", "-c", cfg, "--json").stdout), &got); err != nil {
		t.Fatal(err)
	}
	if got.Epoch != 8 || len(got.Shards) != 3 {
		t.Errorf("show after the second push: epoch %d, %d shards", got.Epoch, len(got.Shards))
	}
}
