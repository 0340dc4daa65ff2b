package cli_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgshard/pgshard/cluster"
	"github.com/pgshard/pgshard/cluster/clustertest"
	"github.com/pgshard/pgshard/internal/config"
	"github.com/pgshard/pgshard/shardmap"
)

// The path of a shard added to a dev cluster: dev up without a catalog
// (add-shard refuses), dev up --catalog (installs it, pushes the map),
// dev add-shard (starts, migrates and registers the shard at epoch+1
// owning nothing; the config's map follows), a second add of the name
// refused, dev up reusing the grown cluster, dev down stopping it all.
func TestDevAddShard(t *testing.T) {
	if err := cluster.Local().(cluster.SpecChecker).AvailableFor(context.Background(), cluster.Spec{PgBouncer: true}); err != nil {
		clustertest.SkipOrFail(t, err)
	}
	if r := run(t, "", "dev", "add-shard", "--dir", filepath.Join(t.TempDir(), "none")); r.code != 1 || !strings.Contains(r.stderr, "no cluster") || !strings.Contains(r.stderr, "dev up") {
		t.Errorf("add-shard without a cluster: exit %d %q", r.code, r.stderr)
	}

	dir := clustertest.Dir(t)
	mustRun(t, "", "dev", "up", "--dir", dir, "--shards", "2", "--fsync=false")
	if r := run(t, "", "dev", "add-shard", "--dir", dir); r.code != 1 || !strings.Contains(r.stderr, "no catalog") || !strings.Contains(r.stderr, "dev up --catalog") {
		t.Errorf("add-shard without a catalog: exit %d %q", r.code, r.stderr)
	}
	if st := status(t, dir); len(st.Shards) != 2 {
		t.Fatalf("add-shard without a catalog changed the cluster: %+v", st.Shards)
	}

	// --catalog on the running cluster (no --shards: it keeps its 2).
	r := mustRun(t, "", "dev", "up", "--dir", dir, "--fsync=false", "--catalog")
	if !strings.Contains(r.stdout, "reused 2-shard cluster") || !strings.Contains(r.stdout, "pushed map epoch 1") {
		t.Errorf("dev up --catalog:\n%s", r.stdout)
	}
	cfgPath := filepath.Join(dir, "pgshard.yaml")
	cfg, err := config.Load(config.Options{Path: cfgPath, Environ: []string{}, RequireMap: true})
	if err != nil {
		t.Fatal(err)
	}
	dsn := cfg.Catalog.DSN
	if !strings.Contains(dsn, "/pgshard_catalog?") || cfg.Map.Epoch != 1 {
		t.Fatalf("config after dev up --catalog: catalog.dsn %q, map epoch %d", dsn, cfg.Map.Epoch)
	}
	showMap := func() *shardmap.Map {
		t.Helper()
		r := mustRun(t, "", "map", "show", "--catalog", dsn, "--json")
		var m shardmap.Map
		if err := json.Unmarshal([]byte(r.stdout), &m); err != nil {
			t.Fatalf("map show --json: %v\n%s", err, r.stdout)
		}
		return &m
	}
	if m := showMap(); m.Epoch != 1 || len(m.Shards) != 2 {
		t.Fatalf("catalog after dev up --catalog: epoch %d, %d shards", m.Epoch, len(m.Shards))
	}

	before, err := os.ReadFile(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	r = mustRun(t, "", "dev", "add-shard", "--dir", dir)
	if !strings.Contains(r.stdout, "added shard2 (ordinal 2)") || !strings.Contains(r.stdout, "at epoch 2") || !strings.Contains(r.stdout, "none (empty)") {
		t.Errorf("dev add-shard:\n%s", r.stdout)
	}
	m := showMap()
	if m.Epoch != 2 || len(m.Shards) != 3 {
		t.Fatalf("catalog after add-shard: epoch %d, shards %+v", m.Epoch, m.Shards)
	}
	s2 := m.Shards[2]
	if s2.Name != "shard2" || s2.Ordinal != 2 || !s2.Empty || s2.PoolerDSN == "" {
		t.Errorf("the added shard in the catalog: %+v", s2)
	}
	for _, rg := range m.Ranges {
		if rg.Shard == "shard2" {
			t.Errorf("the added shard owns %v", rg)
		}
	}
	// The config's map is the catalog's.
	cfg2, err := config.Load(config.Options{Path: cfgPath, Environ: []string{}, RequireMap: true})
	if err != nil {
		t.Fatal(err)
	}
	if cfg2.Map.Epoch != 2 || len(cfg2.Map.Shards) != 3 || cfg2.Map.Shards[2] != s2 || cfg2.Catalog.DSN != dsn {
		t.Errorf("config after add-shard: epoch %d, shards %+v, catalog %q", cfg2.Map.Epoch, cfg2.Map.Shards, cfg2.Catalog.DSN)
	}
	// As if an add-shard had stopped after registering the shard, before
	// writing the config: running it again writes the catalog's map.
	if err := os.WriteFile(cfgPath, before, 0o644); err != nil {
		t.Fatal(err)
	}
	r = mustRun(t, "", "dev", "add-shard", "--dir", dir)
	if !strings.Contains(r.stdout, "shard2 was already added and registered (catalog epoch 2)") {
		t.Errorf("add-shard with the config behind the catalog:\n%s", r.stdout)
	}
	if cfg3, err := config.Load(config.Options{Path: cfgPath, Environ: []string{}, RequireMap: true}); err != nil || cfg3.Map.Epoch != 2 || len(cfg3.Map.Shards) != 3 {
		t.Errorf("config after catching up: %v %+v", err, cfg3)
	}
	st := status(t, dir)
	if len(st.Shards) != 3 || !st.Shards[2].Ready || !st.Shards[2].PoolerOK || len(st.Shards[2].Ranges) != 0 {
		t.Errorf("status after add-shard: %+v", st.Shards)
	}
	// Migrated, with its identity at the new epoch.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, s2.PoolerDSN)
	if err != nil {
		t.Fatal(err)
	}
	var name string
	var ordinal, epoch int64
	err = conn.QueryRow(ctx, "SELECT shard_name, ordinal, map_epoch FROM pgshard_identity").Scan(&name, &ordinal, &epoch)
	conn.Close(ctx)
	if err != nil || name != "shard2" || ordinal != 2 || epoch != 2 {
		t.Errorf("shard2's identity: %q %d %d, %v", name, ordinal, epoch, err)
	}

	// The name is taken now.
	if r := run(t, "", "dev", "add-shard", "--dir", dir, "--name", "shard2"); r.code != 1 || !strings.Contains(r.stderr, `shard "shard2" already exists`) {
		t.Errorf("second add-shard --name shard2: exit %d %q", r.code, r.stderr)
	}
	if m := showMap(); m.Epoch != 2 {
		t.Errorf("a refused add changed the catalog: epoch %d", m.Epoch)
	}

	// An add-shard interrupted after starting the shard, before
	// registering it: status shows it, dev up keeps the map (no re-split)
	// and says so, and add-shard without a name finishes it.
	if _, _, err := cluster.AddShard(ctx, dir, "late", nil); err != nil {
		t.Fatal(err)
	}
	st = status(t, dir)
	if len(st.Shards) != 4 || st.Shards[3].Name != "late" || !st.Shards[3].Unregistered || !st.Shards[3].Ready {
		t.Errorf("status with an unregistered shard: %+v", st.Shards)
	}
	r = mustRun(t, "", "dev", "up", "--dir", dir, "--fsync=false")
	if !strings.Contains(r.stdout, "reused 4-shard cluster") || !strings.Contains(r.stdout, "map epoch 2") || !strings.Contains(r.stdout, "not in the map (an interrupted dev add-shard): late") {
		t.Errorf("dev up with an unregistered shard:\n%s", r.stdout)
	}
	r = mustRun(t, "", "dev", "add-shard", "--dir", dir)
	if !strings.Contains(r.stderr, "late runs but is not in the catalog") || !strings.Contains(r.stdout, "added late (ordinal 3)") || !strings.Contains(r.stdout, "at epoch 3") {
		t.Errorf("add-shard finishing late:\nstdout %s\nstderr %s", r.stdout, r.stderr)
	}
	if m := showMap(); m.Epoch != 3 || len(m.Shards) != 4 || !m.Shards[3].Empty {
		t.Errorf("catalog after finishing late: epoch %d, shards %+v", m.Epoch, m.Shards)
	}

	// dev up reuses the grown cluster and keeps its map and catalog.
	st = status(t, dir)
	r = mustRun(t, "", "dev", "up", "--dir", dir, "--fsync=false")
	if !strings.Contains(r.stdout, "reused 4-shard cluster") || !strings.Contains(r.stdout, "map epoch 3") || strings.Contains(r.stdout, "not in the map") {
		t.Errorf("dev up after add-shard:\n%s", r.stdout)
	}
	again := status(t, dir)
	for i := range again.Shards {
		if again.Shards[i].PID != st.Shards[i].PID || again.Shards[i].Unregistered {
			t.Errorf("%s restarted by dev up, or unregistered: %+v", again.Shards[i].Name, again.Shards[i])
		}
	}

	mustRun(t, "", "dev", "down", "--dir", dir)
	deadline := time.Now().Add(30 * time.Second)
	for _, s := range st.Shards {
		for _, pid := range []int{s.PID, s.PoolerPID} {
			for alive(pid) {
				if time.Now().After(deadline) {
					t.Fatalf("pid %d still running after dev down", pid)
				}
				time.Sleep(50 * time.Millisecond)
			}
		}
	}
	if procs := processesMentioning(dir + string(os.PathSeparator)); len(procs) > 0 {
		t.Errorf("processes still mention %s: %v", dir, procs)
	}
}
