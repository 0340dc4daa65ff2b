package engine

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/pgshard/pgshard/proxy/internal/backend"
	"github.com/pgshard/pgshard/proxy/internal/pgvalue"
	"github.com/pgshard/pgshard/proxy/internal/pgwire"
)

// TestPlanStopsForBackend: where the plan cannot leave the acquisition
// to the executor as a step (a query string; here a deferred
// transaction's first keyed statement and a key-less read any shard
// answers), planning stops instead of taking a connection: no
// connection opened, nothing of the session's changed, the need
// recorded. Planned again with the connection the runner took, the plan
// runs on it, and the routing decision is noted once. Where planning did
// I/O already in the part (stepped), it acquires on the spot as before.
func TestPlanStopsForBackend(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		name, sql string
		deferred  bool
	}{
		{"a key-less read", "SELECT 1", false},
		{"a deferred transaction's keyed statement", "SELECT data FROM executions WHERE id = 'k1'", true},
	} {
		pg := newStepBackend(t)
		s := stepSession(t, pg.ln.Addr().String(), FenceOff)
		ops := s.gen.Ops.(*stepOps)
		if c.deferred {
			s.txn.tx = txDeferred
			s.txn.deferred = []deferredStmt{{sql: "BEGIN"}}
		}
		msg := pgwire.AppendQuery(nil, c.sql)
		as, err := s.gen.Config.Analyzer.SplitBytes([]byte(c.sql))
		if err != nil {
			t.Fatal(err)
		}
		p := s.planQuery(ctx, msg, as, nil, nil)
		if !p.need.on || p.bc != nil || p.onBackend {
			t.Fatalf("%s: need %+v, backend %v (on backend %v): planning did not stop for it", c.name, p.need, p.bc, p.onBackend)
		}
		if n, _ := pg.seen(); n != 0 || s.bc != nil || s.txn.tx != map[bool]txState{false: txIdle, true: txDeferred}[c.deferred] {
			t.Fatalf("%s: planning opened %d connections, session backend %v, tx %v", c.name, n, s.bc, s.txn.tx)
		}
		res := takeStop(ctx, s, p)
		p = s.planQuery(ctx, msg, as, nil, &res)
		if p.need.on || p.bc == nil || !p.onBackend || p.given.conn != nil || p.failed {
			t.Fatalf("%s: planned again: need %+v, backend %v, given %v, failed %v", c.name, p.need, p.bc, p.given, p.failed)
		}
		if n, _ := pg.seen(); n != 1 || s.bc != p.bc || len(p.plan.bw) == 0 {
			t.Fatalf("%s: %d connections, session backend %v (plan's %v), %d bytes for it", c.name, n, s.bc, p.bc, len(p.plan.bw))
		}
		if got := ops.decisions.Load(); got != 1 {
			t.Errorf("%s: %d routing decisions noted, want 1", c.name, got)
		}
		s.dropBackend(true)
	}

	// I/O done in the part already: the acquisition happens on the spot.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there: the acquisition fails, and says so
	s := stepSession(t, addr, FenceOff)
	p := queryPlanner{s.newPlanner(ctx)}
	p.planner.simple, p.planner.restartable, p.planner.stepped = true, true, true
	if e := p.planner.exec().ensureBackend(0, nil); e == nil || e == errPlanStopped || p.planner.need.on {
		t.Errorf("after I/O in the part: %v (need %+v), want the acquisition's own error", e, p.planner.need)
	}
	// Not a runner that plans again: likewise.
	p = queryPlanner{s.newPlanner(ctx)}
	p.planner.simple = true
	if e := p.planner.exec().ensureBackend(0, nil); e == nil || e == errPlanStopped || p.planner.need.on {
		t.Errorf("no runner planning again: %v (need %+v), want the acquisition's own error", e, p.planner.need)
	}
}

// BenchmarkPlanQueryStop plans a key-less simple Query of an idle
// session up to where it stops for its backend (acquireneed.go): what
// planning the part again adds to such a query (nothing listens at the
// pools' address; nothing is taken). A keyed one is planned with its
// acquisition as a step instead, once (BenchmarkPlanQueryStep).
func BenchmarkPlanQueryStop(b *testing.B) {
	benchPlanQuery(b, "SELECT 1", func(p *planner) bool { return p.need.on })
}

