package engine

import (
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/pgshard/pgshard/proxy/internal/backend"
	"github.com/pgshard/pgshard/proxy/internal/pgwire"
	"github.com/pgshard/pgshard/proxy/route"
)

// stepOps is a generation's operations for a test: no lease, decisions
// counted.
type stepOps struct{ decisions atomic.Int32 }

func (o *stepOps) NoteDecision(string, route.Dest, int, bool, *pgwire.Error, bool) {
	o.decisions.Add(1)
}
func (o *stepOps) LeaseError() *pgwire.Error              { return nil }
func (o *stepOps) DirectPool(int) *backend.Pool           { return nil }
func (o *stepOps) DatabaseEnv(name string) *GenerationEnv { return nil }

// stepBackend is a Postgres for one test: trust login, and each
// extended-protocol message answered (an Execute with one row), every
// message's type recorded.
type stepBackend struct {
	ln    net.Listener
	wg    sync.WaitGroup
	mu    sync.Mutex
	conns int
	got   []byte
	// probe, when set, answers a Query with one row of it thrice (the
	// fence's question, fenceDetectSQL: the function, the procedure, the
	// checked served set; "t" or "f").
	probe string
	// setting, when set, answers a Query with one row of one column of
	// it (a session SET's probe: current_setting).
	setting string
}

func newStepBackend(t *testing.T) *stepBackend {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := &stepBackend{ln: ln}
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			b.mu.Lock()
			b.conns++
			b.mu.Unlock()
			b.wg.Add(1)
			go func() {
				defer b.wg.Done()
				defer c.Close()
				b.serve(c)
			}()
		}
	}()
	t.Cleanup(func() { ln.Close(); b.wg.Wait() })
	return b
}

func (b *stepBackend) serve(c net.Conn) {
	_ = c.SetDeadline(time.Now().Add(time.Minute)) // every read and write is bounded
	be := pgproto3.NewBackend(c, c)
	if _, err := be.ReceiveStartupMessage(); err != nil {
		return
	}
	be.Send(&pgproto3.AuthenticationOk{})
	be.Send(&pgproto3.ParameterStatus{Name: "server_version", Value: "16.0"})
	be.Send(&pgproto3.BackendKeyData{ProcessID: 7, SecretKey: []byte{0, 0, 0, 8}})
	be.Send(&pgproto3.ReadyForQuery{TxStatus: 'I'})
	if be.Flush() != nil {
		return
	}
	for {
		m, err := be.Receive()
		if err != nil {
			return
		}
		var typ byte
		switch m.(type) {
		case *pgproto3.Query:
			typ = 'Q'
			b.mu.Lock()
			probe, setting := b.probe, b.setting
			b.mu.Unlock()
			switch {
			case setting != "":
				be.Send(&pgproto3.RowDescription{Fields: []pgproto3.FieldDescription{{Name: []byte("x"), DataTypeOID: 25, DataTypeSize: -1, TypeModifier: -1}}})
				be.Send(&pgproto3.DataRow{Values: [][]byte{[]byte(setting)}})
				be.Send(&pgproto3.CommandComplete{CommandTag: []byte("SELECT 1")})
			case probe == "":
				be.Send(&pgproto3.EmptyQueryResponse{})
			default:
				col := pgproto3.FieldDescription{Name: []byte("x"), DataTypeOID: 16, DataTypeSize: 1, TypeModifier: -1}
				be.Send(&pgproto3.RowDescription{Fields: []pgproto3.FieldDescription{col, col}})
				be.Send(&pgproto3.DataRow{Values: [][]byte{[]byte(probe), []byte(probe), []byte(probe)}})
				be.Send(&pgproto3.CommandComplete{CommandTag: []byte("SELECT 1")})
			}
			be.Send(&pgproto3.ReadyForQuery{TxStatus: 'I'})
		case *pgproto3.Parse:
			typ = 'P'
			be.Send(&pgproto3.ParseComplete{})
		case *pgproto3.Bind:
			typ = 'B'
			be.Send(&pgproto3.BindComplete{})
		case *pgproto3.Describe:
			typ = 'D'
			be.Send(&pgproto3.NoData{})
		case *pgproto3.Execute:
			typ = 'E'
			be.Send(&pgproto3.DataRow{Values: [][]byte{[]byte("1")}})
			be.Send(&pgproto3.CommandComplete{CommandTag: []byte("SELECT 1")})
		case *pgproto3.Close:
			typ = 'C'
			be.Send(&pgproto3.CloseComplete{})
		case *pgproto3.Sync:
			typ = 'S'
			be.Send(&pgproto3.ReadyForQuery{TxStatus: 'I'})
		case *pgproto3.Terminate:
			return
		}
		b.mu.Lock()
		b.got = append(b.got, typ)
		b.mu.Unlock()
		if be.Flush() != nil {
			return
		}
	}
}

