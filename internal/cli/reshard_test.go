package cli_test

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pgshard/pgshard/cluster"
	"github.com/pgshard/pgshard/cluster/clustertest"
	"github.com/pgshard/pgshard/shardmap"
)

// The commands of a shard added online: dev up --catalog, dev add-shard,
// reshard plan --add-shard, status, apply, status --all; the map then gives
// the new shard its share. Bad requests are refused with a usage error.
func TestReshardCLI(t *testing.T) {
	if r := run(t, "", "reshard", "plan", "--move", "1-2"); r.code == 0 || !strings.Contains(r.stderr, "--move and --to go together") {
		t.Errorf("plan --move without --to: exit %d %q", r.code, r.stderr)
	}
	if r := run(t, "", "reshard", "plan", "--move", "9-2", "--to", "x"); r.code == 0 || !strings.Contains(r.stderr, "not a bucket range") {
		t.Errorf("plan --move 9-2: exit %d %q", r.code, r.stderr)
	}
	if err := cluster.Local().(cluster.SpecChecker).AvailableFor(context.Background(), cluster.Spec{PgBouncer: true}); err != nil {
		clustertest.SkipOrFail(t, err)
	}
	dir := clustertest.Dir(t)
	mustRun(t, "", "dev", "up", "--dir", dir, "--shards", "2", "--fsync=false", "--catalog")
	t.Cleanup(func() { run(t, "", "dev", "down", "--dir", dir) })
	cfg := filepath.Join(dir, "pgshard.yaml")
	mustRun(t, "", "dev", "add-shard", "--dir", dir)

	r := mustRun(t, "", "reshard", "plan", "-c", cfg, "--add-shard", "shard2")
	if !strings.Contains(r.stdout, "planned 2 moves") || !strings.Contains(r.stdout, "shard2") {
		t.Errorf("reshard plan --add-shard shard2:\n%s", r.stdout)
	}
	if r := run(t, "", "reshard", "plan", "-c", cfg, "--remove-shard", "shard0"); r.code == 0 || !strings.Contains(r.stderr, "not finished") {
		t.Errorf("a second plan while the first is unfinished: exit %d %q", r.code, r.stderr)
	}
	r = mustRun(t, "", "reshard", "status", "-c", cfg)
	if strings.Count(r.stdout, " planned ") != 2 {
		t.Errorf("reshard status:\n%s", r.stdout)
	}
	r = mustRun(t, "", "map", "show", "-c", cfg)
	if !strings.Contains(r.stdout, "2 moves unfinished") || strings.Count(r.stdout, "→ shard2: planned") != 2 {
		t.Errorf("map show while moves are planned:\n%s", r.stdout)
	}
	// Load through PgBouncer by a router that follows the catalog (the
	// config names it) while the moves run: no operation may fail.
	load := make(chan result, 1)
	go func() {
		load <- runWithin(t, 3*time.Minute, "", "loadgen", "run", "-c", cfg, "--target", "pgbouncer", "--duration", "40s",
			"--warmup", "0s", "--concurrency", "4", "--executions", "400", "--out", t.TempDir(), "--fail-if", "errors>0")
	}()
	r = mustRun(t, "", "reshard", "apply", "-c", cfg, "--freeze-budget", "2s", "--max-parallel", "2")
	if strings.Count(r.stdout, "flipped at epoch") != 2 {
		t.Errorf("reshard apply:\n%s", r.stdout)
	}
	lr := <-load
	t.Logf("loadgen during the moves:\n%s", lr.stdout)
	if lr.code != 0 {
		t.Errorf("loadgen through a catalog-following router during the moves: exit %d\nstdout:\n%s\nstderr:\n%s", lr.code, lr.stdout, lr.stderr)
	}
	if r := mustRun(t, "", "store", "demo", "-c", cfg, "--executions", "40", "--workers", "4"); !strings.Contains(r.stdout, "from catalog") {
		t.Errorf("store demo with a catalog in the config:\n%s", r.stdout)
	}
	r = mustRun(t, "", "reshard", "status", "-c", cfg, "--all")
	if strings.Count(r.stdout, " done ") != 2 || !strings.Contains(r.stdout, "at epoch 4") {
		t.Errorf("reshard status --all:\n%s", r.stdout)
	}
	r = mustRun(t, "", "map", "show", "-c", cfg, "--json")
	var m shardmap.Map
	if err := json.Unmarshal([]byte(r.stdout), &m); err != nil {
		t.Fatalf("map show --json: %v\n%s", err, r.stdout)
	}
	counts := m.BucketCounts()
	if m.Epoch != 4 || counts["shard2"] < m.Buckets/3 || counts["shard0"] < m.Buckets/3 || counts["shard1"] < m.Buckets/3 {
		t.Errorf("map after the moves: epoch %d, buckets per shard %v", m.Epoch, counts)
	}
	if r := mustRun(t, "", "reshard", "apply", "-c", cfg); !strings.Contains(r.stdout, "no unfinished moves") {
		t.Errorf("apply with nothing to do:\n%s", r.stdout)
	}
}
