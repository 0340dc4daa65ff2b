package cluster_test

import (
	"testing"

	"github.com/pgshard/pgshard/cluster"
)

func TestLogPaths(t *testing.T) {
	tests := []struct {
		name           string
		shard          cluster.Shard
		log, poolerLog string
	}{
		{"local with pgbouncer", cluster.Shard{Dir: "/c/shard0", PoolerPort: 6432}, "/c/shard0/postgres.log", "/c/shard0/pgbouncer.log"},
		{"local without pgbouncer", cluster.Shard{Dir: "/c/shard1"}, "/c/shard1/postgres.log", ""},
		{"container", cluster.Shard{PoolerPort: 6432}, "", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.shard.LogPath(); got != tc.log {
				t.Errorf("LogPath() = %q, want %q", got, tc.log)
			}
			if got := tc.shard.PoolerLogPath(); got != tc.poolerLog {
				t.Errorf("PoolerLogPath() = %q, want %q", got, tc.poolerLog)
			}
		})
	}
}
