package migrations_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/pgshard/pgshard/migrations"
)

// TestMigrateNamesBlockingBackend is the regression test of issue 11,
// defect 6: a migrate that waits for a lock gives up after LockTimeout,
// with an error naming the backend that blocked it, instead of waiting
// forever.
func TestMigrateNamesBlockingBackend(t *testing.T) {
	tests := []struct {
		name string
		// block starts, on a connection named "blocker-test", a
		// transaction that holds what migrate needs, and leaves it open.
		block func(t *testing.T, ctx context.Context, dsn string)
		// first migrates the shard before the blocker (false: only the
		// migrations, no identity yet).
		first bool
		want  string
	}{
		{"another migrator holds the advisory lock", func(t *testing.T, ctx context.Context, dsn string) {
			c := connect(t, dsn+"&application_name=blocker-test")
			if _, err := c.Exec(ctx, `BEGIN`); err != nil {
				t.Fatal(err)
			}
			if _, err := c.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, migrations.LockKey); err != nil {
				t.Fatal(err)
			}
		}, true, "pg_advisory_xact_lock"},
		{"an open write transaction on outbox blocks the stride", func(t *testing.T, ctx context.Context, dsn string) {
			c := connect(t, dsn+"&application_name=blocker-test")
			if _, err := c.Exec(ctx, `BEGIN; INSERT INTO outbox (target_id, event) VALUES ('t', 'e')`); err != nil {
				t.Fatal(err)
			}
		}, false, "LOCK TABLE outbox"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := oneShardMap(t, 3)
			ctx := ctxT(t)
			dsn := m.Shards[0].DSN
			if tt.first {
				mustApply(t, m, migrations.Options{})
			} else if _, _, err := migrations.Migrate(ctx, connect(t, dsn), migrations.All()); err != nil {
				t.Fatal(err)
			}
			tt.block(t, ctx, dsn)
			var pid int
			if err := connect(t, dsn).QueryRow(ctx, `SELECT pid FROM pg_stat_activity WHERE application_name = 'blocker-test'`).Scan(&pid); err != nil {
				t.Fatal(err)
			}
			actx, cancel := context.WithTimeout(ctx, 20*time.Second) // a hang fails below, not here
			defer cancel()
			start := time.Now()
			// 3 s: time for the lock watch to connect and look on a loaded
			// machine (it looks five times within the lock timeout).
			_, err := migrations.Apply(actx, m, migrations.Options{LockTimeout: 3 * time.Second})
			took := time.Since(start)
			t.Logf("after %v: %v", took.Round(time.Millisecond), err)
			if err == nil {
				t.Fatal("migrate succeeded while blocked")
			}
			for _, w := range []string{"lock timeout", fmt.Sprintf("backend pid %d", pid), `"blocker-test"`, "idle in transaction", tt.want} {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error does not say %q: %v", w, err)
				}
			}
			if took > 15*time.Second {
				t.Errorf("took %v to give up with a 3s lock timeout", took)
			}
		})
	}
}
