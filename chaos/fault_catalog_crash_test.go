package chaos_test

import (
	"context"
	"net"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pgshard/pgshard/catalog"
	"github.com/pgshard/pgshard/chaos"
	"github.com/pgshard/pgshard/cluster"
	"github.com/pgshard/pgshard/cluster/clustertest"
	"github.com/pgshard/pgshard/shardmap"
)

// TestCatalogCrashValidation: a catalog crash needs a hold past the
// followers' lease TTL, takes only param mode and no shards; Check runs
// it only where the run's catalog is on the cluster's own catalog server
// and refuses it, saying why, on a cluster without one, where the
// catalog is elsewhere, or without process control.
func TestCatalogCrashValidation(t *testing.T) {
	for _, tc := range []struct {
		name string
		spec chaos.Spec
		want string
	}{
		{"no hold", chaos.Spec{Kind: chaos.KindCatalogCrash, Every: 10 * time.Second}, "hold: catalog-crash needs a hold"},
		{"hold within the ttl", chaos.Spec{Kind: chaos.KindCatalogCrash, Every: 10 * time.Second, Hold: 2 * time.Second}, "hold: 2s is too short for catalog-crash"},
		{"bad mode", chaos.Spec{Kind: chaos.KindCatalogCrash, Every: 10 * time.Second, Hold: 4 * time.Second, Params: chaos.Params{"mode": "fast"}}, `params.mode: "fast": want immediate or kill`},
		{"shards", chaos.Spec{Kind: chaos.KindCatalogCrash, Every: 10 * time.Second, Hold: 4 * time.Second, Shards: []string{"shard0"}}, "shards: catalog-crash acts on the catalog server"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := chaos.Plan([]chaos.Spec{tc.spec}, time.Minute, threeShards, 1)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to contain %q", err, tc.want)
			}
		})
	}
	plan, err := chaos.Plan([]chaos.Spec{{Kind: chaos.KindCatalogCrash, Every: 10 * time.Second, Hold: 3500 * time.Millisecond, Params: chaos.Params{"mode": "kill"}}}, time.Minute, threeShards, 1)
	if err != nil || len(plan) == 0 {
		t.Fatalf("Plan: %v, %d faults", err, len(plan))
	}
	if plan[0].Shard != -1 {
		t.Fatalf("planned on shard %d, want -1 (the catalog server)", plan[0].Shard)
	}

	m, err := shardmap.Even(64, []shardmap.Shard{{Name: "shard0", Ordinal: 0, DSN: "postgres://u@127.0.0.1:1/db"}})
	if err != nil {
		t.Fatal(err)
	}
	withServer := func() *cluster.Cluster {
		return &cluster.Cluster{Provider: "local", Shards: []cluster.Shard{{Name: "shard0", Host: "127.0.0.1", Port: 1}},
			Catalog: &cluster.Shard{Name: cluster.CatalogServerName, Ordinal: -1, Host: "127.0.0.1", Port: 9}}
	}
	ok := &chaos.Env{Map: m, Cluster: withServer(), Catalog: &catalog.Catalog{}, CatalogServer: "127.0.0.1:9"}
	if err := chaos.Check(plan, ok); err != nil {
		t.Fatalf("the run's catalog on the catalog server: %v", err)
	}
	for _, tc := range []struct {
		name string
		env  func(e chaos.Env) chaos.Env
		want string
	}{
		{"no catalog server", func(e chaos.Env) chaos.Env {
			e.Cluster = &cluster.Cluster{Provider: "local", Shards: e.Cluster.Shards}
			e.CatalogServer = "127.0.0.1:1"
			return e
		}, "catalog-crash (on the catalog server) needs a catalog server of the cluster's own (`pgshard dev up --catalog-server`); this cluster has none"},
		{"catalog elsewhere", func(e chaos.Env) chaos.Env { e.CatalogServer = "127.0.0.1:1"; return e },
			"needs the run's catalog on the cluster's catalog server 127.0.0.1:9 (catalog.dsn names it); it is on 127.0.0.1:1"},
		{"no run catalog", func(e chaos.Env) chaos.Env { e.Catalog, e.CatalogServer = nil, ""; return e }, "catalog-crash (on the mover) needs the run's catalog"},
		{"no process control", func(e chaos.Env) chaos.Env { e.Cluster = nil; return e }, "catalog-crash (on the catalog server) needs process control"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := tc.env(*ok)
			err := chaos.Check(plan, &env)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to contain %q", err, tc.want)
			}
		})
	}
}