// BenchmarkPlanQueryStep plans a keyed simple Query of an idle session:
// its acquisition a step of the plan, planned once, no I/O.
func BenchmarkPlanQueryStep(b *testing.B) {
	benchPlanQuery(b, "SELECT data FROM executions WHERE id = 'k1'", func(p *planner) bool {
		on := p.plan.acquire.on
		p.plan.acquire.on = false
		return on && !p.need.on
	})
}

func benchPlanQuery(b *testing.B, sql string, ok func(*planner) bool) {
	s := stepSession(b, "127.0.0.1:1", FenceOff)
	s.gen.RR = new(atomic.Uint32)
	msg := pgwire.AppendQuery(nil, sql)
	as, err := s.gen.Config.Analyzer.SplitBytes([]byte(sql))
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if p := s.planQuery(context.Background(), msg, as, nil, nil); !ok(p) {
			b.Fatal("not planned as expected")
		}
	}
}

// TestPlanQueryAcquireStep: a keyed simple Query of an idle session
// carries its backend's acquisition as a step of the plan (planned once,
// no connection opened while planning); taken, the query runs on that
// connection. When the step cannot be taken, the Query is answered with
// the acquisition's error.
func TestPlanQueryAcquireStep(t *testing.T) {
	ctx := context.Background()
	sql := "SELECT data FROM executions WHERE id = 'k1'"
	msg := pgwire.AppendQuery(nil, sql)
	pg := newStepBackend(t)
	s := stepSession(t, pg.ln.Addr().String(), FenceOff)
	as, err := s.gen.Config.Analyzer.SplitBytes([]byte(sql))
	if err != nil {
		t.Fatal(err)
	}
	p := s.planQuery(ctx, msg, as, nil, nil)
	if !p.plan.acquire.on || p.need.on || p.bc != nil {
		t.Fatalf("step %+v, need %+v, backend %v: want the acquisition as a step", p.plan.acquire, p.need, p.bc)
	}
	if c, _ := pg.seen(); c != 0 || s.bc != nil {
		t.Fatalf("planning opened %d connections (session backend %v)", c, s.bc)
	}
	takeQueryAcquire(p)
	if s.bc == nil || p.bc != s.bc {
		t.Fatalf("after the step: session backend %v, plan's %v", s.bc, p.bc)
	}
	if err := s.finish(p, 'Q'); err != nil {
		t.Fatal(err)
	}
	if c, got := pg.seen(); c != 1 || got != "Q" {
		t.Errorf("the backend got %q over %d connections, want one Query", got, c)
	}
	s.dropBackend(true)

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there
	s = stepSession(t, addr, FenceOff)
	p = s.planQuery(ctx, msg, as, nil, nil)
	takeQueryAcquire(p)
	_, local := planShape(p)
	if string(local) != "EZ" || len(p.plan.bw) != 0 || p.onBackend || s.bc != nil {
		t.Fatalf("after the failed step: local messages %q, %d bytes for a backend, on backend %v", local, len(p.plan.bw), p.onBackend)
	}
}

// TestPlanStopsForDescribe: a Describe of a statement ahead of a read of
// every shard in an idle session's pipeline (answered apart by one
// shard: describeApart) stops planning too — no connection opened — and
// records what the runner describes: the statement and the message.
func TestPlanStopsForDescribe(t *testing.T) {
	pg := newStepBackend(t)
	s := stepSession(t, pg.ln.Addr().String(), FenceOff)
	s.gen.RR = new(atomic.Uint32)
	sql := "SELECT id FROM executions WHERE version > $1"
	s.grp = []cmsg{
		{'P', pgwire.AppendParseMsg(nil, "", sql, nil)},
		{'D', pgwire.AppendDescribe(nil, 'S', "")},
		{'B', pgwire.AppendBindText(nil, "", "", [][]byte{[]byte("1")})},
		{'E', pgwire.AppendExecute(nil, "", 0)},
		{'S', []byte{'S', 0, 0, 0, 4}},
	}
	pl := pipePlanner{s.newPlanner(context.Background())}
	pl.planner.pipeline, pl.planner.restartable = true, true
	for i, m := range s.grp[:2] {
		pl.planner.cur = i
		switch m.typ {
		case 'P':
			pl.parse(m.raw)
		case 'D':
			pl.describe(m.raw, i)
		}
	}
	n := pl.planner.need
	if !n.on || !n.describe || n.msg != 1 || n.sql != sql || n.deferredTx {
		t.Fatalf("need %+v, want the Describe of message 1", n)
	}
	if c, _ := pg.seen(); c != 0 || s.bc != nil {
		t.Fatalf("planning opened %d connections (session backend %v)", c, s.bc)
	}
}