func (b *stepBackend) seen() (conns int, got string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.conns, string(b.got)
}

// stepSession is planSession with a pool of each shard (at addr: none
// is opened by planning), a host and the generation's operations.
func stepSession(t testing.TB, addr string, fence FenceMode) *Session {
	t.Helper()
	return stepSessionCached(t, addr, fence, 0)
}

// stepSessionCached is stepSession whose direct connections have a
// statement cache of cache statements (0: none).
func stepSessionCached(t testing.TB, addr string, fence FenceMode, cache int) *Session {
	t.Helper()
	s := planSession(t)
	s.gen.Config.StatementCacheSize = cache
	log := slog.New(slog.DiscardHandler)
	s.gen.Config.Fence = fence
	s.gen.Config.PoolTimeout = 30 * time.Second
	s.gen.Ops = new(stepOps)
	s.gen.Log = log
	env := &backend.Env{PoolSize: 2, PoolTimeout: 30 * time.Second, ConnectTimeout: 30 * time.Second,
		StatementCacheSize: s.gen.Config.StatementCacheSize, Log: log, StmtEpoch: s.gen.StmtEpoch, Map: s.gen.Config.Map, BackendErrors: s.gen.Metrics.BackendErrors}
	for _, sh := range s.gen.Config.Map.Shards {
		sh.DSN = "postgres://x@" + addr + "/d?sslmode=disable"
		pool, err := backend.NewPool(env, sh, false)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(pool.Shutdown)
		s.gen.Pools = append(s.gen.Pools, pool)
	}
	s.host = &HostEnv{Metrics: s.gen.Metrics, Log: log, Fences: new(PoolFences), StandIns: new(StandInTexts)}
	s.grp = []cmsg{
		{'P', pgwire.AppendParseMsg(nil, "", "select * from executions where id = $1", nil)},
		{'B', pgwire.AppendBindText(nil, "", "", [][]byte{[]byte("k1")})},
		{'D', pgwire.AppendDescribe(nil, 'P', "")},
		{'E', pgwire.AppendExecute(nil, "", 0)},
		{'S', []byte{'S', 0, 0, 0, 4}},
	}
	return s
}

// TestPlanAcquireStep: a keyed pipeline of an idle session is planned
// with the acquisition of its shard's backend as a step of the plan:
// planning opens no connection and gives the session no backend; the
// executor takes the step (a connection of that shard's pool) and runs
// the plan on it. With the fence on, the assert planned ahead of the
// statement is recorded for the session when the step is taken.
func TestPlanAcquireStep(t *testing.T) {
	for _, fence := range []FenceMode{FenceOff, FenceOn} {
		pg := newStepBackend(t)
		s := stepSession(t, pg.ln.Addr().String(), fence)
		want := s.gen.Config.Analyzer.RouteKey("k1", route.KeyText).Shard
		p := planPipeline(s)
		st := p.planner.plan.acquire
		if !st.on || st.shard != want || st.msg != 1 || p.planner.bc != nil || !p.planner.onBackend || p.planner.protoErr != nil {
			t.Fatalf("fence %v: step %+v (bc %v, on backend %v, %v), want an acquisition of shard %d at message 1",
				fence, st, p.planner.bc, p.planner.onBackend, p.planner.protoErr, want)
		}
		if n, _ := pg.seen(); n != 0 || s.bc != nil || len(s.fenceBuckets) != 0 {
			t.Fatalf("fence %v: planning opened %d connections, session backend %v, buckets %v", fence, n, s.bc, s.fenceBuckets)
		}
		if st.asserted != (fence == FenceOn) {
			t.Errorf("fence %v: the plan asserts the key: %v", fence, st.asserted)
		}
		p.takeAcquire()
		if s.bc == nil || p.planner.bc != s.bc || s.txn.shard != want || len(s.fenceBuckets) != map[bool]int{false: 0, true: 1}[fence == FenceOn] {
			t.Fatalf("fence %v: after the step: backend %v (plan's %v), shard %d, buckets %v", fence, s.bc, p.planner.bc, s.txn.shard, s.fenceBuckets)
		}
		if err := s.finish(p.planner, 'S'); err != nil {
			t.Fatal(err)
		}
		out := s.cc.out
		_, local := planShape(&planner{plan: planned{items: []item{{kind: itLocal, hi: int32(len(out))}}, lbuf: out}})
		if string(local) != "12nDCZ" {
			t.Errorf("fence %v: the client got %q, want ParseComplete, BindComplete, NoData, a row, CommandComplete, ReadyForQuery", fence, local)
		}
		wantSent := "PBDES"
		if fence == FenceOn {
			wantSent = "PBEC" + wantSent // the assert: Parse, Bind, Execute, Close
		}
		if n, got := pg.seen(); n != 1 || got != wantSent {
			t.Errorf("fence %v: the backend got %q over %d connections, want %q over 1", fence, got, n, wantSent)
		}
		s.dropBackend(true)
		s.cc.out = s.cc.out[:0]
	}
}

