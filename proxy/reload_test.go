package proxy_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgshard/pgshard/proxy"
	"github.com/pgshard/pgshard/shardmap"
)

// reloadSource is a test's configuration source for Config.Reload.
type reloadSource struct {
	mu   sync.Mutex
	base proxy.Config
	next func(proxy.Config) (proxy.Config, error)
}

func (r *reloadSource) set(f func(proxy.Config) (proxy.Config, error)) {
	r.mu.Lock()
	r.next = f
	r.mu.Unlock()
}

func (r *reloadSource) load(context.Context) (proxy.Config, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.next(r.base)
}

// withMap returns cfg routing by m (a new analyzer for it).
func withMap(cfg proxy.Config, m *shardmap.Map) (proxy.Config, error) {
	an, err := newRouter(m)
	if err != nil {
		return cfg, err
	}
	cfg.Map, cfg.Analyzer = m, an
	return cfg, nil
}

// epoch returns a copy of m with the epoch e.
func epoch(m *shardmap.Map, e uint64) *shardmap.Map {
	c := m.Clone()
	c.Epoch = e
	return c
}

// TestReload: RELOAD applies a valid configuration between transactions
// (sessions, their transactions and prepared statements survive; a
// removed shard's pool drains after the transaction running on it; a shard
// added back is verified and used), and rejects an invalid one, a map of a
// lower epoch and a changed map that kept its epoch, with the reason,
// keeping the running configuration.
func TestReload(t *testing.T) {
	src := &reloadSource{}
	e := adminEnv(t, func(c *proxy.Config) {
		// The maps below move buckets without the mover (the shards'
		// fences keep the old owners, and would rightly refuse them).
		c.Fence = proxy.FenceOff
		src.base = *c
		c.Reload = src.load
	})
	ctx := ctxT(t, 2*time.Minute)
	admin := e.connectAdmin(t)
	m1 := e.db.m
	generation := func() string {
		var v string
		rows, err := admin.Query(ctx, "SHOW CONFIG")
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		for rows.Next() {
			var k, val, def, ch string
			if err := rows.Scan(&k, &val, &def, &ch); err != nil {
				t.Fatal(err)
			}
			if k == "generation" {
				v = val
			}
		}
		return v
	}
	reload := func() error { _, err := admin.Exec(ctx, "RELOAD"); return err }

	// A session with a prepared statement (pgx's statement cache) and a
	// key on shard3.
	sess := e.connect(t)
	k3 := e.db.keysOn(3, 1, 38_000_000)[0]
	k0 := e.db.keysOn(0, 1, 38_000_000)[0]
	if _, err := sess.Exec(ctx, "INSERT INTO accounts (aid) VALUES ($1) ON CONFLICT DO NOTHING", k3); err != nil {
		t.Fatal(err)
	}
	portOf := func(c *pgx.Conn, k int64) int {
		var port int
		if err := c.QueryRow(ctx, "SELECT inet_server_port() FROM accounts WHERE aid = $1 UNION ALL SELECT inet_server_port() WHERE NOT EXISTS (SELECT 1 FROM accounts WHERE aid = $1) LIMIT 1", k).Scan(&port); err != nil {
			t.Fatalf("port of key %d: %v", k, err)
		}
		return port
	}
	port3 := portOf(sess, k3)

	// Applied: the same shards at epoch 2.
	src.set(func(c proxy.Config) (proxy.Config, error) { return withMap(c, epoch(m1, 2)) })
	if err := reload(); err != nil {
		t.Fatalf("RELOAD at epoch 2: %v", err)
	}
	if g := generation(); g != "2" {
		t.Fatalf("generation %s after the first reload", g)
	}
	// Rejected: invalid, lower epoch, same epoch with another map, a shard
	// on another's database.
	for _, bad := range []struct {
		name string
		f    func(proxy.Config) (proxy.Config, error)
		want string
	}{
		{"invalid", func(c proxy.Config) (proxy.Config, error) {
			c, err := withMap(c, epoch(m1, 2))
			c.PoolSize = -1
			return c, err
		}, "PoolSize"},
		{"lower epoch", func(c proxy.Config) (proxy.Config, error) { return withMap(c, epoch(m1, 1)) }, "older"},
		{"changed map, same epoch", func(c proxy.Config) (proxy.Config, error) {
			m := epoch(m1, 2)
			m.Ranges[0].Shard, m.Ranges[1].Shard = m.Ranges[1].Shard, m.Ranges[0].Shard
			return withMap(c, m)
		}, "kept epoch"},
		{"a shard on another's database", func(c proxy.Config) (proxy.Config, error) {
			m := epoch(m1, 3)
			m.Shards[3].DSN, m.Shards[3].PoolerDSN = m.Shards[0].DSN, m.Shards[0].PoolerDSN
			return withMap(c, m)
		}, "disagree"},
	} {
		src.set(bad.f)
		err := reload()
		if err == nil || !strings.Contains(err.Error(), bad.want) || !strings.Contains(err.Error(), "unchanged") {
			t.Errorf("RELOAD %s: %v, want a rejection naming %q", bad.name, err, bad.want)
		}
	}
	if g := generation(); g != "2" {
		t.Fatalf("generation %s after rejected reloads", g)
	}

	// Applied: shard3 removed (its buckets go to shard2) while a session
	// has a transaction open on shard3.
	tx, err := sess.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "UPDATE accounts SET note = 'before reload' WHERE aid = $1", k3); err != nil {
		t.Fatal(err)
	}
	m2 := epoch(m1, 3)
	m2.Shards = m2.Shards[:3]
	for i := range m2.Ranges {
		if m2.Ranges[i].Shard == "shard3" {
			m2.Ranges[i].Shard = "shard2"
		}
	}
	if err := m2.Validate(); err != nil {
		t.Fatal(err)
	}
	src.set(func(c proxy.Config) (proxy.Config, error) { return withMap(c, m2) })
	if err := reload(); err != nil {
		t.Fatalf("RELOAD removing shard3: %v", err)
	}
	if g := generation(); g != "3" {
		t.Fatalf("generation %s after the reload", g)
	}
	// The open transaction goes on on shard3 and commits there.
	if _, err := tx.Exec(ctx, "UPDATE accounts SET note = 'in the old map' WHERE aid = $1", k3); err != nil {
		t.Fatalf("the transaction open across the reload: %v", err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	var note string
	if err := e.db.shardConn(t, 3).QueryRow(ctx, "SELECT note FROM accounts WHERE aid = $1", k3).Scan(&note); err != nil || note != "in the old map" {
		t.Fatalf("shard3 row after the transaction: %q %v", note, err)
	}
	if _, err := admin.Exec(ctx, "WAIT_CLOSE"); err != nil {
		t.Fatalf("WAIT_CLOSE for the removed shard's pool: %v", err)
	}
	// The session's next transaction uses the new map: k3 is on shard2 now.
	if p := portOf(sess, k3); p == port3 {
		t.Fatalf("key %d still routed to shard3's server (port %d) after the reload", k3, p)
	}
	if _, err := sess.Exec(ctx, "SELECT abalance FROM accounts WHERE aid = $1", k0); err != nil {
		t.Fatalf("the session's prepared statements after the reload: %v", err)
	}
	rows, err := admin.Query(ctx, "SHOW SHARDS")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for rows.Next() {
		n++
	}
	if n != 3 {
		t.Fatalf("SHOW SHARDS lists %d shards after removing one", n)
	}

	// Applied: shard3 back (epoch 4), verified against its identity record.
	src.set(func(c proxy.Config) (proxy.Config, error) { return withMap(c, epoch(m1, 4)) })
	if err := reload(); err != nil {
		t.Fatalf("RELOAD adding shard3 back: %v", err)
	}
	if p := portOf(sess, k3); p != port3 {
		t.Fatalf("key %d routed to port %d, want shard3's %d", k3, p, port3)
	}
	other := e.connect(t)
	if p := portOf(other, k3); p != port3 {
		t.Fatalf("a new session: key %d routed to port %d, want shard3's %d", k3, p, port3)
	}
}