// TestPlanStopsForStep: a session SET of an idle session, whose probe
// runs on any shard, stops planning (no connection opened); planned
// again with the probe's answer given, it is answered from it (SET, the
// setting changed by the plan's effect) without I/O.
func TestPlanStopsForStep(t *testing.T) {
	ctx := context.Background()
	pg := newStepBackend(t)
	s := stepSession(t, pg.ln.Addr().String(), FenceOff)
	s.gen.RR = new(atomic.Uint32)
	sql := "SET search_path = app"
	msg := pgwire.AppendQuery(nil, sql)
	as, err := s.gen.Config.Analyzer.SplitBytes([]byte(sql))
	if err != nil {
		t.Fatal(err)
	}
	p := s.planQuery(ctx, msg, as, nil, nil)
	if !p.need.on || p.need.step == nil || p.need.step.kind != stepProbeSet || p.need.step.name != "search_path" {
		t.Fatalf("need %+v, want the SET's probe", p.need)
	}
	if c, _ := pg.seen(); c != 0 {
		t.Fatalf("planning opened %d connections", c)
	}
	old := p.need
	q := queryPlanner{s.newPlanner(ctx)}
	q.planner.simple = true
	resume{noted: old.noted, given: givens{steps: []givenStep{{probe: probeRead{value: "app"}}}}}.on(q.planner)
	q.simpleOne(msg, as[0])
	if q.planner.need.on || q.planner.failed || q.planner.stepped {
		t.Fatalf("planned again: need %+v, failed %v, stepped %v", q.planner.need, q.planner.failed, q.planner.stepped)
	}
	var set *effect
	for _, it := range q.planner.plan.items {
		if it.eff != nil && it.eff.kind == effSettings {
			set = it.eff
		}
	}
	if set == nil {
		t.Fatalf("no effect setting search_path in %+v", q.planner.plan.items)
	}
	if v, _ := set.set.Get("search_path"); v != "app" {
		t.Fatalf("the effect sets search_path to %q, want app", v)
	}
	if c, _ := pg.seen(); c != 0 {
		t.Fatalf("planning again opened %d connections", c)
	}
}

// TestPlanStopsForIndexTables: a schema change naming an index alone
// stops planning for the default shard's answer to whose index it is (no
// connection opened); planned again with the answer given, an index of a
// sharded table goes to every shard, an unsharded table's stays where it
// was, and a failed question refuses the statement — all without I/O.
func TestPlanStopsForIndexTables(t *testing.T) {
	ctx := context.Background()
	pg := newStepBackend(t)
	s := stepSession(t, pg.ln.Addr().String(), FenceOff)
	s.gen.RR, s.gen.Collation = new(atomic.Uint32), new(atomic.Int32)
	sql := "DROP INDEX executions_id_c_idx"
	msg := pgwire.AppendQuery(nil, sql)
	as, err := s.gen.Config.Analyzer.SplitBytes([]byte(sql))
	if err != nil {
		t.Fatal(err)
	}
	p := s.planQuery(ctx, msg, as, nil, nil)
	if !p.need.on || !slices.Equal(p.need.index, []string{"executions_id_c_idx"}) {
		t.Fatalf("need %+v, want the tables of index executions_id_c_idx", p.need)
	}
	if c, _ := pg.seen(); c != 0 {
		t.Fatalf("planning opened %d connections", c)
	}
	names, noted := p.need.index, p.need.noted // (the session's planner is reused)
	again := func(gi givenIndex) *planner {
		t.Helper()
		q := queryPlanner{s.newPlanner(ctx)}
		q.planner.simple = true
		resume{noted: noted, given: givens{indexes: []givenIndex{gi}}}.on(q.planner)
		q.simpleOne(msg, as[0])
		if q.planner.stepped {
			t.Fatalf("planned again with the answer given, planning did I/O")
		}
		if len(q.planner.given.indexes) != 0 {
			t.Fatalf("the answer given was not used: %+v", q.planner.given.indexes)
		}
		return q.planner
	}
	if q := again(givenIndex{names: names, tables: []string{"executions"}}); q.fan == nil || q.failed {
		t.Fatalf("an index of a sharded table: fan %v, failed %v; want every shard", q.fan != nil, q.failed)
	}
	if q := again(givenIndex{names: names, tables: []string{"app_notes"}}); q.fan != nil || q.failed {
		t.Fatalf("an index of an unsharded table: fan %v, failed %v; want the default shard", q.fan != nil, q.failed)
	}
	q := again(givenIndex{names: names, err: pgwire.NewError(pgwire.CodeConnectionFailure, "shard down")})
	if !q.failed || !bytes.Contains(q.plan.lbuf, []byte("could not learn which table the index belongs to")) {
		t.Fatalf("a failed question: failed %v, answers %q", q.failed, q.plan.lbuf)
	}
	if c, _ := pg.seen(); c != 0 {
		t.Fatalf("planning again opened %d connections", c)
	}
}