// TestPlanAcquireStepFails: when the executor cannot take the plan's
// acquisition, the pipeline is answered as if it had failed where it
// needed the backend: the Bind's error, the rest skipped up to Sync.
func TestPlanAcquireStepFails(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there
	s := stepSession(t, addr, FenceOn)
	p := planPipeline(s)
	if !p.planner.plan.acquire.on {
		t.Fatal("no acquisition step planned")
	}
	p.takeAcquire()
	kinds, local := planShape(p.planner)
	if string(local) != "1EZ" || len(p.planner.plan.bw) != 0 || p.planner.onBackend || !p.planner.failed || s.bc != nil || len(s.fenceBuckets) != 0 {
		t.Fatalf("after the failed step: items %v, local messages %q, %d bytes for a backend, on backend %v, failed %v, buckets %v",
			kinds, local, len(p.planner.plan.bw), p.planner.onBackend, p.planner.failed, s.fenceBuckets)
	}
}

// TestPlanAcquireStepProbe: under fence auto, a pool not asked yet
// whether its shard has the fence still gets the acquisition as a step
// of the plan: planning asks nothing (no connection, nothing of the
// session written) and plans the assert; the executor asks the backend
// it took once, keeps the assert when the shard has the fence and cuts
// it out when not. The pool's state is known afterwards: the next
// pipeline plans no question.
func TestPlanAcquireStepProbe(t *testing.T) {
	for _, probe := range []string{"t", "f"} {
		pg := newStepBackend(t)
		pg.mu.Lock()
		pg.probe = probe
		pg.mu.Unlock()
		s := stepSession(t, pg.ln.Addr().String(), FenceAuto)
		s.gen.Config.Follows = true
		want := s.gen.Config.Analyzer.RouteKey("k1", route.KeyText).Shard
		p := planPipeline(s)
		st := p.planner.plan.acquire
		if !st.on || !st.probe || !st.asserted || st.shard != want || st.msg != 1 || p.planner.bc != nil {
			t.Fatalf("probe %s: step %+v (bc %v), want an acquisition of shard %d at message 1 with the fence's question", probe, st, p.planner.bc, want)
		}
		if n, _ := pg.seen(); n != 0 || s.bc != nil || len(s.fenceBuckets) != 0 {
			t.Fatalf("probe %s: planning opened %d connections, session backend %v, buckets %v", probe, n, s.bc, s.fenceBuckets)
		}
		if _, known := s.host.Fences.decided(s.gen, st.pool); known {
			t.Fatalf("probe %s: planning decided the pool's fence", probe)
		}
		p.takeAcquire()
		fenced := probe == "t"
		if s.bc == nil || len(s.fenceBuckets) != map[bool]int{false: 0, true: 1}[fenced] {
			t.Fatalf("probe %s: after the step: backend %v, buckets %v", probe, s.bc, s.fenceBuckets)
		}
		if on, known := s.host.Fences.decided(s.gen, st.pool); !known || on != fenced {
			t.Fatalf("probe %s: the pool's fence after the step: on %v, known %v", probe, on, known)
		}
		if err := s.finish(p.planner, 'S'); err != nil {
			t.Fatal(err)
		}
		out := s.cc.out
		_, local := planShape(&planner{plan: planned{items: []item{{kind: itLocal, hi: int32(len(out))}}, lbuf: out}})
		if string(local) != "12nDCZ" {
			t.Errorf("probe %s: the client got %q, want ParseComplete, BindComplete, NoData, a row, CommandComplete, ReadyForQuery", probe, local)
		}
		wantSent := "QPBDES"
		if fenced {
			wantSent = "QPBECPBDES" // the question, then the assert: Parse, Bind, Execute, Close
		}
		if n, got := pg.seen(); n != 1 || got != wantSent {
			t.Errorf("probe %s: the backend got %q over %d connections, want %q over 1", probe, got, n, wantSent)
		}
		s.dropBackend(true)
		s.cc.out = s.cc.out[:0]
		p = planPipeline(s)
		if st := p.planner.plan.acquire; !st.on || st.probe || st.asserted != fenced {
			t.Errorf("probe %s: the next pipeline's step %+v, want one without a question, asserting %v", probe, st, fenced)
		}
		p.planner.plan.acquire.on = false
	}
}

