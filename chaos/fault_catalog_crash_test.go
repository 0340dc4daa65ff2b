package chaos_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/pgshard/pgshard/catalog"
	"github.com/pgshard/pgshard/chaos"
	"github.com/pgshard/pgshard/cluster"
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