// TestPlanStopsForStaleCheck: the Bind of a statement the client
// described before a schema change stops planning for its description
// on its shard (no connection opened); planned again with the
// description given, a changed result fails the Bind as Postgres does
// (0A000, no I/O), and the same result lets it run (it goes on to its
// acquisition, the statement moved to the epoch before the description).
func TestPlanStopsForStaleCheck(t *testing.T) {
	pg := newStepBackend(t)
	s := stepSession(t, pg.ln.Addr().String(), FenceOff)
	sql := "SELECT id, version FROM executions WHERE id = $1"
	as, err := s.gen.Config.Analyzer.SplitBytes([]byte(sql))
	if err != nil {
		t.Fatal(err)
	}
	described := []pgvalue.Field{{Name: "id", OID: pgtype.TextOID, Typmod: -1}, {Name: "version", OID: pgtype.Int8OID, Typmod: -1}}
	grp := []cmsg{
		{'B', pgwire.AppendBindText(nil, "", "s1", [][]byte{[]byte("exec-1")})},
		{'E', pgwire.AppendExecute(nil, "", 0)},
		{'S', []byte{'S', 0, 0, 0, 4}},
	}
	plan := func(r resume) *planner {
		vs := newVstmt("s1", as[0], nil)
		vs.desc, vs.epoch = described, 1
		s.stmts = map[string]*vstmt{"s1": vs}
		s.grp = grp
		pl := pipePlanner{s.newPlanner(context.Background())}
		pl.planner.pipeline, pl.planner.restartable = true, true
		r.on(pl.planner)
		pl.planner.cur = 0
		pl.bind(grp[0].raw, 0)
		return pl.planner
	}
	s.gen.StmtEpoch.Store(2) // a schema change since the client described it
	pl := plan(resume{restarts: -1})
	n := pl.need
	if !n.on || !n.describe || n.msg != 0 || n.sql != sql || n.shard < 0 {
		t.Fatalf("need %+v, want the description of the Bind's statement", n)
	}
	if c, _ := pg.seen(); c != 0 || s.bc != nil {
		t.Fatalf("planning opened %d connections (session backend %v)", c, s.bc)
	}
	rowDesc := func(fs []pgvalue.Field) backend.Described {
		return backend.Described{Msgs: pgvalue.AppendRowDesc(nil, fs), Parsed: true}
	}
	changed := slices.Clone(described)
	changed[1].OID = pgtype.Int4OID
	pl = plan(resume{given: givens{descs: []givenDescribe{{msg: 0, desc: rowDesc(changed), epoch: 2}}}})
	if !pl.failed || pl.need.on || pl.stepped {
		t.Fatalf("a changed result: failed %v, need %+v, stepped %v", pl.failed, pl.need, pl.stepped)
	}
	var code string
	for msg := range pgwire.Msgs(pl.plan.lbuf) {
		if msg[0] == 'E' {
			code = pgwire.ErrorField(msg, 'C')
		}
	}
	if code != pgwire.CodeFeatureNotSupported {
		t.Fatalf("a changed result answered %q, want 0A000", code)
	}
	pl = plan(resume{given: givens{descs: []givenDescribe{{msg: 0, desc: rowDesc(described), epoch: 2}}}})
	if pl.failed || pl.need.describe || pl.stepped {
		t.Fatalf("the same result: failed %v, need %+v, stepped %v", pl.failed, pl.need, pl.stepped)
	}
	if vs := s.stmts["s1"]; vs.epoch != 2 {
		t.Errorf("the statement checked is of epoch %d, want 2", vs.epoch)
	}
	if c, _ := pg.seen(); c != 0 {
		t.Fatalf("planning again opened %d connections", c)
	}
}