// TestPlanAcquireStepProbeFails: under fence auto, a failed acquisition
// of a step that would ask the pool's fence fails the pipeline at its
// Bind (its Sync answered), asks nothing and leaves the pool unknown.
func TestPlanAcquireStepProbeFails(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there
	s := stepSession(t, addr, FenceAuto)
	s.gen.Config.Follows = true
	p := planPipeline(s)
	st := p.planner.plan.acquire
	if !st.on || !st.probe {
		t.Fatalf("step %+v, want an acquisition with the fence's question", st)
	}
	p.takeAcquire()
	kinds, local := planShape(p.planner)
	if string(local) != "1EZ" || len(p.planner.plan.bw) != 0 || p.planner.onBackend || !p.planner.failed || s.bc != nil || len(s.fenceBuckets) != 0 {
		t.Fatalf("after the failed step: items %v, local messages %q, %d bytes for a backend, on backend %v, failed %v, buckets %v",
			kinds, local, len(p.planner.plan.bw), p.planner.onBackend, p.planner.failed, s.fenceBuckets)
	}
	if _, known := s.host.Fences.decided(s.gen, st.pool); known {
		t.Error("a failed acquisition decided the pool's fence")
	}
}

// TestPlanAcquireStepNamed: a named statement through a direct
// connection with a statement cache is planned with the acquisition as
// the plan's step too: the plan leaves out the Bind (and the Parse the
// cache may need), planning opens nothing and touches no cache, and
// the executor writes them against the connection it took: the first
// pipeline parses the statement under the cache's name, the next one on
// that connection binds it without a Parse.
func TestPlanAcquireStepNamed(t *testing.T) {
	for _, fence := range []FenceMode{FenceOff, FenceOn} {
		pg := newStepBackend(t)
		s := stepSessionCached(t, pg.ln.Addr().String(), fence, 8)
		bindS1 := cmsg{'B', pgwire.AppendBindText(nil, "", "s1", [][]byte{[]byte("k1")})}
		s.grp[0] = cmsg{'P', pgwire.AppendParseMsg(nil, "s1", "select * from executions where id = $1", nil)}
		s.grp[1] = bindS1
		assertSent := map[bool]string{false: "", true: "PBEC"}[fence == FenceOn]
		for run := range 2 {
			p := planPipeline(s)
			st := p.planner.plan.acquire
			if !st.on || !st.render || st.msg != 1-run || p.planner.bc != nil || st.bindBw >= len(p.planner.plan.bw) || p.planner.plan.bw[st.bindBw] != 'D' {
				t.Fatalf("fence %v, run %d: step %+v, plan %q, want the Bind left to the executor", fence, run, st, p.planner.plan.bw)
			}
			if n, _ := pg.seen(); n > 1 || s.bc != nil || len(s.fenceBuckets) != 0 {
				t.Fatalf("fence %v, run %d: planning opened connections (%d), session backend %v, buckets %v", fence, run, n, s.bc, s.fenceBuckets)
			}
			p.takeAcquire()
			if s.bc == nil || s.bc.Stmts == nil {
				t.Fatalf("fence %v, run %d: after the step: backend %v", fence, run, s.bc)
			}
			if err := s.finish(p.planner, 'S'); err != nil {
				t.Fatal(err)
			}
			out := s.cc.out
			_, local := planShape(&planner{plan: planned{items: []item{{kind: itLocal, hi: int32(len(out))}}, lbuf: out}})
			if wantLocal := map[int]string{0: "12nDCZ", 1: "2nDCZ"}[run]; string(local) != wantLocal {
				t.Errorf("fence %v, run %d: the client got %q, want %q", fence, run, local, wantLocal)
			}
			s.dropBackend(true)
			s.cc.out = s.cc.out[:0]
			if run == 0 {
				s.grp = []cmsg{bindS1, s.grp[2], s.grp[3], s.grp[4]} // the statement is the session's now
			}
		}
		if n, got := pg.seen(); n != 1 || got != assertSent+"PBDES"+assertSent+"BDES" {
			t.Errorf("fence %v: the backend got %q over %d connections, want %q over 1", fence, got, n, assertSent+"PBDES"+assertSent+"BDES")
		}
	}
}
