package proxy_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgshard/pgshard/migrations"
	"github.com/pgshard/pgshard/proxy"
	"github.com/pgshard/pgshard/shardmap"
)

// halfFlip is a database caught inside a range move's flip: the row of
// key id copied to the destination, and the fence of one side only set
// to the map after the move (next) — the destination's (both serve the
// bucket: an unchecked read counts the row twice) or the source's
// (neither does: it misses it).
type halfFlip struct {
	old, next *shardmap.Map
	id, tag   string
	src, dst  int
}

// newHalfFlip writes one row of tag on every shard through the
// database's shards directly (key id's row on its owner) and copies
// id's row to the next shard, returning the move not yet flipped.
func newHalfFlip(t *testing.T, ctx context.Context, d *testDB, old *shardmap.Map) *halfFlip {
	t.Helper()
	h := &halfFlip{old: old, tag: fmt.Sprintf("served-%d", time.Now().UnixNano())}
	for i := range old.Shards {
		var k string
		for n := 0; k == ""; n++ {
			if c := fmt.Sprintf("%s-%d", h.tag, n); old.ShardIndexForBucket(old.Bucket(c)) == i {
				k = c
			}
		}
		if h.id == "" {
			h.id, h.src = k, i
		}
		if _, err := d.shardConn(t, i).Exec(ctx, `INSERT INTO executions (id, definition_id, data, version) VALUES ($1, $2, 'v1', 1)`, k, h.tag); err != nil {
			t.Fatal(err)
		}
	}
	h.dst = (h.src + 1) % len(old.Shards)
	h.next = moveOneBucket(t, old, old.Bucket(h.id), old.Shards[h.dst].Name)
	if _, err := d.shardConn(t, h.dst).Exec(ctx, `INSERT INTO executions (id, definition_id, data, version) VALUES ($1, $2, 'v1', 1)`, h.id, h.tag); err != nil {
		t.Fatal(err)
	}
	return h
}

// flip sets shard i's fence to the map after the move.
func (h *halfFlip) flip(t *testing.T, ctx context.Context, d *testDB, i int) {
	t.Helper()
	if _, err := migrations.SetFence(ctx, d.shardConn(t, i), h.next); err != nil {
		t.Fatal(err)
	}
}

// count is the number of rows of the flip's tag a read of every shard
// returns through conn, read in the extended protocol.
func (h *halfFlip) count(ctx context.Context, conn *pgx.Conn, mode pgx.QueryExecMode) (int, error) {
	var n int
	err := conn.QueryRow(ctx, `SELECT count(*) FROM executions WHERE definition_id = $1`, mode, h.tag).Scan(&n)
	return n, err
}

// readKinds are the ways countBy reads: a merged read in both protocols,
// COPY (its lines), a read in two stages (a cast with a type modifier),
// the first read of a transaction block, with its BEGIN in a message of
// its own and in the read's pipeline.
var readKinds = []string{"extended", "simple", "copy", "two stages", "first read of a transaction", "BEGIN in the read's pipeline"}

// countBy is count read the way kind says (readKinds).
func (h *halfFlip) countBy(ctx context.Context, conn *pgx.Conn, kind string) (int, error) {
	switch kind {
	case "simple":
		return h.count(ctx, conn, pgx.QueryExecModeSimpleProtocol)
	case "copy":
		var buf bytes.Buffer
		_, err := conn.PgConn().CopyTo(ctx, &buf, fmt.Sprintf("COPY (SELECT id FROM executions WHERE definition_id = '%s') TO STDOUT", h.tag))
		return strings.Count(buf.String(), "\n"), err
	case "first read of a transaction":
		tx, err := conn.Begin(ctx) // BEGIN in a message of its own, as psql and psycopg send it
		if err != nil {
			return 0, err
		}
		n, err := h.count(ctx, tx.Conn(), pgx.QueryExecModeExec)
		if err != nil {
			_ = tx.Rollback(ctx)
			return n, err
		}
		return n, tx.Commit(ctx)
	case "BEGIN in the read's pipeline":
		// BEGIN, the read and one Sync, as JDBC sends them with
		// autocommit off.
		got, err := beginAndReadInOnePipeline(ctx, conn.PgConn(), `SELECT count(*) FROM executions WHERE definition_id = $1`, h.tag)
		if err != nil {
			_, _ = conn.Exec(ctx, "ROLLBACK")
			return 0, err
		}
		n, err := strconv.Atoi(got)
		if err != nil {
			return 0, err
		}
		_, err = conn.Exec(ctx, "COMMIT")
		return n, err
	case "two stages":
		var n float64
		err := conn.QueryRow(ctx, `SELECT count(*)::numeric(10,2) FROM executions WHERE definition_id = $1`, h.tag).Scan(&n)
		return int(n), err
	}
	return h.count(ctx, conn, pgx.QueryExecModeExec)
}