// TestPlanStopsForSoftMove: a soft transaction (only table-less reads
// on its backend so far) whose next statement is a key of another shard
// stops planning for its move (nothing sent to the held backend while
// planning); the runner rolls the backend back and releases it, the
// transaction is deferred again with what it replays, and the part
// planned again goes on to the key's shard (here: stops for its
// backend). A move that failed fails the statement with its error.
func TestPlanStopsForSoftMove(t *testing.T) {
	ctx := context.Background()
	pg := newStepBackend(t)
	s := stepSession(t, pg.ln.Addr().String(), FenceOff)
	key := textKeyOn(s, "s1")
	sql := "SELECT data FROM executions WHERE id = '" + key + "'"
	msg := pgwire.AppendQuery(nil, sql)
	as, err := s.gen.Config.Analyzer.SplitBytes([]byte(sql))
	if err != nil {
		t.Fatal(err)
	}
	soft := func() {
		t.Helper()
		_, _, bc, _, e := acquireOn(ctx, s, 0, false)
		if e != nil {
			t.Fatal(e)
		}
		s.setBackend(bc)
		s.txn = transaction{tx: txBound, soft: true, shard: 0, bstatus: 'T', hint: -1, deferred: []deferredStmt{{sql: "BEGIN"}}}
	}
	soft()
	_, before := pg.seen()
	p := s.planQuery(ctx, msg, as, nil, nil)
	if !p.need.on || !p.need.soft || p.need.from != 0 || p.need.msg != 0 {
		t.Fatalf("need %+v, want the soft transaction's move off shard 0", p.need)
	}
	if _, got := pg.seen(); got != before || s.bc == nil || s.txn.tx != txBound || !s.txn.soft {
		t.Fatalf("planning sent %q to the held backend (session backend %v, tx %v, soft %v)", got[len(before):], s.bc, s.txn.tx, s.txn.soft)
	}
	res := takeStop(ctx, s, p)
	if _, got := pg.seen(); got != before+"Q" || s.bc != nil || s.txn.tx != txDeferred || s.txn.soft || len(s.txn.deferred) != 1 {
		t.Fatalf("the runner's move: sent %q, session backend %v, tx %v, soft %v, deferred %v", got[len(before):], s.bc, s.txn.tx, s.txn.soft, s.txn.deferred)
	}
	p = s.planQuery(ctx, msg, as, nil, &res)
	if !p.need.on || p.need.soft || p.need.shard != 1 || p.need.any {
		t.Fatalf("planned again: need %+v; want it to stop for shard 1's backend", p.need)
	}

	// A shard hint naming another shard moves it the same way.
	soft()
	hint := "SET LOCAL pgshard.shard = 's1'"
	has, err := s.gen.Config.Analyzer.SplitBytes([]byte(hint))
	if err != nil {
		t.Fatal(err)
	}
	hmsg := pgwire.AppendQuery(nil, hint)
	if p = s.planQuery(ctx, hmsg, has, nil, nil); !p.need.on || !p.need.soft || p.need.from != 0 {
		t.Fatalf("a hint of shard 1: need %+v, want the move off shard 0", p.need)
	}
	res = takeStop(ctx, s, p)
	if p = s.planQuery(ctx, hmsg, has, nil, &res); p.need.on || p.failed || p.stepped {
		t.Fatalf("a hint planned again: need %+v, failed %v, stepped %v", p.need, p.failed, p.stepped)
	}

	soft()
	failed := pgwire.NewError(pgwire.CodeConnectionFailure, "moving failed")
	p = s.planQuery(ctx, msg, as, nil, &resume{given: givens{moveErr: &givenErr{msg: 0, err: failed}}})
	var code string
	for m := range pgwire.Msgs(p.plan.lbuf) {
		if m[0] == 'E' {
			code = pgwire.ErrorField(m, 'C')
		}
	}
	if !p.failed || code != pgwire.CodeConnectionFailure || p.need.on {
		t.Fatalf("a failed move: failed %v, error %q, need %+v", p.failed, code, p.need)
	}
	s.dropBackend(true)
}

