package cli

import (
	"strings"
	"testing"

	"github.com/pgshard/pgshard/cluster"
)

// TestDevCatalogDSN: the dev catalog is on the catalog server when the
// cluster has one, else on shard0's server.
func TestDevCatalogDSN(t *testing.T) {
	c := &cluster.Cluster{Spec: cluster.Spec{User: "postgres"}, Shards: []cluster.Shard{
		{Name: "shard0", Host: "127.0.0.1", Port: 5001}, {Name: "shard1", Ordinal: 1, Host: "127.0.0.1", Port: 5002},
	}}
	if got, want := devCatalogDSN(c), "postgres://postgres@127.0.0.1:5001/pgshard_catalog?sslmode=disable"; got != want {
		t.Errorf("without a catalog server: %s, want %s", got, want)
	}
	c.Catalog = &cluster.Shard{Name: cluster.CatalogServerName, Ordinal: -1, Host: "127.0.0.1", Port: 5009}
	if got, want := devCatalogDSN(c), "postgres://postgres@127.0.0.1:5009/pgshard_catalog?sslmode=disable"; got != want {
		t.Errorf("with a catalog server: %s, want %s", got, want)
	}
	if got := devCatalogServer(c).Name; got != cluster.CatalogServerName {
		t.Errorf("catalog server named %q", got)
	}
}

// TestCheckCatalogServer: --catalog-server is refused only on a reused
// cluster without a catalog server whose config already names a catalog
// (it lives on a shard's server and would be left behind).
func TestCheckCatalogServer(t *testing.T) {
	without := &cluster.Cluster{Dir: "/d"}
	with := &cluster.Cluster{Dir: "/d", Catalog: &cluster.Shard{Name: cluster.CatalogServerName}}
	onShard0 := "postgres://postgres@127.0.0.1:5001/pgshard_catalog?sslmode=disable"
	for _, tc := range []struct {
		name    string
		loaded  *cluster.Cluster
		prev    string
		flag    bool
		refused bool
	}{
		{name: "new cluster", loaded: nil, flag: true},
		{name: "reused, no catalog yet", loaded: without, flag: true},
		{name: "reused, catalog on shard0", loaded: without, prev: onShard0, flag: true, refused: true},
		{name: "reused, catalog on shard0, no flag", loaded: without, prev: onShard0},
		{name: "reused with a catalog server", loaded: with, prev: "postgres://postgres@127.0.0.1:5009/pgshard_catalog", flag: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := checkCatalogServer(tc.loaded, tc.prev, tc.flag)
			if tc.refused != (err != nil) {
				t.Fatalf("checkCatalogServer = %v, want refused %t", err, tc.refused)
			}
			if err != nil && (!strings.Contains(err.Error(), "dev down --purge --dir /d") || !strings.Contains(err.Error(), "127.0.0.1:5001")) {
				t.Errorf("refusal without the hint or the catalog: %v", err)
			}
		})
	}
}
