package proxy_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgconn/ctxwatch"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/pgshard/pgshard/proxy"
)

// TestStress runs concurrent clients doing random extended-protocol and
// transaction work through the proxy (via PgBouncer, then direct with a
// tiny statement cache), with pool_size 2 so that the pools are contended,
// for a bounded time:
//
//	client × 8 ──random ops──▶ proxy (pool_size 2) ──▶ 4 shards
//	   │ oracle: committed deltas per key          │
//	   └──────── balances checked at the end ◀─────┘
//
// Operations: pgx transactions (SAVEPOINT / ROLLBACK TO, SET LOCAL, a
// soft start with SELECT 1, read-your-writes checks), pgconn pipelines with
// Sync and Flush (named and unnamed statements), raw protocol scripts
// (Describe of statements and portals, Execute with a row limit and
// PortalSuspended, Close, Flush then Sync), multi-statement simple
// queries, Prepare/ExecPrepared/Deallocate, session SET (alone and inside a
// pipeline), errors in the middle (division by zero, unique violation,
// cross-shard statement: 0A000), client cancels (pg_sleep) and client
// disconnects in the middle of a transaction.
//
// An operation still running after stressStuckAfter is a hang: all
// goroutines and every shard's pg_stat_activity are written to a
// directory whose path is logged. PGSHARD_STRESS_SEED reproduces a run's
// choices (the interleaving is not reproducible); PGSHARD_STRESS_DURATION
// (default 15s, split between the two modes) bounds it.
func TestStress(t *testing.T) {
	if testing.Short() {
		t.Skip("stress test: not in -short mode")
	}
	seed := time.Now().UnixNano() % 1_000_000_000
	if v := os.Getenv("PGSHARD_STRESS_SEED"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			t.Fatalf("PGSHARD_STRESS_SEED: %v", err)
		}
		seed = n
	}
	dur := 15 * time.Second
	if v := os.Getenv("PGSHARD_STRESS_DURATION"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("PGSHARD_STRESS_DURATION: %v", err)
		}
		dur = d
	}
	t.Logf("seed %d (PGSHARD_STRESS_SEED=%d to repeat the choices), duration %s", seed, seed, dur)
	modes := []struct {
		name string
		opts []envOpt
		base int64
	}{
		{"pgbouncer", []envOpt{poolSize(2)}, 8_100_000},
		{"direct", []envOpt{poolSize(2), direct(), stmtCacheSize(3)}, 8_300_000},
	}
	for i, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			runStress(t, startProxy(t, m.opts...), seed+int64(i), dur/time.Duration(len(modes)), m.base)
		})
	}
}

func stmtCacheSize(n int) envOpt { return func(c *proxy.Config) { c.StatementCacheSize = n } }

const (
	stressClients = 8
	// stressOpTimeout bounds every operation; stressStuckAfter is when an
	// operation still running is reported as a hang (before the client's
	// own deadline cancels it, so the evidence is of the hang itself).
	stressOpTimeout  = 12 * time.Second
	stressStuckAfter = 8 * time.Second
	stressOwnKeys    = 2 // per client and shard

	updSQL = "UPDATE accounts SET abalance = abalance + $2 WHERE aid = $1"
	selSQL = "SELECT abalance FROM accounts WHERE aid = $1"
	// rowsSQL returns 5 rows (g = 1..5) for one key.
	rowsSQL   = "SELECT g, abalance FROM accounts, generate_series(1, 5) g WHERE aid = $1 ORDER BY g"
	divSQL    = "UPDATE accounts SET abalance = abalance + $2 / (version - version) WHERE aid = $1"
	insSQL    = "INSERT INTO accounts (aid) VALUES ($1)"
	sleepSQL  = "SELECT pg_sleep(5) FROM accounts WHERE aid = $1"
	codeCross = "0A000"
)

// stressRun is one mode's run: the proxy, the keys and the oracle.
type stressRun struct {
	t      *testing.T
	e      *proxyEnv
	nshard int
	// hot is one key per shard that every client updates (row-lock
	// contention); clients own their other keys.
	hot []int64
	all []int64
	// note marks this run's rows (for the fan-out count).
	note string

	mu   sync.Mutex
	want map[int64]int64
	// uncertain keys had a write whose outcome is unknown (the connection
	// failed around a commit): not checked.
	uncertain map[int64]bool
	ops       map[string]int
	stuckOnce sync.Once
}

func runStress(t *testing.T, e *proxyEnv, seed int64, dur time.Duration, base int64) {
	r := &stressRun{t: t, e: e, nshard: len(e.db.m.Shards), note: fmt.Sprintf("stress %d", base), want: map[int64]int64{}, uncertain: map[int64]bool{}, ops: map[string]int{}}
	own := make([][][]int64, stressClients)
	for s := 0; s < r.nshard; s++ {
		r.hot = append(r.hot, e.db.keysOn(s, 1, base)[0])
		for c := range own {
			ks := e.db.keysOn(s, stressOwnKeys, base+int64(1+c)*1000)
			own[c] = append(own[c], ks)
			r.all = append(r.all, ks...)
		}
	}
	r.all = append(r.all, r.hot...)
	ctx := ctxT(t, time.Minute)
	for s := 0; s < r.nshard; s++ {
		var ks []int64
		for _, k := range r.all {
			if e.db.m.ShardIndexForBucket(e.db.m.BucketInt8(k)) == s {
				ks = append(ks, k)
			}
		}
		conn := e.db.shardConn(t, s)
		if _, err := conn.Exec(ctx, "INSERT INTO accounts (aid, abalance, note) SELECT k, 0, $2 FROM unnest($1::int8[]) k ON CONFLICT (aid) DO UPDATE SET abalance = 0, note = $2", ks, r.note); err != nil {
			t.Fatal(err)
		}
	}
	end := time.Now().Add(dur)
	var wg sync.WaitGroup
	for i := 0; i < stressClients; i++ {
		c := &stressClient{r: r, id: i, rng: rand.New(rand.NewSource(seed*1000 + int64(i))), own: own[i], ops: map[string]int{}}
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.run(end)
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(dur + 2*stressOpTimeout + 10*time.Second):
		r.stuck("clients did not finish")
		<-done
	}
	t.Logf("operations: %v; %v pool waits (%.1fs), %v backend errors", r.ops,
		metricSum(t, e.srv, "pgshard_proxy_pool_waits_total"), metricSum(t, e.srv, "pgshard_proxy_pool_wait_seconds"),
		metricSum(t, e.srv, "pgshard_proxy_backend_errors_total"))
	r.checkBalances(ctx)
	r.checkPools(2)
}

