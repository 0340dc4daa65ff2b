package chaos

import (
	"strings"
	"testing"
)

// TestRunCatalogServer: the run's catalog goes on the server catalog.dsn
// names only when that server (host:port) is none of the shards'; with no
// catalog.dsn, or one on a shard's server (the dev default, shard0's), it
// stays on shard0's; a catalog server off this machine is refused.
func TestRunCatalogServer(t *testing.T) {
	m := moveTestMap(t) // shards on 127.0.0.1:1, :2 and :3
	shard0 := m.Shards[0].DSN
	for _, tc := range []struct {
		name, catalogDSN, wantDSN, wantWhere, wantErr string
	}{
		{name: "no catalog", wantDSN: shard0, wantWhere: "shard0's server"},
		{name: "on shard0's server", catalogDSN: "postgres://u@127.0.0.1:1/pgshard_catalog", wantDSN: shard0, wantWhere: "shard0's server"},
		{name: "on another shard's server", catalogDSN: "postgres://u@127.0.0.1:3/pgshard_catalog?sslmode=disable", wantDSN: shard0, wantWhere: "shard0's server"},
		{
			name: "a server of its own", catalogDSN: "postgres://u@127.0.0.1:4/pgshard_catalog?sslmode=disable",
			wantDSN: "postgres://u@127.0.0.1:4/pgshard_catalog?sslmode=disable", wantWhere: "the catalog server 127.0.0.1:4",
		},
		{
			name: "same port, another host", catalogDSN: "postgres://u@127.0.0.2:1/cat",
			wantDSN: "postgres://u@127.0.0.2:1/cat", wantWhere: "the catalog server 127.0.0.2:1",
		},
		{
			name: "default port", catalogDSN: "postgres://u@localhost/cat",
			wantDSN: "postgres://u@localhost/cat", wantWhere: "the catalog server localhost:5432",
		},
		{name: "not on this machine", catalogDSN: "postgres://u@db.example.com:5432/cat", wantErr: "not on this machine"},
		{name: "unparsable", catalogDSN: "postgres://u@127.0.0.1:bad/cat", wantErr: "catalog.dsn"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dsn, where, err := runCatalogServer(m, tc.catalogDSN)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("runCatalogServer(%q) = %q, %q, %v; want an error with %q", tc.catalogDSN, dsn, where, err, tc.wantErr)
				}
				return
			}
			if err != nil || dsn != tc.wantDSN || where != tc.wantWhere {
				t.Errorf("runCatalogServer(%q) = %q, %q, %v; want %q, %q", tc.catalogDSN, dsn, where, err, tc.wantDSN, tc.wantWhere)
			}
		})
	}
}