// TestPlanStopsForSwap: a transaction whose backend has only read, and
// whose next statement writes another shard, stops planning for the
// swap (the session's backend and readers untouched while planning);
// the runner makes the backend its shard's reader and defers the
// transaction again, and the part planned again goes on to the write's
// shard (here: stops for its backend).
func TestPlanStopsForSwap(t *testing.T) {
	ctx := context.Background()
	pg := newStepBackend(t)
	s := stepSession(t, pg.ln.Addr().String(), FenceOff)
	key := textKeyOn(s, "s1")
	sql := "UPDATE executions SET data = 'x' WHERE id = '" + key + "'"
	msg := pgwire.AppendQuery(nil, sql)
	as, err := s.gen.Config.Analyzer.SplitBytes([]byte(sql))
	if err != nil {
		t.Fatal(err)
	}
	_, _, bc, _, e := acquireOn(ctx, s, 0, false)
	if e != nil {
		t.Fatal(e)
	}
	s.setBackend(bc)
	s.txn = transaction{tx: txBound, shard: 0, bstatus: 'T', hint: -1, deferred: []deferredStmt{{sql: "BEGIN"}}}
	_, before := pg.seen()
	p := s.planQuery(ctx, msg, as, nil, nil)
	if !p.need.on || !p.need.swap || p.need.msg != 0 {
		t.Fatalf("need %+v, want the swap of the transaction's backend", p.need)
	}
	if _, got := pg.seen(); got != before || s.bc != bc || s.readers.any() || s.txn.tx != txBound {
		t.Fatalf("planning changed the session: sent %q, backend %v, readers %v, tx %v", got[len(before):], s.bc, s.readers.any(), s.txn.tx)
	}
	res := takeStop(ctx, s, p)
	if s.bc != nil || s.readers.get(0) != bc || s.txn.tx != txDeferred || len(s.txn.deferred) != 1 {
		t.Fatalf("the runner's swap: backend %v, reader of shard 0 %v, tx %v, deferred %v", s.bc, s.readers.get(0), s.txn.tx, s.txn.deferred)
	}
	p = s.planQuery(ctx, msg, as, nil, &res)
	if !p.need.on || p.need.swap || p.need.shard != 1 || p.need.any {
		t.Fatalf("planned again: need %+v; want it to stop for shard 1's backend", p.need)
	}
	if _, got := pg.seen(); got != before {
		t.Fatalf("the swap sent %q", got[len(before):])
	}
	s.readers.discard()
}

// TestPlanStopsForTerminate: a pipeline's pg_terminate_backend of
// another of the proxy's sessions stops planning for the call (no
// session ended while planning); the runner ends it, and the pipeline
// planned again answers the call as it was resolved ("t"), though the
// session it ended has left the register since, without ending anything
// again.
func TestPlanStopsForTerminate(t *testing.T) {
	s, reg, other, clientEnd := terminateFixture(t)
	got := make(chan []byte, 1)
	go func() {
		b, _ := io.ReadAll(clientEnd)
		got <- b
	}()
	s.grp = []cmsg{
		{'P', pgwire.AppendParseMsg(nil, "", "select pg_terminate_backend($1)", nil)},
		{'B', pgwire.AppendBindText(nil, "", "", [][]byte{[]byte(strconv.FormatUint(uint64(other.pid), 10))})},
		{'D', pgwire.AppendDescribe(nil, 'P', "")},
		{'E', pgwire.AppendExecute(nil, "", 0)},
		{'S', []byte{'S', 0, 0, 0, 4}},
	}
	plan := func(r resume) *planner { return planPipelineFrom(s, &r).planner }
	p := plan(resume{restarts: -1})
	if !p.need.on || p.need.term == nil || p.need.msg != 1 {
		t.Fatalf("need %+v, want the call of message 1", p.need)
	}
	if other.closed {
		t.Fatal("planning ended a session")
	}
	res := takeStop(context.Background(), s, p)
	if b := <-got; !other.closed || !bytes.Contains(b, []byte("57P01")) {
		t.Fatalf("the runner's call: the other session closed %v, its client got %q", other.closed, b)
	}
	reg.unregister(other)
	p = plan(res)
	if _, local := planShape(p); p.need.on || p.failed || string(local) != "12TDCZ" || !bytes.Contains(p.plan.lbuf, []byte{'D', 0, 0, 0, 11, 0, 1, 0, 0, 0, 1, 't'}) {
		t.Fatalf("planned again: need %+v, failed %v, local messages %q (%q)", p.need, p.failed, local, p.plan.lbuf)
	}
}

