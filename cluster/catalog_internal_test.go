package cluster

import (
	"context"
	"errors"
	"strings"
	"testing"
)

// TestCatalogServerState: the catalog server's entry survives the state
// file, becomes Cluster.Catalog, and a state whose spec and entry
// disagree is refused as corrupt.
func TestCatalogServerState(t *testing.T) {
	dir := t.TempDir()
	st := &state{Provider: localName, Spec: Spec{Shards: 1, CatalogServer: true},
		Shards:  []shardState{{Shard: Shard{Name: "shard0", Host: "127.0.0.1", Port: 5001}}},
		Catalog: &shardState{Shard: Shard{Name: CatalogServerName, Ordinal: -1, Host: "127.0.0.1", Port: 5009, PID: 42}, Initialized: true}}
	if err := st.write(dir); err != nil {
		t.Fatal(err)
	}
	got, err := readState(dir)
	if err != nil {
		t.Fatal(err)
	}
	c := newLocalCluster(dir, got, Binaries{}, runAs{})
	if c.Catalog == nil || *c.Catalog != st.Catalog.Shard || !c.Spec.CatalogServer {
		t.Errorf("Cluster.Catalog = %+v (spec %+v), want %+v", c.Catalog, c.Spec, st.Catalog.Shard)
	}
	if s := c.server(catalogIndex); s.Port != 5009 || s.PID != 42 {
		t.Errorf("server(catalogIndex) = %+v", s)
	}

	for _, bad := range []*state{
		{Provider: localName, Spec: Spec{Shards: 0, CatalogServer: true}},
		{Provider: localName, Spec: Spec{Shards: 0}, Catalog: st.Catalog},
	} {
		if err := bad.write(dir); err != nil {
			t.Fatal(err)
		}
		if _, err := readState(dir); err == nil || !strings.Contains(err.Error(), "catalog") {
			t.Errorf("state with catalog_server %t and entry %v: %v, want it refused", bad.Spec.CatalogServer, bad.Catalog != nil, err)
		}
	}
}

// TestContainersRefuseCatalogServer: the testcontainers provider says it
// cannot run a catalog server before it looks for Docker.
func TestContainersRefuseCatalogServer(t *testing.T) {
	_, err := Containers().Up(context.Background(), t.TempDir(), Spec{Shards: 1, CatalogServer: true})
	if !errors.Is(err, ErrNotSupported) {
		t.Errorf("Up with CatalogServer: %v, want ErrNotSupported", err)
	}
}