// checkPools waits until every session has ended and every shard's
// backend connections are idle (none leaked in use) and at most size.
func (r *stressRun) checkPools(size float64) {
	deadline := time.Now().Add(10 * time.Second)
	for {
		g := gauges(r.t, r.e.srv)
		bad := ""
		if n := g["pgshard_proxy_client_connections"][""]; n != 0 {
			bad = fmt.Sprintf("%v client sessions still open", n)
		}
		for shard, open := range g["pgshard_proxy_backend_connections"] {
			idle := g["pgshard_proxy_backend_connections_idle"][shard]
			if open > size || open != idle {
				bad += fmt.Sprintf(" shard %s: %v backend connections open, %v idle (pool size %v);", shard, open, idle, size)
			}
		}
		if bad == "" {
			return
		}
		if time.Now().After(deadline) {
			r.t.Errorf("after the clients ended: %s", bad)
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// gauges returns the proxy's gauges by name and shard label.
func gauges(t *testing.T, srv *proxy.Server) map[string]map[string]float64 {
	mfs, err := srv.Registry().Gather()
	if err != nil {
		t.Fatalf("metrics: %v", err)
	}
	out := map[string]map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			if m.GetGauge() == nil {
				continue
			}
			shard := ""
			for _, l := range m.GetLabel() {
				if l.GetName() == "shard" {
					shard = l.GetValue()
				}
			}
			if out[mf.GetName()] == nil {
				out[mf.GetName()] = map[string]float64{}
			}
			out[mf.GetName()][shard] = m.GetGauge().GetValue()
		}
	}
	return out
}

// checkBalances compares every certain key's balance (read on its shard)
// with the oracle.
func (r *stressRun) checkBalances(ctx context.Context) {
	got := map[int64]int64{}
	for s := 0; s < r.nshard; s++ {
		conn := r.e.db.shardConn(r.t, s)
		rows, err := conn.Query(ctx, "SELECT aid, abalance FROM accounts WHERE aid = ANY($1)", r.all)
		if err != nil {
			r.t.Fatal(err)
		}
		for rows.Next() {
			var k, b int64
			if err := rows.Scan(&k, &b); err != nil {
				r.t.Fatal(err)
			}
			got[k] = b
		}
		if rows.Err() != nil {
			r.t.Fatal(rows.Err())
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	checked := 0
	for _, k := range r.all {
		if r.uncertain[k] {
			continue
		}
		checked++
		if got[k] != r.want[k] {
			r.t.Errorf("key %d: balance %d, want %d (the committed transactions' sum)", k, got[k], r.want[k])
		}
	}
	r.t.Logf("balances: %d keys checked, %d uncertain", checked, len(r.all)-checked)
}

// commit applies a committed transaction's deltas to the oracle.
func (r *stressRun) commit(pending map[int64]int64) {
	r.mu.Lock()
	for k, d := range pending {
		r.want[k] += d
	}
	r.mu.Unlock()
}

// unsure marks keys whose last write may or may not have committed.
func (r *stressRun) unsure(pending map[int64]int64) {
	r.mu.Lock()
	for k := range pending {
		r.uncertain[k] = true
	}
	r.mu.Unlock()
}

// expected is an owned key's committed balance (ok false if uncertain).
func (r *stressRun) expected(k int64) (int64, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.want[k], !r.uncertain[k]
}

// stuck records the evidence of a hang once (all goroutines and what
// every shard's backends are doing) and fails the test.
func (r *stressRun) stuck(what string) {
	r.stuckOnce.Do(func() {
		buf := make([]byte, 64<<20)
		buf = buf[:runtime.Stack(buf, true)]
		act := r.activity()
		dir, err := os.MkdirTemp("", "pgshard-stress-")
		if err == nil {
			_ = os.WriteFile(filepath.Join(dir, "goroutines.txt"), buf, 0o644)
			_ = os.WriteFile(filepath.Join(dir, "pg_stat_activity.txt"), []byte(act), 0o644)
		}
		var sess []string
		for _, g := range strings.Split(string(buf), "\n\n") {
			if strings.Contains(g, "engine.(*Session)") || strings.Contains(g, "backend.(*Pool)") {
				sess = append(sess, g)
			}
		}
		r.t.Logf("HANG: %s\nevidence in %s (goroutines.txt, pg_stat_activity.txt)\npg_stat_activity:\n%s\nproxy goroutines:\n%s",
			what, dir, act, strings.Join(sess, "\n\n"))
	})
	r.t.Errorf("hang: %s", what)
}

// activity is every shard's pg_stat_activity for the test database.
func (r *stressRun) activity() string {
	var b strings.Builder
	for i, s := range r.e.db.m.Shards {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		func() {
			defer cancel()
			conn, err := pgx.Connect(ctx, s.DSN)
			if err != nil {
				fmt.Fprintf(&b, "shard %d: %v\n", i, err)
				return
			}
			defer conn.Close(context.Background())
			rows, err := conn.Query(ctx, `SELECT pid, coalesce(application_name, ''), coalesce(state, ''),
				coalesce(wait_event_type || ':' || wait_event, ''), coalesce(backend_xid::text, ''),
				coalesce((now() - xact_start)::text, ''), coalesce((now() - state_change)::text, ''),
				pg_blocking_pids(pid)::text, left(query, 160)
				FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid() ORDER BY pid`)
			if err != nil {
				fmt.Fprintf(&b, "shard %d: %v\n", i, err)
				return
			}
			fmt.Fprintf(&b, "shard %d (%s): pid app state wait xid xact_age state_age blocked_by query\n", i, s.Name)
			for rows.Next() {
				var pid int32
				var app, state, wait, xid, xage, sage, blk, q string
				if err := rows.Scan(&pid, &app, &state, &wait, &xid, &xage, &sage, &blk, &q); err != nil {
					fmt.Fprintf(&b, "  %v\n", err)
					return
				}
				fmt.Fprintf(&b, "  %d %q %s %s %s %s %s %s %q\n", pid, app, state, wait, xid, xage, sage, blk, q)
			}
		}()
	}
	return b.String()
}

// stressClient is one client connection doing random operations.
type stressClient struct {
	r    *stressRun
	id   int
	rng  *rand.Rand
	conn *pgx.Conn
	own  [][]int64 // per shard
	ops  map[string]int
	seq  int
	op   string
	// set: the session has a SET of its own (through PgBouncer, a
	// multi-statement query with BEGIN/COMMIT is then refused).
	set bool
}

type stressOp struct {
	name   string
	weight int
	fn     func(*stressClient, context.Context)
}

var stressOps = []stressOp{
	{"txn", 26, (*stressClient).opTxn},
	{"pipeline", 18, (*stressClient).opPipeline},
	{"raw", 18, (*stressClient).opRaw},
	{"multi", 8, (*stressClient).opMulti},
	{"prepared", 8, (*stressClient).opPrepared},
	{"cancel", 6, (*stressClient).opCancel},
	{"disconnect", 4, (*stressClient).opDisconnect},
	{"set", 4, (*stressClient).opSet},
	{"fanout", 4, (*stressClient).opFanout},
}

func (c *stressClient) run(end time.Time) {
	total := 0
	for _, o := range stressOps {
		total += o.weight
	}
	defer func() {
		if c.conn != nil {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_ = c.conn.Close(ctx)
			cancel()
		}
		c.r.mu.Lock()
		for k, v := range c.ops {
			c.r.ops[k] += v
		}
		c.r.mu.Unlock()
	}()
	for time.Now().Before(end) {
		if c.conn == nil || c.conn.IsClosed() {
			if !c.connect() {
				return
			}
		}
		n := c.rng.Intn(total)
		var o stressOp
		for _, o = range stressOps {
			if n < o.weight {
				break
			}
			n -= o.weight
		}
		c.op = o.name
		c.ops[o.name]++
		ctx, cancel := context.WithTimeout(context.Background(), stressOpTimeout)
		start := time.Now()
		w := time.AfterFunc(stressStuckAfter, func() {
			c.r.stuck(fmt.Sprintf("client %d: operation %q still running after %s", c.id, o.name, stressStuckAfter))
		})
		o.fn(c, ctx)
		w.Stop()
		cancel()
		if c.conn != nil && !c.conn.IsClosed() && c.conn.PgConn().TxStatus() != 'I' {
			c.errorf("connection left in transaction status %q after %s", c.conn.PgConn().TxStatus(), time.Since(start))
			c.drop()
		}
	}
}

func (c *stressClient) connect() bool {
	cfg, err := pgx.ParseConfig(c.r.e.dsn)
	if err != nil {
		c.r.t.Error(err)
		return false
	}
	cfg.DefaultQueryExecMode = execModes[c.rng.Intn(len(execModes))]
	cfg.BuildContextWatcherHandler = func(pc *pgconn.PgConn) ctxwatch.Handler {
		return &pgconn.CancelRequestContextWatcherHandler{Conn: pc, DeadlineDelay: 3 * time.Second}
	}
	ctx, cancel := context.WithTimeout(context.Background(), stressOpTimeout)
	defer cancel()
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		c.errorf("connect: %v", err)
		return false
	}
	c.conn = conn
	c.set = false
	return true
}

// drop closes the client's connection (a new one is opened next).
func (c *stressClient) drop() {
	if c.conn == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	_ = c.conn.Close(ctx)
	cancel()
	c.conn = nil
}

func (c *stressClient) errorf(format string, args ...any) {
	c.r.t.Errorf("client %d, %s: %s", c.id, c.op, fmt.Sprintf(format, args...))
}

// check reports err unless it is nil or a Postgres error with one of
// codes; a non-Postgres error also drops the connection. It returns
// whether err was acceptable.
func (c *stressClient) check(what string, err error, codes ...string) bool {
	if err == nil {
		return true
	}
	code := pgCode(err)
	if code != "" && slices.Contains(codes, code) {
		return true
	}
	c.errorf("%s: %v (want %v)", what, err, append([]string{"ok"}, codes...))
	if code == "" {
		c.drop()
	}
	return false
}

// fault is an error injected in the middle of a transaction or pipeline.
type fault struct {
	name, code string
	sql        string
	args       func(k int64) []any
}

func (c *stressClient) shard() int { return c.rng.Intn(c.r.nshard) }

// key picks a key on shard s: usually an owned one, sometimes the hot one.
func (c *stressClient) key(s int, hot bool) int64 {
	if hot && c.rng.Intn(5) == 0 {
		return c.r.hot[s]
	}
	return c.own[s][c.rng.Intn(len(c.own[s]))]
}

func (c *stressClient) owned(k int64) bool {
	for _, ks := range c.own {
		if slices.Contains(ks, k) {
			return true
		}
	}
	return false
}

// fault picks an error to inject for key k on shard s (cross-shard only
// when allowed: after a statement fixed the shard).
func (c *stressClient) fault(s int, k int64, cross bool) fault {
	n := 2
	if cross && c.r.nshard > 1 {
		n = 3
	}
	switch c.rng.Intn(n) {
	case 0:
		return fault{name: "division by zero", code: "22012", sql: divSQL, args: func(k int64) []any { return []any{k, 1} }}
	case 1:
		return fault{name: "unique violation", code: "23505", sql: insSQL, args: func(k int64) []any { return []any{k} }}
	}
	other := c.own[(s+1+c.rng.Intn(c.r.nshard-1))%c.r.nshard][0]
	return fault{name: "cross-shard", code: codeCross, sql: updSQL, args: func(int64) []any { return []any{other, 1} }}
}

// textArgs encodes arguments as text parameters for pgconn.
func textArgs(args []any) [][]byte {
	out := make([][]byte, len(args))
	for i, a := range args {
		out[i] = fmt.Appendf(nil, "%v", a)
	}
	return out
}

// checkBalance compares an owned key's balance read inside a transaction
// with the oracle plus the transaction's own changes.
func (c *stressClient) checkBalance(k int64, got int64, pending map[int64]int64, where string) {
	if !c.owned(k) {
		return
	}
	want, ok := c.r.expected(k)
	if ok && got != want+pending[k] {
		c.errorf("%s: key %d reads %d, want %d (committed) + %d (this transaction)", where, k, got, want, pending[k])
	}
}

// opTxn: a pgx transaction on one shard with savepoints, an optional soft
// start, an optional injected error, then COMMIT or ROLLBACK.
func (c *stressClient) opTxn(ctx context.Context) {
	s := c.shard()
	tx, err := c.conn.Begin(ctx)
	if !c.check("BEGIN", err) {
		return
	}
	defer func() {
		if c.conn != nil && !c.conn.IsClosed() {
			_ = tx.Rollback(ctx) // no-op after COMMIT
		}
	}()
	if c.rng.Intn(4) == 0 {
		if _, err := tx.Exec(ctx, "SELECT 1"); !c.check("soft SELECT 1", err) {
			return
		}
	}
	if c.rng.Intn(5) == 0 {
		if _, err := tx.Exec(ctx, "SET LOCAL statement_timeout = '9s'"); !c.check("SET LOCAL", err) {
			return
		}
	}
	pending := map[int64]int64{}
	var atSavepoint map[int64]int64
	for i, n := 0, 1+c.rng.Intn(3); i < n; i++ {
		if atSavepoint == nil && c.rng.Intn(3) == 0 {
			if _, err := tx.Exec(ctx, "SAVEPOINT sp"); !c.check("SAVEPOINT", err) {
				return
			}
			atSavepoint = maps.Clone(pending)
		}
		k, d := c.key(s, true), int64(1+c.rng.Intn(9))
		if _, err := tx.Exec(ctx, updSQL, k, d); !c.check("UPDATE", err) {
			return
		}
		pending[k] += d
		if c.owned(k) && c.rng.Intn(3) == 0 {
			var b int64
			if err := tx.QueryRow(ctx, selSQL, k).Scan(&b); !c.check("SELECT", err) {
				return
			}
			c.checkBalance(k, b, pending, "in a transaction")
		}
	}
	if c.rng.Intn(4) == 0 {
		k := c.key(s, false)
		failed := true // the transaction is in error: 25P02 until ROLLBACK
		if c.rng.Intn(4) == 0 {
			// A client cancel in the middle of the transaction.
			cctx, cancel := context.WithTimeout(ctx, time.Duration(20+c.rng.Intn(100))*time.Millisecond)
			_, err := tx.Exec(cctx, sleepSQL, k)
			cancel()
			if err == nil {
				c.errorf("pg_sleep(5) was not cancelled")
			}
			if c.conn.IsClosed() {
				c.conn = nil
				return // the transaction died with the connection
			}
			// On a loaded machine the deadline can pass before pgx sends
			// the statement ("context already done", safe to retry): then
			// nothing failed and the transaction is still good.
			failed = !pgconn.SafeToRetry(err)
		} else {
			f := c.fault(s, k, true)
			_, err := tx.Exec(ctx, f.sql, f.args(k)...)
			if pgCode(err) != f.code {
				c.errorf("%s: %v, want %s", f.name, err, f.code)
				if pgCode(err) == "" {
					c.drop()
					return
				}
			}
		}
		if c.rng.Intn(3) == 0 && failed {
			_, err := tx.Exec(ctx, "SELECT 1")
			if !c.check("after an error", err, "25P02") {
				return
			}
			if err == nil {
				c.errorf("statement after an error succeeded (want 25P02)")
			}
		}
		if atSavepoint == nil || c.rng.Intn(2) == 0 {
			err := tx.Rollback(ctx)
			c.check("ROLLBACK", err)
			return
		}
		if _, err := tx.Exec(ctx, "ROLLBACK TO SAVEPOINT sp"); !c.check("ROLLBACK TO after an error", err) {
			return
		}
		pending, atSavepoint = atSavepoint, nil
	}
	if atSavepoint != nil {
		switch c.rng.Intn(3) {
		case 0:
			if _, err := tx.Exec(ctx, "ROLLBACK TO SAVEPOINT sp"); !c.check("ROLLBACK TO", err) {
				return
			}
			pending = atSavepoint
		case 1:
			if _, err := tx.Exec(ctx, "RELEASE SAVEPOINT sp"); !c.check("RELEASE", err) {
				return
			}
		}
	}
	if c.rng.Intn(6) == 0 {
		c.check("ROLLBACK", tx.Rollback(ctx))
		return
	}
	err = tx.Commit(ctx)
	switch {
	case err == nil:
		c.r.commit(pending)
	case pgCode(err) != "" || errors.Is(err, pgx.ErrTxCommitRollback):
		c.errorf("COMMIT: %v", err)
	default:
		c.r.unsure(pending)
		c.errorf("COMMIT: %v", err)
		c.drop()
	}
}

// pipeReq is one request of a pgconn pipeline and what it should give.
type pipeReq struct {
	kind  byte // 'q' query, 'p' prepare, 'd' deallocate, 's' sync
	seg   int
	fault *fault
	// sel: a SELECT of key (check the balance).
	sel bool
	key int64
	// before is what the segment added to key before the SELECT.
	before int64
}

type pipeSeg struct {
	pending map[int64]int64
	failed  bool
	faulty  bool
}

// opPipeline: a pgconn pipeline of 1–3 Sync-delimited implicit
// transactions on random shards, with Flush requests in the middle (the
// results so far are read before more is sent), named or unnamed
// statements, and sometimes an error.
func (c *stressClient) opPipeline(ctx context.Context) {
	pc := c.conn.PgConn()
	c.seq++
	name := ""
	if c.rng.Intn(3) == 0 {
		name = fmt.Sprintf("stress_p%d", c.seq)
	}
	p := pc.StartPipeline(ctx)
	var reqs []pipeReq
	var segs []*pipeSeg
	ri := 0
	// read reads the results of reqs[ri:upto].
	read := func(upto int) bool {
		for ri < upto {
			q := &reqs[ri]
			sg := segs[q.seg]
			if sg.failed && q.kind != 's' {
				ri++
				continue // skipped by Postgres
			}
			res, err := p.GetResults()
			var rows [][][]byte
			if rr, ok := res.(*pgconn.ResultReader); ok {
				rd := rr.Read()
				rows, err = rd.Rows, rd.Err
			}
			if err != nil {
				switch {
				case pgCode(err) == "":
					c.errorf("pipeline request %d (%c): %v", ri, q.kind, err)
					c.drop()
					for _, sg := range segs[q.seg:] {
						c.r.unsure(sg.pending)
					}
					return false
				case q.fault != nil && pgCode(err) == q.fault.code:
				default:
					c.errorf("pipeline request %d (%c): %v", ri, q.kind, err)
				}
				sg.failed = true
				ri++
				continue
			}
			if res == nil {
				c.errorf("pipeline request %d (%c): no result", ri, q.kind)
				c.drop()
				return false
			}
			switch q.kind {
			case 's':
				if _, ok := res.(*pgconn.PipelineSync); !ok {
					c.errorf("pipeline request %d: got %T, want a Sync", ri, res)
					c.drop()
					return false
				}
				if sg.faulty && !sg.failed {
					c.errorf("pipeline segment %d: the injected error did not happen", q.seg)
				}
				if !sg.failed {
					c.r.commit(sg.pending)
				}
			case 'q':
				if q.fault != nil {
					c.errorf("pipeline request %d: %s succeeded", ri, q.fault.name)
				}
				if q.sel {
					if len(rows) != 1 {
						c.errorf("pipeline SELECT of key %d: %d rows", q.key, len(rows))
					} else if b, err := strconv.ParseInt(string(rows[0][0]), 10, 64); err == nil {
						c.checkBalance(q.key, b, map[int64]int64{q.key: q.before}, "in a pipeline")
					}
				}
			}
			ri++
		}
		return true
	}
	if name != "" {
		p.SendPrepare(name, updSQL, nil)
		segs = append(segs, &pipeSeg{pending: map[int64]int64{}})
		reqs = append(reqs, pipeReq{kind: 'p'})
		p.SendPipelineSync()
		reqs = append(reqs, pipeReq{kind: 's'})
	}
	for n := 1 + c.rng.Intn(3); n > 0; n-- {
		s := c.shard()
		sg := &pipeSeg{pending: map[int64]int64{}}
		segs = append(segs, sg)
		si := len(segs) - 1
		planned := map[int64]int64{}
		for i, nq := 0, 1+c.rng.Intn(4); i < nq; i++ {
			k := c.key(s, true)
			switch {
			case !sg.faulty && c.rng.Intn(8) == 0:
				f := c.fault(s, c.key(s, false), i > 0)
				sg.faulty = true
				p.SendQueryParams(f.sql, textArgs(f.args(k)), nil, nil, nil)
				reqs = append(reqs, pipeReq{kind: 'q', seg: si, fault: &f})
			case c.owned(k) && c.rng.Intn(4) == 0:
				p.SendQueryParams(selSQL, textArgs([]any{k}), nil, nil, nil)
				reqs = append(reqs, pipeReq{kind: 'q', seg: si, sel: true, key: k, before: planned[k]})
			default:
				d := int64(1 + c.rng.Intn(9))
				if name != "" {
					p.SendQueryPrepared(name, textArgs([]any{k, d}), nil, nil)
				} else {
					p.SendQueryParams(updSQL, textArgs([]any{k, d}), nil, nil, nil)
				}
				planned[k] += d
				reqs = append(reqs, pipeReq{kind: 'q', seg: si})
			}
			if c.rng.Intn(4) == 0 {
				// Flush, and read what was sent before sending more.
				p.SendFlushRequest()
				if err := p.Flush(); err != nil {
					c.errorf("pipeline flush: %v", err)
					c.drop()
					return
				}
				if !read(len(reqs)) {
					return
				}
			}
		}
		sg.pending = planned
		p.SendPipelineSync()
		reqs = append(reqs, pipeReq{kind: 's', seg: si})
	}
	if name != "" {
		segs = append(segs, &pipeSeg{pending: map[int64]int64{}})
		p.SendDeallocate(name)
		reqs = append(reqs, pipeReq{kind: 'd', seg: len(segs) - 1})
		p.SendPipelineSync()
		reqs = append(reqs, pipeReq{kind: 's', seg: len(segs) - 1})
	}
	if err := p.Flush(); err != nil {
		c.errorf("pipeline flush: %v", err)
		c.drop()
		return
	}
	if !read(len(reqs)) {
		return
	}
	if err := p.Close(); err != nil {
		c.errorf("pipeline close: %v", err)
		c.drop()
	}
}

// rawStep is one message of a raw protocol script and the replies it
// should get.
type rawStep struct {
	msg pgproto3.FrontendMessage
	// want is the reply types in order (NoticeResponse and
	// ParameterStatus aside); Flush gets none.
	want string
	// fault is the SQLSTATE of the error the step should fail with.
	fault string
	// ifErrored: sent only after an error (a Sync after a Query that
	// the error made Postgres ignore).
	ifErrored bool
	// rows: DataRows of rowsSQL for key, g from firstG, balance want+pend.
	firstG int
	key    int64
	pend   int64
}

// backendType is a backend message's type byte.
func backendType(m pgproto3.BackendMessage) byte {
	switch m.(type) {
	case *pgproto3.ParseComplete:
		return '1'
	case *pgproto3.BindComplete:
		return '2'
	case *pgproto3.CloseComplete:
		return '3'
	case *pgproto3.ParameterDescription:
		return 't'
	case *pgproto3.RowDescription:
		return 'T'
	case *pgproto3.NoData:
		return 'n'
	case *pgproto3.DataRow:
		return 'D'
	case *pgproto3.CommandComplete:
		return 'C'
	case *pgproto3.PortalSuspended:
		return 's'
	case *pgproto3.EmptyQueryResponse:
		return 'I'
	case *pgproto3.ReadyForQuery:
		return 'Z'
	case *pgproto3.ErrorResponse:
		return 'E'
	case *pgproto3.NoticeResponse:
		return 'N'
	case *pgproto3.ParameterStatus:
		return 'S'
	}
	return '?'
}

// opRaw: a script of raw extended-protocol messages (statements and
// portals, Describe of both, Execute with row limits, Close, Flush in the
// middle with its replies read before going on, an error), in an implicit
// transaction per Sync or in an explicit one.
func (c *stressClient) opRaw(ctx context.Context) {
	pc := c.conn.PgConn()
	explicit := c.rng.Intn(3) == 0
	if explicit {
		if _, err := pc.Exec(ctx, "BEGIN").ReadAll(); !c.check("BEGIN", err) {
			return
		}
	}
	groups := 1 + c.rng.Intn(2)
	s := c.shard()
	committed := map[int64]int64{}
	failedTx := false
	var carry *rawPortal
	for g := 0; g < groups && !failedTx; g++ {
		pending := map[int64]int64{}
		if explicit {
			pending = committed // one transaction, on one shard
		} else {
			s = c.shard()
		}
		steps, faulty, left := c.rawScript(s, pending, explicit && g < groups-1, carry)
		carry = left
		ok, errored := c.runRaw(ctx, steps, explicit)
		if !ok {
			c.r.unsure(pending)
			return
		}
		if faulty && !errored {
			c.errorf("raw script: the injected error did not happen")
		}
		if errored {
			failedTx = true
			continue
		}
		if !explicit {
			c.r.commit(pending)
		}
	}
	if !explicit {
		return
	}
	sql := "COMMIT"
	if c.rng.Intn(5) == 0 {
		sql = "ROLLBACK"
	}
	res, err := pc.Exec(ctx, sql).ReadAll()
	if err != nil {
		if pgCode(err) == "" {
			c.r.unsure(committed)
		}
		c.check(sql, err)
		return
	}
	tag := res[0].CommandTag.String()
	switch {
	case sql == "ROLLBACK" || failedTx:
		if tag != "ROLLBACK" {
			c.errorf("%s of a failed or rolled back transaction: tag %q", sql, tag)
		}
	case tag != "COMMIT":
		c.errorf("COMMIT: tag %q", tag)
	default:
		c.r.commit(committed)
	}
}

// rawPortal is a named portal that one Sync group of an explicit
// transaction left suspended, for the next group to finish.
type rawPortal struct {
	name      string
	rem, next int
	key, pend int64
}

// rawScript builds one Sync-terminated script on shard s; pending gets
// the updates it makes (if it succeeds). It first finishes carry, and
// may leave a suspended portal (if leave).
func (c *stressClient) rawScript(s int, pending map[int64]int64, leave bool, carry *rawPortal) (st []rawStep, faulty bool, left *rawPortal) {
	add := func(m pgproto3.FrontendMessage, want string) { st = append(st, rawStep{msg: m, want: want}) }
	maybeFlush := func() {
		if c.rng.Intn(3) == 0 {
			add(&pgproto3.Flush{}, "")
		}
	}
	if carry != nil {
		if c.rng.Intn(2) == 0 {
			add(&pgproto3.Describe{ObjectType: 'P', Name: carry.name}, "T")
		}
		st = append(st, rawStep{msg: &pgproto3.Execute{Portal: carry.name}, want: strings.Repeat("D", carry.rem) + "C",
			firstG: carry.next, key: carry.key, pend: carry.pend})
		maybeFlush()
		add(&pgproto3.Close{ObjectType: 'P', Name: carry.name}, "3")
	}
	for u, n := 0, 1+c.rng.Intn(3); u < n; u++ {
		c.seq++
		k := c.key(s, false)
		switch r := c.rng.Intn(10); {
		case r < 5: // a SELECT through a portal, maybe in parts
			stmt, portal := "", ""
			if c.rng.Intn(2) == 0 {
				stmt = fmt.Sprintf("stress_s%d", c.seq)
			}
			if c.rng.Intn(2) == 0 {
				portal = fmt.Sprintf("stress_c%d", c.seq)
			}
			add(&pgproto3.Parse{Name: stmt, Query: rowsSQL, ParameterOIDs: []uint32{20}}, "1")
			if c.rng.Intn(2) == 0 {
				add(&pgproto3.Describe{ObjectType: 'S', Name: stmt}, "tT")
			}
			maybeFlush()
			add(&pgproto3.Bind{DestinationPortal: portal, PreparedStatement: stmt, Parameters: [][]byte{fmt.Append(nil, k)}}, "2")
			if c.rng.Intn(2) == 0 {
				add(&pgproto3.Describe{ObjectType: 'P', Name: portal}, "T")
			}
			rem, next := 5, 1
			for rem > 0 {
				max := c.rng.Intn(4)
				rows, end := rem, "C"
				if max > 0 && rem >= max {
					rows, end = max, "s"
				}
				st = append(st, rawStep{msg: &pgproto3.Execute{Portal: portal, MaxRows: uint32(max)},
					want: strings.Repeat("D", rows) + end, firstG: next, key: k, pend: pending[k]})
				rem, next = rem-rows, next+rows
				if leave && left == nil && portal != "" && end == "s" && rem > 0 && c.rng.Intn(2) == 0 {
					left = &rawPortal{name: portal, rem: rem, next: next, key: k, pend: pending[k]}
					break
				}
				if end == "s" && rem == 0 {
					// Postgres could not know it was the last row.
					st = append(st, rawStep{msg: &pgproto3.Execute{Portal: portal}, want: "C"})
				}
				maybeFlush()
			}
			if portal != "" && (left == nil || left.name != portal) && c.rng.Intn(2) == 0 {
				add(&pgproto3.Close{ObjectType: 'P', Name: portal}, "3")
			}
			if stmt != "" {
				add(&pgproto3.Close{ObjectType: 'S', Name: stmt}, "3")
			}
		case r < 8: // an UPDATE
			d := int64(1 + c.rng.Intn(9))
			add(&pgproto3.Parse{Query: updSQL, ParameterOIDs: []uint32{20, 23}}, "1")
			add(&pgproto3.Bind{Parameters: [][]byte{fmt.Append(nil, k), fmt.Append(nil, d)}}, "2")
			if c.rng.Intn(3) == 0 {
				add(&pgproto3.Describe{ObjectType: 'P'}, "n")
			}
			add(&pgproto3.Execute{}, "C")
			pending[k] += d
		default: // an error at Execute
			if faulty {
				continue
			}
			faulty = true
			add(&pgproto3.Parse{Query: divSQL, ParameterOIDs: []uint32{20, 23}}, "1")
			add(&pgproto3.Bind{Parameters: [][]byte{fmt.Append(nil, k), []byte("1")}}, "2")
			st = append(st, rawStep{msg: &pgproto3.Execute{}, fault: "22012"})
		}
		maybeFlush()
	}
	if !leave && carry == nil && c.rng.Intn(5) == 0 {
		// A Query ends the messages before it as a Sync would (Postgres
		// ignores it after an error: then a Sync is needed).
		add(&pgproto3.Query{String: "SELECT 1"}, "TDCZ")
		st = append(st, rawStep{msg: &pgproto3.Sync{}, want: "Z", ifErrored: true})
		return st, faulty, left
	}
	add(&pgproto3.Sync{}, "Z")
	return st, faulty, left
}

// runRaw sends steps, reading the replies at each Flush and at the Sync.
// ok is false when the connection failed (then dropped); errored says
// whether an error was received.
func (c *stressClient) runRaw(ctx context.Context, steps []rawStep, explicit bool) (ok, errored bool) {
	pc := c.conn.PgConn()
	fe := pc.Frontend()
	next := 0 // first step whose replies are not read
	for i := range steps {
		if steps[i].ifErrored && !errored {
			next = i + 1
			continue
		}
		fe.Send(steps[i].msg)
		switch steps[i].msg.(type) {
		case *pgproto3.Flush, *pgproto3.Sync, *pgproto3.Query:
		default:
			continue
		}
		if err := fe.Flush(); err != nil {
			c.errorf("raw: send: %v", err)
			c.drop()
			return false, errored
		}
		for ; next <= i; next++ {
			s := &steps[next]
			if errored {
				if _, sync := s.msg.(*pgproto3.Sync); !sync {
					continue // skipped by Postgres until Sync
				}
			}
			want := s.want
			if s.fault != "" {
				want = "E"
			}
			g := s.firstG
			for j := 0; j < len(want); {
				m, err := pc.ReceiveMessage(ctx)
				if err != nil {
					c.errorf("raw: step %d (%T), waiting for %q: %v", next, s.msg, want[j:], err)
					c.drop()
					return false, errored
				}
				typ := backendType(m)
				if typ == 'N' || typ == 'S' {
					continue
				}
				if typ == 'E' {
					pe := pgconn.ErrorResponseToPgError(m.(*pgproto3.ErrorResponse))
					if s.fault == "" || pe.Code != s.fault {
						c.errorf("raw: step %d (%T): %v (want %q)", next, s.msg, pe, want[j:])
					}
					errored = true
					break
				}
				if typ != want[j] {
					c.errorf("raw: step %d (%T): got %c, want %q", next, s.msg, typ, want[j:])
					c.drop()
					return false, errored
				}
				switch m := m.(type) {
				case *pgproto3.DataRow:
					if s.key == 0 || len(m.Values) != 2 {
						break // not rowsSQL
					}
					gv, _ := strconv.Atoi(string(m.Values[0]))
					if gv != g {
						c.errorf("raw: step %d: row g=%d, want %d", next, gv, g)
					}
					g++
					if b, err := strconv.ParseInt(string(m.Values[1]), 10, 64); err == nil && j == 0 {
						c.checkBalance(s.key, b, map[int64]int64{s.key: s.pend}, "raw portal")
					}
				case *pgproto3.ReadyForQuery:
					want := byte('I')
					if explicit {
						want = 'T'
						if errored {
							want = 'E'
						}
					}
					if m.TxStatus != want {
						c.errorf("raw: ReadyForQuery %c, want %c", m.TxStatus, want)
					}
				}
				j++
			}
		}
	}
	return true, errored
}

// opMulti: a multi-statement simple query on one shard (an implicit
// transaction, or BEGIN … COMMIT inside), sometimes failing at the end.
func (c *stressClient) opMulti(ctx context.Context) {
	s := c.shard()
	pending := map[int64]int64{}
	var parts []string
	for n := 1 + c.rng.Intn(3); n > 0; n-- {
		k, d := c.key(s, true), int64(1+c.rng.Intn(9))
		parts = append(parts, fmt.Sprintf("UPDATE accounts SET abalance = abalance + %d WHERE aid = %d", d, k))
		pending[k] += d
	}
	explicit := c.rng.Intn(3) == 0
	faulty := c.rng.Intn(5) == 0
	if faulty {
		parts = append(parts, fmt.Sprintf("SELECT 1 / 0 FROM accounts WHERE aid = %d", c.key(s, false)))
	}
	if explicit {
		parts = append(append([]string{"BEGIN"}, parts...), "COMMIT")
	}
	_, err := c.conn.PgConn().Exec(ctx, strings.Join(parts, "; ")).ReadAll()
	switch {
	case err == nil && !faulty:
		c.r.commit(pending)
	case explicit && c.set && pgCode(err) == codeCross && strings.Contains(err.Error(), "connection settings"):
		// Documented: through a pooler, such a query string cannot carry
		// the session's settings.
	case faulty && pgCode(err) == "22012":
		if explicit {
			// The transaction block stays open and failed.
			if _, err := c.conn.PgConn().Exec(ctx, "ROLLBACK").ReadAll(); !c.check("ROLLBACK", err) {
				return
			}
		}
	default:
		if pgCode(err) == "" {
			c.r.unsure(pending)
		}
		c.check("multi-statement query", err)
		if err == nil {
			c.errorf("multi-statement query: the division by zero did not fail")
		}
	}
}

// opPrepared: pgconn Prepare (Parse + Describe statement), ExecPrepared
// and Deallocate, with an occasional syntax error or unknown statement.
func (c *stressClient) opPrepared(ctx context.Context) {
	pc := c.conn.PgConn()
	c.seq++
	name := fmt.Sprintf("stress_n%d", c.seq)
	if c.rng.Intn(4) == 0 {
		name = ""
	}
	switch c.rng.Intn(8) {
	case 0:
		_, err := pc.Prepare(ctx, name, "SELEC abalance FROM accounts WHERE aid = $1", nil)
		if c.check("Prepare of a syntax error", err, "42601") && err == nil {
			c.errorf("Prepare of a syntax error succeeded")
		}
		return
	case 1:
		rd := pc.ExecPrepared(ctx, "stress_nonexistent", textArgs([]any{c.key(0, false)}), nil, nil).Read()
		if c.check("ExecPrepared of an unknown statement", rd.Err, "26000") && rd.Err == nil {
			c.errorf("ExecPrepared of an unknown statement succeeded")
		}
		return
	}
	sql := updSQL
	sel := c.rng.Intn(2) == 0
	if sel {
		sql = selSQL
	}
	sd, err := pc.Prepare(ctx, name, sql, nil)
	if !c.check("Prepare", err) {
		return
	}
	if want := map[bool]int{true: 1, false: 0}[sel]; len(sd.Fields) != want || (sel && len(sd.ParamOIDs) != 1) || (!sel && len(sd.ParamOIDs) != 2) {
		c.errorf("Prepare: %d fields, %d parameters", len(sd.Fields), len(sd.ParamOIDs))
	}
	for n := 1 + c.rng.Intn(3); n > 0; n-- {
		s := c.shard()
		k := c.key(s, !sel)
		if sel {
			rd := pc.ExecPrepared(ctx, name, textArgs([]any{k}), nil, nil).Read()
			if !c.check("ExecPrepared SELECT", rd.Err) {
				return
			}
			if len(rd.Rows) == 1 {
				b, _ := strconv.ParseInt(string(rd.Rows[0][0]), 10, 64)
				c.checkBalance(k, b, nil, "prepared SELECT")
			}
			continue
		}
		d := int64(1 + c.rng.Intn(9))
		rd := pc.ExecPrepared(ctx, name, textArgs([]any{k, d}), nil, nil).Read()
		if rd.Err != nil && pgCode(rd.Err) == "" {
			c.r.unsure(map[int64]int64{k: d})
		}
		if !c.check("ExecPrepared UPDATE", rd.Err) {
			return
		}
		c.r.commit(map[int64]int64{k: d})
	}
	if name != "" {
		c.check("Deallocate", pc.Deallocate(ctx, name))
	}
}

// opCancel: a client cancel of pg_sleep, outside or inside a transaction
// (which then fails and is rolled back); the connection must go on.
func (c *stressClient) opCancel(ctx context.Context) {
	s := c.shard()
	k := c.key(s, false)
	inTx := c.rng.Intn(2) == 0
	if inTx {
		if _, err := c.conn.Exec(ctx, "BEGIN"); !c.check("BEGIN", err) {
			return
		}
		if _, err := c.conn.Exec(ctx, updSQL, k, 1); !c.check("UPDATE", err) {
			return
		}
	}
	cctx, cancel := context.WithTimeout(ctx, time.Duration(10+c.rng.Intn(150))*time.Millisecond)
	start := time.Now()
	_, err := c.conn.Exec(cctx, sleepSQL, k)
	cancel()
	if err == nil {
		c.errorf("pg_sleep(5) was not cancelled")
	}
	if time.Since(start) > 4*time.Second {
		c.errorf("the cancel took %s", time.Since(start))
	}
	if c.conn.IsClosed() {
		c.conn = nil // the cancel came too late: pgconn closed the connection
		return
	}
	if inTx {
		_, err := c.conn.Exec(ctx, "ROLLBACK")
		c.check("ROLLBACK", err)
	}
	var one int
	if err := c.conn.QueryRow(ctx, "SELECT 1").Scan(&one); !c.check("SELECT 1 after a cancel", err) {
		return
	}
}

// opDisconnect: the client goes away in the middle of a transaction
// (holding row locks, maybe of a hot key), politely or not, maybe while
// a statement runs.
func (c *stressClient) opDisconnect(ctx context.Context) {
	s := c.shard()
	if c.rng.Intn(3) == 0 {
		// An implicit transaction left open by a Flush (the UPDATE ran,
		// its row stays locked until Sync), then the client is gone.
		k := c.key(s, true)
		steps := []rawStep{
			{msg: &pgproto3.Parse{Query: updSQL, ParameterOIDs: []uint32{20, 23}}, want: "1"},
			{msg: &pgproto3.Bind{Parameters: [][]byte{fmt.Append(nil, k), []byte("1")}}, want: "2"},
			{msg: &pgproto3.Execute{}, want: "C"},
			{msg: &pgproto3.Flush{}},
		}
		if ok, _ := c.runRaw(ctx, steps, false); !ok {
			return
		}
		_ = c.conn.PgConn().Conn().Close()
		c.conn = nil
		return
	}
	if _, err := c.conn.Exec(ctx, "BEGIN"); !c.check("BEGIN", err) {
		return
	}
	if _, err := c.conn.Exec(ctx, updSQL, c.key(s, true), 1); !c.check("UPDATE", err) {
		return
	}
	nc := c.conn.PgConn().Conn()
	switch c.rng.Intn(3) {
	case 0:
		c.drop() // Terminate
	case 1:
		_ = nc.Close()
		c.conn = nil
	default:
		t := time.AfterFunc(time.Duration(10+c.rng.Intn(100))*time.Millisecond, func() { _ = nc.Close() })
		_, _ = c.conn.Exec(ctx, sleepSQL, c.key(s, false))
		t.Stop()
		_ = nc.Close()
		c.conn = nil
	}
}

// opSet: a session SET or RESET, alone or in a pipeline after a routed
// statement (the proxy then validates the setting while the pipeline
// holds a backend).
func (c *stressClient) opSet(ctx context.Context) {
	pc := c.conn.PgConn()
	set := fmt.Sprintf("SET statement_timeout = '%ds'", 20+c.rng.Intn(5))
	if c.rng.Intn(3) == 0 {
		set = "RESET statement_timeout"
	}
	if c.rng.Intn(2) == 0 {
		_, err := pc.Exec(ctx, set).ReadAll()
		if c.check(set, err) {
			c.set = !strings.HasPrefix(set, "RESET")
		}
		return
	}
	k, d := c.key(c.shard(), false), int64(1+c.rng.Intn(9))
	p := pc.StartPipeline(ctx)
	p.SendQueryParams(updSQL, textArgs([]any{k, d}), nil, nil, nil)
	p.SendQueryParams(set, nil, nil, nil, nil)
	p.SendPipelineSync()
	if err := p.Flush(); err != nil {
		c.errorf("pipeline flush: %v", err)
		c.drop()
		return
	}
	var firstErr error
	for i := 0; i < 3; i++ {
		res, err := p.GetResults()
		if rr, ok := res.(*pgconn.ResultReader); ok {
			_, err = rr.Close()
		}
		if err != nil {
			if pgCode(err) == "" {
				c.r.unsure(map[int64]int64{k: d})
				c.errorf("pipeline with SET: %v", err)
				c.drop()
				return
			}
			if firstErr == nil {
				firstErr = err
			}
			if i < 2 {
				i = 1 // the rest up to Sync is skipped
			}
			continue
		}
		if _, ok := res.(*pgconn.PipelineSync); ok && i < 2 {
			c.errorf("pipeline with SET: Sync after %d results", i)
		}
	}
	if err := p.Close(); err != nil {
		c.errorf("pipeline close: %v", err)
		c.drop()
		return
	}
	if firstErr == nil {
		c.r.commit(map[int64]int64{k: d})
		c.set = !strings.HasPrefix(set, "RESET")
	} else {
		c.check("pipeline with SET", firstErr)
	}
}

// opFanout: a read of every shard (merged), by simple query or by
// Parse, Describe, Flush, then Bind, Execute, Sync.
func (c *stressClient) opFanout(ctx context.Context) {
	sql := fmt.Sprintf("SELECT count(*) FROM accounts WHERE note = '%s'", c.r.note)
	pc := c.conn.PgConn()
	var rows [][][]byte
	if c.rng.Intn(2) == 0 {
		res, err := pc.Exec(ctx, sql).ReadAll()
		if !c.check("fan-out", err) {
			return
		}
		rows = res[0].Rows
	} else {
		steps := []rawStep{
			{msg: &pgproto3.Parse{Query: sql}, want: "1"},
			{msg: &pgproto3.Describe{ObjectType: 'S'}, want: "tT"},
			{msg: &pgproto3.Flush{}},
			{msg: &pgproto3.Bind{}, want: "2"},
			{msg: &pgproto3.Execute{}, want: "DC"},
			{msg: &pgproto3.Sync{}, want: "Z"},
		}
		if ok, errored := c.runRaw(ctx, steps, false); !ok || errored {
			return
		}
		return
	}
	if want := len(c.r.all); len(rows) != 1 || string(rows[0][0]) != strconv.Itoa(want) {
		c.errorf("fan-out count: %q, want %d", rows, want)
	}
}