// TestFanoutServedMismatch: a read of every shard whose shards are
// caught inside a flip — the destination's fence flipped and not the
// source's, then the other way round — is refused with 40001 naming the
// shard and both bucket sets, not answered with the moving row twice or
// not at all; by a merged SELECT in both protocols, COPY, a read in two
// stages, a read in a transaction block (which fails as on one
// database). The proxy follows no catalog: nothing to run it again by. With the fence
// off the same read counts the row twice. Once both fences agree with
// the proxy's map again, the read answers.
func TestFanoutServedMismatch(t *testing.T) {
	ctx := ctxT(t, 3*time.Minute)
	d, _, _ := catalogTestDB(t, ctx)
	on := startProxyFor(t, d, fenceMode(proxy.FenceOn))
	off := startProxyFor(t, d, fenceMode(proxy.FenceOff))
	h := newHalfFlip(t, ctx, d, d.m)
	conn := on.connect(t)
	if n, err := h.count(ctx, conn, pgx.QueryExecModeExec); err != nil || n != len(d.m.Shards) {
		t.Fatalf("before the flip: %d rows, %v; want %d", n, err, len(d.m.Shards))
	}

	refused := func(what string, err error, shard int) {
		t.Helper()
		var pe *pgconn.PgError
		if !errors.As(err, &pe) || pe.Code != "40001" {
			t.Fatalf("%s inside a flip: %v; want 40001", what, err)
		}
		name := d.m.Shards[shard].Name
		if !strings.Contains(pe.Message, `shard "`+name+`" serves buckets`) || !strings.Contains(pe.Message, "as the map of epoch") || pe.Hint == "" {
			t.Fatalf("%s: %q (hint %q); want the shard %s's served set and the map's, and a hint", what, pe.Message, pe.Hint, name)
		}
	}
	for _, side := range []struct {
		name string
		flip int
	}{
		{"destination flipped", h.dst},
		{"source flipped", h.src},
	} {
		d.withFence(t, ctx, d.m)
		h.flip(t, ctx, d, side.flip)
		if n, err := h.count(ctx, off.connect(t), pgx.QueryExecModeExec); err != nil || n != len(d.m.Shards)+1 {
			t.Fatalf("%s, fence off: %d rows, %v; want %d (the copy read too)", side.name, n, err, len(d.m.Shards)+1)
		}
		for _, kind := range readKinds {
			_, err := h.countBy(ctx, conn, kind)
			refused(side.name+", "+kind, err, side.flip)
		}

		tx, err := conn.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		_, err = h.count(ctx, tx.Conn(), pgx.QueryExecModeExec)
		refused(side.name+", in a transaction block", err, side.flip)
		if _, err := tx.Exec(ctx, "SELECT 1"); pgCode(err) != "25P02" {
			t.Fatalf("%s: the transaction after the refused read: %v; want 25P02", side.name, err)
		}
		_ = tx.Rollback(ctx)
	}
	d.withFence(t, ctx, d.m)
	if n, err := h.count(ctx, conn, pgx.QueryExecModeExec); err != nil || n != len(d.m.Shards) {
		t.Fatalf("fences back on the proxy's map: %d rows, %v; want %d", n, err, len(d.m.Shards))
	}
}

// withFence sets every shard's fence from m at an epoch newer than any
// it holds (the fence refuses older ones).
func (d *testDB) withFence(t *testing.T, ctx context.Context, m *shardmap.Map) {
	t.Helper()
	var top uint64
	for i := range d.m.Shards {
		var e int64
		if err := d.shardConn(t, i).QueryRow(ctx, `SELECT epoch FROM pgshard_fence_config`).Scan(&e); err != nil {
			t.Fatal(err)
		}
		top = max(top, uint64(e))
	}
	at := m.Clone()
	at.Epoch = max(m.Epoch, top)
	for i := range d.m.Shards {
		if _, err := migrations.SetFence(ctx, d.shardConn(t, i), at); err != nil {
			t.Fatal(err)
		}
	}
}

// TestProxyRetriesServedMismatch: a proxy following a catalog whose new
// map has not reached it yet (the follower's gate is held) reads every
// shard while the destination's fence flipped and the source's not: the
// destination refuses its part (PS002) before anything reached the
// client, the proxy waits for the catalog's map and — once the flip is
// complete and the gate opens — runs the read again: the client gets
// the row once and no error: a merged read in both protocols, COPY, a
// read in two stages and the first read of a transaction block.
func TestProxyRetriesServedMismatch(t *testing.T) {
	ctx := ctxT(t, 4*time.Minute)
	d, cat, catDB := catalogTestDB(t, ctx)
	p, gf := startGatedProxy(t, d, cat, catDB, "proxy-served-test")
	conn := p.connect(t)
	retries := func() float64 { return metricSum(t, p.srv, "pgshard_proxy_fence_retries_total", "state", "served") }
	cur := d.m
	for _, kind := range readKinds {
		h := newHalfFlip(t, ctx, d, cur)
		if n, err := h.countBy(ctx, conn, kind); err != nil || n != len(cur.Shards) {
			t.Fatalf("%s, before the flip: %d rows, %v; want %d", kind, n, err, len(cur.Shards))
		}
		gf.hold()
		if err := cat.Push(ctx, h.next, cur.Epoch); err != nil {
			t.Fatal(err)
		}
		h.flip(t, ctx, d, h.dst)
		before := retries()
		type answer struct {
			n   int
			err error
		}
		done := make(chan answer, 1)
		go func() {
			n, err := h.countBy(ctx, conn, kind)
			done <- answer{n, err}
		}()
		var early *answer
		within(t, time.Minute, kind+": the proxy retries", func() error {
			select {
			case a := <-done:
				early = &a
				return nil
			default:
			}
			if retries() > before {
				return nil
			}
			return errors.New("no retry yet")
		})
		if early != nil {
			t.Fatalf("%s: the read inside the flip answered %d rows, %v before any retry; want it to wait for the flip", kind, early.n, early.err)
		}
		h.flip(t, ctx, d, h.src)
		gf.release()
		a := <-done
		if a.err != nil || a.n != len(cur.Shards) {
			t.Fatalf("%s: the read retried after the flip: %d rows, %v; want %d and no error", kind, a.n, a.err, len(cur.Shards))
		}
		cur = h.next
	}
}