// TestCatalogCrashRefusesAtInject: Inject re-checks what Check checks
// (it may run with a plan Check never saw) and crashes nothing then;
// Heal after a failed Inject records nothing and starts nothing.
func TestCatalogCrashRefusesAtInject(t *testing.T) {
	m, err := shardmap.Even(64, []shardmap.Shard{{Name: "shard0", Ordinal: 0, DSN: "postgres://u@127.0.0.1:1/db"}})
	if err != nil {
		t.Fatal(err)
	}
	env := &chaos.Env{Map: m, Cluster: &cluster.Cluster{Provider: "local", Shards: []cluster.Shard{{Name: "shard0"}}}, Catalog: &catalog.Catalog{}, CatalogServer: "127.0.0.1:1"}
	f, err := chaos.NewFault(chaos.KindCatalogCrash)
	if err != nil {
		t.Fatal(err)
	}
	ev, err := f.Inject(context.Background(), env, -1, nil, nil)
	if err == nil || !strings.Contains(err.Error(), "catalog-crash: needs a catalog server of the cluster's own") || ev.Landed {
		t.Fatalf("Inject = %+v, %v", ev, err)
	}
	ev, err = f.Heal(context.Background(), env, -1)
	if err != nil || ev.Landed || len(ev.Fields) != 0 {
		t.Fatalf("Heal = %+v, %v", ev, err)
	}
}

// TestCatalogCrashRecords crashes a real catalog server (a private
// 1-shard cluster with one): Inject stops it — the shard runs on — and
// records the mode, its old pid, the followers, the TTL and cut_t; Heal
// starts it again, recording heal_t after cut_t, the new pid and
// the crash recovery of its log; it lands (down longer than the TTL, a
// new postmaster ran crash recovery). HealAll starts a server a crash
// (mode kill) left down.
func TestCatalogCrashRecords(t *testing.T) {
	c := clustertest.Private(t, cluster.Spec{Shards: 1, CatalogServer: true})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	m, err := c.Map(64)
	if err != nil {
		t.Fatal(err)
	}
	srv, ok := c.CatalogServer()
	if !ok {
		t.Fatal("no catalog server")
	}
	addr := net.JoinHostPort(srv.Host, strconv.Itoa(srv.Port))
	env := &chaos.Env{Cluster: c, Map: m, Catalog: &catalog.Catalog{}, CatalogServer: addr,
		CatalogTTL: 100 * time.Millisecond, CatalogFollowers: []string{"proxy", "router"}, Clock: time.Now()}
	plan := []chaos.Planned{{ID: "f1", Kind: chaos.KindCatalogCrash, Shard: -1}}
	if err := chaos.Check(plan, env); err != nil {
		t.Fatal(err)
	}
	f, _ := chaos.NewFault(chaos.KindCatalogCrash)
	in, err := f.Inject(ctx, env, -1, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	fl := in.Fields
	if in.Landed || fl["mode"] != "immediate" || fl["old_pid"] != srv.PID || fl["follower"] != "proxy,router" || fl["ttl_ms"] != int64(100) {
		t.Fatalf("inject evidence = %+v", in)
	}
	cut, _ := fl["cut_t"].(int64)
	if cut <= 0 {
		t.Fatalf("cut_t = %v", fl["cut_t"])
	}
	if s, _ := c.CatalogServer(); s.PID != 0 {
		t.Fatalf("the catalog server runs after the inject: pid %d", s.PID)
	}
	if err := pingWithin(ctx, m.Shards[0].DSN, 10*time.Second); err != nil {
		t.Fatalf("shard0 with the catalog server down: %v", err)
	}
	time.Sleep(200 * time.Millisecond) // down past the TTL (100 ms), which Landed requires
	he, err := f.Heal(ctx, env, -1)
	if err != nil {
		t.Fatal(err)
	}
	hf := he.Fields
	heal, _ := hf["heal_t"].(int64)
	lines, _ := hf["recovery"].([]string)
	if !he.Landed || heal <= cut || hf["old_pid"] != srv.PID || hf["new_pid"] == srv.PID || hf["new_pid"] == 0 ||
		!slices.ContainsFunc(lines, func(l string) bool { return strings.Contains(l, "automatic recovery in progress") }) {
		t.Fatalf("heal evidence = %+v", he)
	}
	if err := pingWithin(ctx, srv.DSN("postgres", c.Spec.User), 10*time.Second); err != nil {
		t.Fatalf("the catalog server after the heal: %v", err)
	}

	// HealAll starts a catalog server a crash left down (an env without
	// the run's catalog: no moves to finish).
	f, _ = chaos.NewFault(chaos.KindCatalogCrash)
	if _, err := f.Inject(ctx, env, -1, chaos.Params{"mode": "kill"}, nil); err != nil {
		t.Fatal(err)
	}
	bare := *env
	bare.Catalog = nil
	if err := chaos.HealAll(ctx, &bare); err != nil {
		t.Fatalf("HealAll: %v", err)
	}
	if s, _ := c.CatalogServer(); s.PID == 0 {
		t.Fatal("HealAll left the catalog server down")
	}
	if err := pingWithin(ctx, srv.DSN("postgres", c.Spec.User), 10*time.Second); err != nil {
		t.Fatalf("the catalog server after HealAll: %v", err)
	}
}