// textKeyOn is a text key of shard name in s's map.
func textKeyOn(s *Session, name string) string {
	for i := 0; ; i++ {
		if k := fmt.Sprintf("k%d", i); s.gen.Config.Map.Lookup(k).Name == name {
			return k
		}
	}
}

// TestPlanStopsForProbeOnTaken: a session SET after a statement that
// took the pipeline's backend (given by the runner) stops planning for
// its probe on that connection instead of probing while planning; the
// runner probes on it, leaves the session without a backend as the
// part began, and gives the part planned again the same connection, on
// which it is planned to the end without I/O (the SET answered from the
// probe).
func TestPlanStopsForProbeOnTaken(t *testing.T) {
	ctx := context.Background()
	pg := newStepBackend(t)
	pg.mu.Lock()
	pg.setting = "app"
	pg.mu.Unlock()
	s := stepSession(t, pg.ln.Addr().String(), FenceOff)
	t.Cleanup(func() { s.dropBackend(false) }) // the fake's connection closes when a check fails too
	key := textKeyOn(s, "s1")
	grp := []cmsg{
		{'P', pgwire.AppendParseMsg(nil, "", "SELECT data FROM executions WHERE id = $1", nil)},
		{'B', pgwire.AppendBindText(nil, "", "", [][]byte{[]byte(key)})},
		{'E', pgwire.AppendExecute(nil, "", 0)},
		{'P', pgwire.AppendParseMsg(nil, "", "SET search_path = app", nil)},
		{'B', pgwire.AppendBindText(nil, "", "", nil)},
		{'E', pgwire.AppendExecute(nil, "", 0)},
		{'S', []byte{'S', 0, 0, 0, 4}},
	}
	s.grp = grp
	p := planPipelineFrom(s, &resume{restarts: -1}).planner
	if !p.need.on || p.need.step != nil || p.need.shard != 1 {
		t.Fatalf("need %+v, want shard 1's backend first", p.need)
	}
	res := takeStop(ctx, s, p)
	p = planPipelineFrom(s, &res).planner
	n := p.need
	if !n.on || n.step == nil || n.step.kind != stepProbeSet || p.took == nil || n.step.on != p.took.bc {
		t.Fatalf("need %+v (took %+v), want the SET's probe on the connection taken", n, p.took)
	}
	took := p.took.bc
	if conns, got := pg.seen(); conns != 1 || got != "" || s.bc != took {
		t.Fatalf("planning: %d connections, sent %q, session backend %v", conns, got, s.bc)
	}
	res = takeStop(ctx, s, p)
	if _, got := pg.seen(); got != "QQQQ" || s.bc != nil || res.given.conn == nil || res.given.conn.bc != took || len(res.given.steps) != 1 {
		t.Fatalf("the runner's probe: sent %q, session backend %v, given %+v", got, s.bc, res.given)
	}
	p = planPipelineFrom(s, &res).planner
	if p.need.on || p.failed || p.stepped || s.bc != took {
		var errs []string
		for m := range pgwire.Msgs(p.plan.lbuf) {
			if m[0] == 'E' {
				errs = append(errs, pgwire.ErrorField(m, 'M'))
			}
		}
		t.Fatalf("planned again: need %+v, failed %v (%q), stepped %v, the session's backend the one taken %v", p.need, p.failed, errs, p.stepped, s.bc == took)
	}
	var set *effect
	for _, it := range p.plan.items {
		if it.eff != nil && it.eff.kind == effSettings {
			set = it.eff
		}
	}
	if set == nil {
		t.Fatal("no effect setting search_path")
	}
	if v, _ := set.set.Get("search_path"); v != "app" {
		t.Errorf("the effect sets search_path to %q, want app", v)
	}
	if conns, got := pg.seen(); conns != 1 || got != "QQQQ" {
		t.Errorf("planning again: %d connections, sent %q", conns, got)
	}
	s.dropBackend(true)

	// A direct connection with a statement cache, which planning writes:
	// the probe runs on the spot, nothing thrown away.
	s = stepSessionCached(t, pg.ln.Addr().String(), FenceOff, 8)
	s.grp = grp
	p = planPipelineFrom(s, &resume{restarts: -1}).planner
	res = takeStop(ctx, s, p)
	p = planPipelineFrom(s, &res).planner
	if p.need.on || p.failed || !p.stepped {
		t.Fatalf("with a statement cache: need %+v, failed %v, stepped %v; want the probe made on the spot", p.need, p.failed, p.stepped)
	}
	s.dropBackend(true)
}
