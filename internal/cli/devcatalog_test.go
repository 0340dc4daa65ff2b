package cli_test

import (
	"context"
	"encoding/json"
	"net/url"
	"strings"
	"testing"

	"github.com/pgshard/pgshard/cluster"
	"github.com/pgshard/pgshard/cluster/clustertest"
)

// devCatalogStatus is the catalog part of `dev status --json`.
type devCatalogStatus struct {
	Shards []struct {
		DSN string `json:"dsn"`
	} `json:"shards"`
	CatalogDSN    string `json:"catalog_dsn"`
	CatalogServer *struct {
		DSN   string `json:"dsn"`
		PID   int    `json:"pid"`
		Ready bool   `json:"ready"`
	} `json:"catalog_server"`
}

func catalogStatus(t *testing.T, dir string) devCatalogStatus {
	t.Helper()
	var st devCatalogStatus
	r := mustRun(t, "", "dev", "status", "--dir", dir, "--json")
	if err := json.Unmarshal([]byte(r.stdout), &st); err != nil {
		t.Fatalf("dev status --json: %v\n%s", err, r.stdout)
	}
	return st
}

func dsnHost(t *testing.T, dsn string) string {
	t.Helper()
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatalf("DSN %q: %v", dsn, err)
	}
	return u.Host
}

// TestDevCatalogServer: dev up --catalog-server puts the catalog on a
// server of its own (catalog.dsn names it, not shard0's), dev status
// shows it, a dev up without the flag keeps it, dev down stops it; and
// the flag is refused on a cluster whose catalog is on shard0's server.
func TestDevCatalogServer(t *testing.T) {
	if err := cluster.Local().(cluster.SpecChecker).AvailableFor(context.Background(), cluster.Spec{}); err != nil {
		clustertest.SkipOrFail(t, err)
	}
	dir := clustertest.Dir(t)
	up := []string{"dev", "up", "--dir", dir, "--shards", "1", "--pgbouncer=false", "--fsync=false"}
	r := mustRun(t, "", append(up, "--catalog-server")...)
	if !strings.Contains(r.stdout, "pushed map epoch 1") {
		t.Errorf("dev up --catalog-server:\n%s", r.stdout)
	}
	st := catalogStatus(t, dir)
	if st.CatalogServer == nil || !st.CatalogServer.Ready || st.CatalogServer.PID == 0 || len(st.Shards) != 1 {
		t.Fatalf("status after dev up --catalog-server: %+v", st)
	}
	server := dsnHost(t, st.CatalogServer.DSN)
	if got := dsnHost(t, st.CatalogDSN); got != server || got == dsnHost(t, st.Shards[0].DSN) || !strings.Contains(st.CatalogDSN, "/pgshard_catalog?") {
		t.Errorf("catalog.dsn %s: want the catalog server %s, not shard0's %s", st.CatalogDSN, server, st.Shards[0].DSN)
	}
	if r := mustRun(t, "", "map", "show", "--catalog", st.CatalogDSN, "--json"); !strings.Contains(r.stdout, `"epoch": 1`) {
		t.Errorf("map show from the catalog server:\n%s", r.stdout)
	}

	// Reused without the flag: kept, and the config still names it.
	mustRun(t, "", up...)
	if again := catalogStatus(t, dir); again.CatalogServer == nil || again.CatalogServer.PID != st.CatalogServer.PID || again.CatalogDSN != st.CatalogDSN {
		t.Errorf("reused: %+v, want the catalog server kept (%+v)", again, st)
	}

	mustRun(t, "", "dev", "down", "--dir", dir)
	if down := catalogStatus(t, dir); down.CatalogServer == nil || down.CatalogServer.PID != 0 || down.CatalogServer.Ready {
		t.Errorf("after dev down: catalog server %+v", down.CatalogServer)
	}

	// A catalog on shard0's server stays there.
	dir2 := clustertest.Dir(t)
	up2 := []string{"dev", "up", "--dir", dir2, "--shards", "1", "--pgbouncer=false", "--fsync=false"}
	mustRun(t, "", append(up2, "--catalog")...)
	if r := run(t, "", append(up2, "--catalog-server")...); r.code == 0 || !strings.Contains(r.stderr, "dev down --purge") {
		t.Errorf("--catalog-server on a cluster with its catalog on shard0: exit %d\n%s", r.code, r.stderr)
	}
	if st := catalogStatus(t, dir2); st.CatalogServer != nil || dsnHost(t, st.CatalogDSN) != dsnHost(t, st.Shards[0].DSN) {
		t.Errorf("the refused dev up changed the cluster: %+v", st)
	}
}
