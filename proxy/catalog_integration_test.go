package proxy_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgshard/pgshard/catalog"
	"github.com/pgshard/pgshard/migrations"
	"github.com/pgshard/pgshard/proxy"
	"github.com/pgshard/pgshard/shardmap"
)

// within calls cond until it returns nil, at most d; it fails the test
// with cond's last error.
func within(t *testing.T, d time.Duration, what string, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v: %v", what, d, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// moveOneBucket returns m at the next epoch with bucket b owned by to.
func moveOneBucket(t *testing.T, m *shardmap.Map, b int, to string) *shardmap.Map {
	t.Helper()
	next := m.Clone()
	next.Epoch++
	next.Ranges = nil
	for _, r := range m.Ranges {
		if b < r.Lo || b > r.Hi {
			next.Ranges = append(next.Ranges, r)
			continue
		}
		if r.Lo < b {
			next.Ranges = append(next.Ranges, shardmap.Range{Lo: r.Lo, Hi: b - 1, Shard: r.Shard})
		}
		next.Ranges = append(next.Ranges, shardmap.Range{Lo: b, Hi: b, Shard: to})
		if b < r.Hi {
			next.Ranges = append(next.Ranges, shardmap.Range{Lo: b + 1, Hi: r.Hi, Shard: r.Shard})
		}
	}
	if err := next.Validate(); err != nil {
		t.Fatal(err)
	}
	return next
}

// TestProxyFollowsCatalog: proxies on a real cluster while a bucket moves
// (its row copied, every shard's fence set at the next epoch, as the
// mover's flip does).
//   - A proxy that holds the old map (no catalog) cannot read or write
//     the moved key: its plain SQL gets the fence's PS001 from the old
//     owner, never a stale row, and the old owner's row is unchanged.
//   - A proxy following the catalog gets the same error until the new
//     map is pushed, then answers from the new owner.
//   - With the catalog cut off, once its lease lapsed that proxy refuses
//     keyed statements with 57P03 instead of routing by its map; with
//     the catalog back it serves again.
func TestProxyFollowsCatalog(t *testing.T) {
	ctx := ctxT(t, 4*time.Minute)
	d, cat, catDB := catalogTestDB(t, ctx)
	old := d.m
	f, err := cat.NewFollower(catalog.FollowOptions{Owner: "proxy-test", Kind: "proxy", TTL: 8 * time.Second, Interval: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	// A proxy on a static map asserts only when told to (FenceAuto is
	// on only while following a catalog): this one is.
	stale := startProxyFor(t, d, func(c *proxy.Config) { c.Fence = proxy.FenceOn })
	following := startProxyFor(t, d, func(c *proxy.Config) { c.Follow, c.CatalogName = f, "catalog "+catDB })
	within(t, time.Minute, "lease acquired", func() error { return f.Check(time.Now()) })

	id := fmt.Sprintf("pfence-%d", time.Now().UnixNano())
	fc := following.connect(t)
	if _, err := fc.Exec(ctx, `INSERT INTO executions (id, definition_id, data, version) VALUES ($1, 'follow', 'v1', 1)`, id); err != nil {
		t.Fatal(err)
	}

	// The move: copy the row, flip every shard's fence to the next epoch.
	b := old.Bucket(id)
	fromIdx := old.ShardIndexForBucket(b)
	toIdx := (fromIdx + 1) % len(old.Shards)
	next := moveOneBucket(t, old, b, old.Shards[toIdx].Name)
	src, dst := d.shardConn(t, fromIdx), d.shardConn(t, toIdx)
	if _, err := dst.Exec(ctx, `INSERT INTO executions (id, definition_id, data, version) VALUES ($1, 'follow', 'v1', 1)`, id); err != nil {
		t.Fatal(err)
	}
	for i := range next.Shards {
		if _, err := migrations.SetFence(ctx, d.shardConn(t, i), next); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := src.Exec(ctx, `UPDATE executions SET data = 'stale' WHERE id = $1`, id); err != nil {
		t.Fatal(err) // the old owner's copy, as the mover leaves it: a stale read would show it
	}

	sc := stale.connect(t)
	for _, conn := range []*pgx.Conn{sc, fc} {
		var data string
		err := conn.QueryRow(ctx, `SELECT data FROM executions WHERE id = $1`, id).Scan(&data)
		if pgCode(err) != "PS001" {
			t.Fatalf("read of the moved key with the old map: %q, %v; want the fence's PS001", data, err)
		}
		if _, err := conn.Exec(ctx, `UPDATE executions SET version = version + 1 WHERE id = $1`, id); pgCode(err) != "PS001" {
			t.Fatalf("write of the moved key with the old map: %v; want PS001", err)
		}
		// The simple protocol and an explicit transaction alike.
		_, err = conn.Exec(ctx, `UPDATE executions SET version = version + 1 WHERE id = '`+id+`'`, pgx.QueryExecModeSimpleProtocol)
		if pgCode(err) != "PS001" {
			t.Fatalf("simple-protocol write of the moved key: %v; want PS001", err)
		}
		tx, err := conn.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(ctx, `UPDATE executions SET version = version + 1 WHERE id = $1`, id); pgCode(err) != "PS001" {
			t.Fatalf("write in a transaction block: %v; want PS001", err)
		}
		_ = tx.Rollback(ctx)
	}
	var v int
	if err := src.QueryRow(ctx, `SELECT version FROM executions WHERE id = $1`, id).Scan(&v); err != nil || v != 1 {
		t.Fatalf("the old owner's row: version %d, %v; want 1 (no write through a stale map)", v, err)
	}

	// The catalog gets the new map: the following proxy answers from the
	// new owner; the stale one still refuses.
	if err := cat.Push(ctx, next, old.Epoch); err != nil {
		t.Fatal(err)
	}
	within(t, time.Minute, "the following proxy reads the new owner", func() error {
		var data string
		if err := fc.QueryRow(ctx, `SELECT data FROM executions WHERE id = $1`, id).Scan(&data); err != nil {
			if pgCode(err) == "PS001" {
				return err
			}
			t.Fatalf("read after the push: %v", err)
		}
		if data != "v1" {
			t.Fatalf("read %q after the push, want the new owner's v1", data)
		}
		return nil
	})
	if _, err := fc.Exec(ctx, `UPDATE executions SET version = version + 1 WHERE id = $1`, id); err != nil {
		t.Fatal(err)
	}
	if err := dst.QueryRow(ctx, `SELECT version FROM executions WHERE id = $1`, id).Scan(&v); err != nil || v != 2 {
		t.Fatalf("the new owner's row: version %d, %v; want 2", v, err)
	}
	if _, err := sc.Exec(ctx, `UPDATE executions SET version = version + 1 WHERE id = $1`, id); pgCode(err) != "PS001" {
		t.Fatalf("the stale proxy's write after the push: %v; want PS001", err)
	}

	// The catalog cut off: its database refuses connections, its
	// sessions end; once the lease lapsed, keyed statements are refused.
	admin := d.shardConn(t, 0)
	cutOff := func(off bool) {
		t.Helper()
		q := `ALTER DATABASE ` + pgx.Identifier{catDB}.Sanitize() + ` ALLOW_CONNECTIONS ` + map[bool]string{true: "false", false: "true"}[off]
		if _, err := admin.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
		if off {
			if _, err := admin.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()`, catDB); err != nil {
				t.Fatal(err)
			}
		}
	}
	cutOff(true)
	t.Cleanup(func() {
		_, _ = admin.Exec(context.Background(), `ALTER DATABASE `+pgx.Identifier{catDB}.Sanitize()+` ALLOW_CONNECTIONS true`)
	})
	within(t, time.Minute, "refused once the lease lapsed", func() error {
		_, err := fc.Exec(ctx, `SELECT data FROM executions WHERE id = $1`, id)
		switch pgCode(err) {
		case "57P03":
			if !strings.Contains(err.Error(), "catalog "+catDB) {
				t.Fatalf("the refusal does not name the catalog: %v", err)
			}
			return nil
		case "":
			return errors.New("still served")
		}
		t.Fatalf("read while the lease lapses: %v", err)
		return nil
	})
	if _, err := fc.Exec(ctx, `SELECT 1`); err != nil {
		t.Fatalf("a key-less statement with the lease lapsed: %v", err)
	}
	cutOff(false)
	within(t, time.Minute, "served again with the catalog back", func() error {
		_, err := fc.Exec(ctx, `SELECT data FROM executions WHERE id = $1`, id)
		return err
	})
}
