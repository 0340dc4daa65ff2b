package proxy_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgshard/pgshard/catalog"
	"github.com/pgshard/pgshard/cluster/clustertest"
	"github.com/pgshard/pgshard/migrations"
	"github.com/pgshard/pgshard/proxy"
	"github.com/pgshard/pgshard/reshard"
	"github.com/pgshard/pgshard/shardmap"
)

// catalogTestDB is a fresh migrated database with a catalog (on its own
// database) holding its map.
func catalogTestDB(t *testing.T, ctx context.Context) (*testDB, *catalog.Catalog, string) {
	t.Helper()
	c := clustertest.Get(t)
	old := clustertest.MigratedMap(t, c)
	pc, err := pgx.ParseConfig(old.Shards[0].DSN)
	if err != nil {
		t.Fatal(err)
	}
	d := &testDB{c: c, name: pc.Database, m: old}
	catDB := clustertest.FreshDatabase(t, c)
	cm, err := c.MapFor(catDB, shardmap.DefaultBuckets)
	if err != nil {
		t.Fatal(err)
	}
	cat, err := catalog.Open(ctx, cm.Shards[0].DSN, catalog.Options{ApplicationName: "proxy catalog test"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cat.Close)
	if _, err := cat.Install(ctx); err != nil {
		t.Fatal(err)
	}
	if err := cat.Push(ctx, old, 0); err != nil {
		t.Fatal(err)
	}
	return d, cat, catDB
}

// gatedFollower is a catalog.Follower whose new maps reach the proxy
// only while its gate is open: the test decides when the proxy's map
// becomes current.
type gatedFollower struct {
	f    *catalog.Follower
	mu   sync.Mutex
	gate chan struct{} // closed: open
}

func newGatedFollower(f *catalog.Follower) *gatedFollower {
	g := &gatedFollower{f: f, gate: make(chan struct{})}
	close(g.gate)
	return g
}

func (g *gatedFollower) Run(ctx context.Context, served func() uint64, apply func(context.Context, *shardmap.Map) error) error {
	return g.f.Run(ctx, served, func(ctx context.Context, m *shardmap.Map) error {
		g.mu.Lock()
		gate := g.gate
		g.mu.Unlock()
		select {
		case <-gate:
		case <-ctx.Done():
			return ctx.Err()
		}
		return apply(ctx, m)
	})
}

func (g *gatedFollower) Check(now time.Time) error { return g.f.Check(now) }

func (g *gatedFollower) Nudge() { g.f.Nudge() }

func (g *gatedFollower) hold() {
	g.mu.Lock()
	g.gate = make(chan struct{})
	g.mu.Unlock()
}

func (g *gatedFollower) release() {
	g.mu.Lock()
	close(g.gate)
	g.mu.Unlock()
}

// startGatedProxy starts a proxy over d following catalog cat (database
// catDB) through a gated follower of owner, with a retry wait of a
// minute (a test opens the gate once a statement waits), and waits for
// its lease.
func startGatedProxy(t *testing.T, d *testDB, cat *catalog.Catalog, catDB, owner string) (*proxyEnv, *gatedFollower) {
	t.Helper()
	f, err := cat.NewFollower(catalog.FollowOptions{Owner: owner, Kind: "proxy", TTL: 8 * time.Second, Interval: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	gf := newGatedFollower(f)
	p := startProxyFor(t, d, func(c *proxy.Config) {
		c.Follow, c.CatalogName = gf, "catalog "+catDB
		c.FenceRetryWait = time.Minute
	})
	within(t, time.Minute, "lease acquired", func() error { return f.Check(time.Now()) })
	return p, gf
}

// moveKeyInCatalog moves id's bucket from its shard in cur to the next
// shard as the mover's flip does: the row copied, every shard's fence at
// the next epoch (the source's row then made stale: a stale read would
// show it), and the catalog's map pushed. It returns the new map, the
// source and the destination.
func moveKeyInCatalog(t *testing.T, ctx context.Context, d *testDB, cat *catalog.Catalog, cur *shardmap.Map, id string) (next *shardmap.Map, src, dst int) {
	t.Helper()
	b := cur.Bucket(id)
	src = cur.ShardIndexForBucket(b)
	dst = (src + 1) % len(cur.Shards)
	next = moveOneBucket(t, cur, b, cur.Shards[dst].Name)
	var data string
	var version int
	if err := d.shardConn(t, src).QueryRow(ctx, `SELECT data, version FROM executions WHERE id = $1`, id).Scan(&data, &version); err != nil {
		t.Fatal(err)
	}
	if _, err := d.shardConn(t, dst).Exec(ctx, `INSERT INTO executions (id, definition_id, data, version) VALUES ($1, 'retry', $2, $3)`, id, data, version); err != nil {
		t.Fatal(err)
	}
	for i := range next.Shards {
		if _, err := migrations.SetFence(ctx, d.shardConn(t, i), next); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := d.shardConn(t, src).Exec(ctx, `UPDATE executions SET data = 'stale' WHERE id = $1`, id); err != nil {
		t.Fatal(err)
	}
	if err := cat.Push(ctx, next, cur.Epoch); err != nil {
		t.Fatal(err)
	}
	return next, src, dst
}

// TestProxyNudgesItsFollower: a proxy whose follower polls the catalog
// only once an hour still serves a key the fence says moved, within the
// default retry wait (1 s): the refusal names a newer epoch, the proxy
// asks its follower to poll now (Follower.Nudge) and runs the statement
// again on the new owner. Before the nudge, a refusal met just after a
// poll waited out the next one (the default interval is 1 s too) and
// the client got PS001.
func TestProxyNudgesItsFollower(t *testing.T) {
	ctx := ctxT(t, 2*time.Minute)
	d, cat, catDB := catalogTestDB(t, ctx)
	f, err := cat.NewFollower(catalog.FollowOptions{Owner: "proxy-nudge-test", Kind: "proxy", TTL: 8 * time.Second, Interval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	p := startProxyFor(t, d, func(c *proxy.Config) { c.Follow, c.CatalogName = f, "catalog "+catDB })
	within(t, time.Minute, "lease acquired", func() error { return f.Check(time.Now()) })
	conn := p.connect(t)
	cur := d.m
	for i := range 3 {
		id := fmt.Sprintf("nudge-%d-%d", i, time.Now().UnixNano())
		if _, err := conn.Exec(ctx, `INSERT INTO executions (id, definition_id, data, version) VALUES ($1, 'retry', 'v1', 1)`, id); err != nil {
			t.Fatal(err)
		}
		cur, _, _ = moveKeyInCatalog(t, ctx, d, cat, cur, id)
		var data string
		if err := conn.QueryRow(ctx, `SELECT data FROM executions WHERE id = $1`, id).Scan(&data); err != nil || data != "v1" {
			t.Fatalf("move %d: read of the moved key: %q, %v; want the new owner's v1 and no error", i, data, err)
		}
	}
	if got := p.srv.CurrentEnv().Config.Map.Epoch; got != cur.Epoch {
		t.Fatalf("the proxy serves epoch %d, want the catalog's %d", got, cur.Epoch)
	}
}

// TestProxyRetriesFenceRefusal: a proxy following a catalog whose map
// has not reached it yet (the follower's gate is held) sends a moved
// key's statements to the old owner; the fence refuses the assert the
// proxy opened the transaction with, and the proxy waits for the new
// map and runs them on the new owner: the client gets the right answer
// and no error, in the simple and the extended protocol, reads and
// writes, implicit transactions and a transaction block whose first
// statement it is. A transaction that already ran a statement gets the
// shard's PS001 with its HINT (not retried).
func TestProxyRetriesFenceRefusal(t *testing.T) {
	ctx := ctxT(t, 4*time.Minute)
	d, cat, catDB := catalogTestDB(t, ctx)
	old := d.m
	p, gf := startGatedProxy(t, d, cat, catDB, "proxy-retry-test")
	conn := p.connect(t)
	cur := old

	// move moves id's bucket to the next shard as the mover's flip does,
	// with the proxy's map held back; it returns the source and
	// destination.
	move := func(id string) (src, dst int) {
		t.Helper()
		gf.hold()
		cur, src, dst = moveKeyInCatalog(t, ctx, d, cat, cur, id)
		return src, dst
	}
	retries := func() float64 { return metricSum(t, p.srv, "pgshard_proxy_fence_retries_total") }
	// retried runs stmt while the proxy's map is held back, opens the
	// gate once the proxy retries, and returns stmt's error.
	retried := func(what string, stmt func() error) {
		t.Helper()
		before := retries()
		done := make(chan error, 1)
		go func() { done <- stmt() }()
		var early error
		within(t, time.Minute, what+": the proxy retries", func() error {
			if retries() > before {
				return nil
			}
			select {
			case err := <-done:
				early = fmt.Errorf("it ended with no retry: %v", err)
				return nil
			default:
			}
			return errors.New("no retry yet")
		})
		if early != nil {
			gf.release()
			t.Fatalf("%s: %v", what, early)
		}
		gf.release()
		if err := <-done; err != nil {
			t.Fatalf("%s: %v; want the new owner's answer and no error", what, err)
		}
	}

	newID := func(i int) string {
		id := fmt.Sprintf("retry-%d-%d", i, time.Now().UnixNano())
		if _, err := conn.Exec(ctx, `INSERT INTO executions (id, definition_id, data, version) VALUES ($1, 'retry', 'v1', 1)`, id); err != nil {
			t.Fatal(err)
		}
		return id
	}

	// Extended protocol: a read.
	id := newID(0)
	move(id)
	var data string
	retried("extended read", func() error {
		return conn.QueryRow(ctx, `SELECT data FROM executions WHERE id = $1`, id).Scan(&data)
	})
	if data != "v1" {
		t.Fatalf("extended read of the moved key: %q, want the new owner's v1", data)
	}

	// Simple protocol: a write.
	id = newID(1)
	_, dst := move(id)
	retried("simple write", func() error {
		_, err := conn.Exec(ctx, `UPDATE executions SET version = version + 1 WHERE id = '`+id+`'`, pgx.QueryExecModeSimpleProtocol)
		return err
	})
	var v int
	if err := d.shardConn(t, dst).QueryRow(ctx, `SELECT version FROM executions WHERE id = $1`, id).Scan(&v); err != nil || v != 2 {
		t.Fatalf("the new owner's row after the retried write: version %d, %v; want 2", v, err)
	}

	// A transaction block whose first statement is the moved key's
	// (the held-back BEGIN is replayed with it on the new owner).
	id = newID(2)
	_, dst = move(id)
	retried("first statement of a transaction block", func() error {
		tx, err := conn.Begin(ctx)
		if err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `UPDATE executions SET version = version + 10 WHERE id = $1`, id); err != nil {
			_ = tx.Rollback(ctx)
			return err
		}
		return tx.Commit(ctx)
	})
	if err := d.shardConn(t, dst).QueryRow(ctx, `SELECT version FROM executions WHERE id = $1`, id).Scan(&v); err != nil || v != 11 {
		t.Fatalf("the new owner's row after the retried transaction: version %d, %v; want 11", v, err)
	}

	// A transaction block begun in the pipeline of its first statement
	// (JDBC with autocommit off sends BEGIN, the statement and one
	// Sync): the retry runs the BEGIN again too.
	id = newID(4)
	_, dst = move(id)
	retried("BEGIN in the pipeline of the block's first statement", func() error {
		got, err := beginAndReadInOnePipeline(ctx, conn.PgConn(), `SELECT data FROM executions WHERE id = $1`, id)
		if err == nil && got != "v1" {
			err = fmt.Errorf("read %q, want the new owner's v1", got)
		}
		if err == nil {
			_, err = conn.Exec(ctx, `UPDATE executions SET version = version + 5 WHERE id = $1`, id)
		}
		if err == nil {
			_, err = conn.Exec(ctx, "COMMIT")
		}
		return err
	})
	if err := d.shardConn(t, dst).QueryRow(ctx, `SELECT version FROM executions WHERE id = $1`, id).Scan(&v); err != nil || v != 6 {
		t.Fatalf("the new owner's row after the retried pipeline's transaction: version %d, %v; want 6", v, err)
	}

	// A transaction that already ran a statement (another key of the
	// same old owner) is not retried: the shard's PS001 with its HINT.
	id = newID(3)
	b := cur.Bucket(id)
	var other string
	for i := 0; i < 100000 && other == ""; i++ {
		k := fmt.Sprintf("retry-other-%d", i)
		if kb := cur.Bucket(k); kb != b && cur.ShardIndexForBucket(kb) == cur.ShardIndexForBucket(b) {
			other = k
		}
	}
	if other == "" {
		t.Fatal("no other key on the same shard")
	}
	if _, err := conn.Exec(ctx, `INSERT INTO executions (id, definition_id, data, version) VALUES ($1, 'retry', 'v1', 1)`, other); err != nil {
		t.Fatal(err)
	}
	move(id)
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `UPDATE executions SET version = version + 1 WHERE id = $1`, other); err != nil {
		t.Fatal(err)
	}
	_, err = tx.Exec(ctx, `UPDATE executions SET version = version + 1 WHERE id = $1`, id)
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != "PS001" || pe.Hint == "" {
		t.Fatalf("a moved key in a transaction under way: %v; want PS001 with a HINT", err)
	}
	_ = tx.Rollback(ctx)
	gf.release()
	within(t, time.Minute, "served after the map arrived", func() error {
		return conn.QueryRow(ctx, `SELECT data FROM executions WHERE id = $1`, id).Scan(&data)
	})
	if data != "v1" {
		t.Fatalf("read after the map arrived: %q, want v1", data)
	}
}

// TestProxyRetriesDuringMoves: keyed reads and writes through a proxy
// following the catalog while the mover moves a range there and back:
// every statement succeeds (a refusal by the fence is retried on the
// new owner), and every write is on the range's final owner; a read of
// every shard beside them always counts the range's rows once each.
func TestProxyRetriesDuringMoves(t *testing.T) {
	ctx := ctxT(t, 6*time.Minute)
	d, cat, catDB := catalogTestDB(t, ctx)
	old := d.m
	f, err := cat.NewFollower(catalog.FollowOptions{Owner: "proxy-moves-test", Kind: "proxy", TTL: 8 * time.Second, Interval: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	p := startProxyFor(t, d, func(c *proxy.Config) {
		c.Follow, c.CatalogName = f, "catalog "+catDB
		c.FenceRetryWait = 30 * time.Second // bounded; generous for a loaded machine
	})
	within(t, time.Minute, "lease acquired", func() error { return f.Check(time.Now()) })

	// Keys of the range that moves (the first key's bucket's range).
	setup := p.connect(t)
	first := fmt.Sprintf("moves-%d", time.Now().UnixNano())
	lo := old.Ranges[0].Lo
	hi := old.Ranges[0].Hi
	for _, r := range old.Ranges {
		if b := old.Bucket(first); r.Lo <= b && b <= r.Hi {
			lo, hi = r.Lo, r.Hi
		}
	}
	from := old.ShardIndexForBucket(lo)
	var ids []string
	for i := 0; len(ids) < 8 && i < 100000; i++ {
		id := fmt.Sprintf("%s-%d", first, i)
		if b := old.Bucket(id); b >= lo && b <= hi {
			ids = append(ids, id)
		}
	}
	for _, id := range ids {
		if _, err := setup.Exec(ctx, `INSERT INTO executions (id, definition_id, data, version) VALUES ($1, 'moves', 'v', 0)`, id); err != nil {
			t.Fatal(err)
		}
	}

	// Each client runs until the moves are done (at most perClient
	// statements).
	const clients, perClient = 4, 5000
	stop := make(chan struct{})
	var wg sync.WaitGroup
	errs := make(chan error, clients+1)
	writes := make([]map[string]int, clients)
	// loop runs body(i) for i < perClient in a goroutine of its own
	// until the moves are done or body fails (its error goes to errs).
	loop := func(body func(i int) error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range perClient {
				select {
				case <-stop:
					return
				default:
				}
				if err := body(i); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	for c := range clients {
		conn := p.connect(t)
		writes[c] = map[string]int{}
		loop(func(i int) error {
			id := ids[(c+i)%len(ids)]
			var err error
			switch i % 3 {
			case 0:
				var v int
				err = conn.QueryRow(ctx, `SELECT version FROM executions WHERE id = $1`, id).Scan(&v)
			case 1:
				_, err = conn.Exec(ctx, `UPDATE executions SET version = version + 1 WHERE id = $1`, id)
			default:
				_, err = conn.Exec(ctx, `UPDATE executions SET version = version + 1 WHERE id = '`+id+`'`, pgx.QueryExecModeSimpleProtocol)
			}
			if err != nil {
				return fmt.Errorf("client %d statement %d (%s): %w", c, i, id, err)
			}
			if i%3 != 0 {
				writes[c][id]++
			}
			return nil
		})
	}
	// A reader of every shard: the range's rows, counted while they
	// move, are always all there, each once (each part's served set is
	// checked against the read's map; one straddling a flip runs again).
	reads := 0
	readConn := p.connect(t)
	loop(func(i int) error {
		mode := pgx.QueryExecModeExec
		if i%2 == 1 {
			mode = pgx.QueryExecModeSimpleProtocol
		}
		var n int
		if err := readConn.QueryRow(ctx, `SELECT count(*) FROM executions WHERE definition_id = 'moves'`, mode).Scan(&n); err != nil || n != len(ids) {
			return fmt.Errorf("read of every shard %d: %d rows, %v; want %d", i, n, err, len(ids))
		}
		reads++
		return nil
	})
	// Two moves: the range to the next shard and back.
	to := (from + 1) % len(old.Shards)
	for _, dest := range []int{to, from} {
		if _, err := reshard.Plan(ctx, cat, reshard.Request{Lo: lo, Hi: hi, To: old.Shards[dest].Name}); err != nil {
			close(stop)
			wg.Wait()
			t.Fatal(err)
		}
		if _, err := reshard.Apply(ctx, cat, reshard.Options{FreezeBudget: 2 * time.Second}); err != nil {
			close(stop)
			wg.Wait()
			t.Fatal(err)
		}
	}
	close(stop)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if t.Failed() {
		return
	}
	want := map[string]int{}
	for _, w := range writes {
		for id, n := range w {
			want[id] += n
		}
	}
	for _, id := range ids {
		var v int
		if err := d.shardConn(t, from).QueryRow(ctx, `SELECT version FROM executions WHERE id = $1`, id).Scan(&v); err != nil || v != want[id] {
			t.Errorf("%s on its final owner: version %d, %v; want %d (every acknowledged write, once)", id, v, err, want[id])
		}
	}
	n := 0
	for _, w := range want {
		n += w
	}
	t.Logf("%d writes, %d reads of every shard; fence retries: %v (of reads of every shard: %v)", n, reads,
		metricSum(t, p.srv, "pgshard_proxy_fence_retries_total"), metricSum(t, p.srv, "pgshard_proxy_fence_retries_total", "state", "served"))
}

// beginAndReadInOnePipeline sends BEGIN and the one-row read sql(arg) in
// one pipeline ended by one Sync, as JDBC does with autocommit off, and
// returns the value read; the transaction stays open.
func beginAndReadInOnePipeline(ctx context.Context, pc *pgconn.PgConn, sql, arg string) (string, error) {
	pl := pc.StartPipeline(ctx)
	pl.SendQueryParams("BEGIN", nil, nil, nil, nil)
	pl.SendQueryParams(sql, [][]byte{[]byte(arg)}, nil, nil, nil)
	if err := pl.Sync(); err != nil {
		_ = pl.Close()
		return "", err
	}
	var got string
	var firstErr error
	for done := false; !done; {
		res, err := pl.GetResults()
		if err != nil {
			_ = pl.Close()
			return "", err
		}
		switch r := res.(type) {
		case *pgconn.ResultReader:
			rr := r.Read()
			if rr.Err != nil && firstErr == nil {
				firstErr = rr.Err
			}
			if len(rr.Rows) == 1 {
				got = string(rr.Rows[0][0])
			}
		case *pgconn.PipelineSync:
			done = true
		}
	}
	if err := pl.Close(); err != nil && firstErr == nil {
		firstErr = err
	}
	return got, firstErr
}
