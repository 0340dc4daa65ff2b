package engine

import (
	"bytes"
	"context"
	"io"
	"net"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/pgshard/pgshard/proxy/internal/backend"
	"github.com/pgshard/pgshard/proxy/internal/obs"
	"github.com/pgshard/pgshard/proxy/internal/pgwire"
	"github.com/pgshard/pgshard/proxy/route"
	"github.com/pgshard/pgshard/shardmap"
)

// planSession is a session that can plan but not run anything: no pools,
// no backend, no client connection. Any I/O in planning (an Acquire, a
// query on a backend, a write to the client) panics or fails the test.
func planSession(t testing.TB) *Session {
	t.Helper()
	m, err := shardmap.Even(16, []shardmap.Shard{
		{Name: "s0", Ordinal: 0, DSN: "postgres://x@127.0.0.1:1/d"},
		{Name: "s1", Ordinal: 1, DSN: "postgres://x@127.0.0.1:2/d"},
	})
	if err != nil {
		t.Fatal(err)
	}
	an, err := route.New(m, route.DefaultSchema(), route.Options{})
	if err != nil {
		t.Fatal(err)
	}
	gen := &GenerationEnv{Config: &SessionConfig{Map: m, Analyzer: an}, Metrics: obs.NewMetrics(), StmtEpoch: new(atomic.Uint64)}
	set := backend.NewSettings(nil)
	return &Session{gen: gen, txn: transaction{hint: -1}, stmts: map[string]*vstmt{},
		startup: set, cur: set, ps: paramStatus{reported: map[string]string{}, startupReported: map[string]string{}}}
}

func analyze(t *testing.T, s *Session, sql string) *route.Statement {
	t.Helper()
	as, err := s.gen.Config.Analyzer.SplitBytes([]byte(sql))
	if err != nil || len(as) != 1 {
		t.Fatalf("%s: %v (%d statements)", sql, err, len(as))
	}
	return as[0]
}

// TestPlanHintMovesSoft: a pgshard hint for another shard than a soft
// transaction's plans the move as a step (the executor's ROLLBACK on the
// soft backend), and the plan goes on with the transaction deferred.
func TestPlanHintMovesSoft(t *testing.T) {
	s := planSession(t)
	for _, c := range []struct {
		name    string
		hint    int
		wantErr bool
	}{
		{"no hint yet", -1, false},
		{"a hint of the soft shard", 0, true}, // moved, then refused: the hint says shard 0
	} {
		p := s.newPlanner(context.Background())
		// The soft transaction's backend (held, on shard 0; no backend
		// object: planning must not touch it).
		p.held, p.shard, p.soft, p.sim.tx, p.explicit, p.sim.hint = true, 0, true, txBound, true, c.hint
		act := p.localAction(analyze(t, s, "SET LOCAL pgshard.shard = 's1'"))
		st := act.step
		if st == nil || st.kind != stepMoveSoft || st.from != 0 || st.to != 1 || st.hint != c.hint {
			t.Fatalf("%s: step %+v, want a move from shard 0 to 1", c.name, st)
		}
		if p.held || p.soft || p.bc != nil || p.explicit || (p.sim.tx != txDeferred) == !c.wantErr {
			t.Errorf("%s: after the plan: held %v soft %v explicit %v tx %v", c.name, p.held, p.soft, p.explicit, p.sim.tx)
		}
		if c.wantErr {
			if act.err == nil || act.eff == nil || act.eff.tx.tx != txFailed {
				t.Errorf("%s: action %+v, want a refusal failing the deferred transaction", c.name, act)
			}
			continue
		}
		if act.err != nil || act.tag != "SET" || act.eff == nil || act.eff.kind != effTx || act.eff.tx.tx != txDeferred || act.eff.tx.hint != 1 {
			t.Errorf("%s: action %+v (err %v), want SET deferring the transaction with hint 1", c.name, act, act.err)
		}
	}
	// The hint's shard is the soft transaction's: no step.
	p := s.newPlanner(context.Background())
	p.held, p.shard, p.soft, p.sim.tx, p.explicit = true, 1, true, txBound, true
	if act := p.localAction(analyze(t, s, "SET LOCAL pgshard.shard = 's1'")); act.step != nil || act.tag != "SET" || p.soft {
		t.Errorf("same shard: action %+v, soft %v", act, p.soft)
	}
}

// TestPlanSetProbe: a session SET plans its validation on a shard as a
// step (on the pipeline's backend if it took one, else any shard's); a
// RESET needs none.
func TestPlanSetProbe(t *testing.T) {
	s := planSession(t)
	p := s.newPlanner(context.Background())
	a := analyze(t, s, "SET search_path = app")
	act := p.localAction(a)
	st := act.step
	if st == nil || st.kind != stepProbeSet || st.st != a || st.name != "search_path" || st.tag != "SET" || st.on != nil {
		t.Fatalf("SET: step %+v, want a probe of search_path on any shard", st)
	}
	if act.err != nil || act.eff != nil {
		t.Errorf("SET: action %+v: its answer is the probe's", act)
	}
	bc := new(backend.Conn) // the pipeline's backend: never used by planning
	p = s.newPlanner(context.Background())
	p.onBackend, p.bc, p.shard = true, bc, 1
	if act := p.localAction(analyze(t, s, "SET timezone TO 'UTC'")); act.step == nil || act.step.on != bc || act.step.name != "timezone" {
		t.Errorf("SET on the pipeline's backend: step %+v", act.step)
	}
	p = s.newPlanner(context.Background())
	if act := p.localAction(analyze(t, s, "RESET search_path")); act.step != nil || act.tag != "RESET" || act.eff == nil || act.eff.kind != effSettings {
		t.Errorf("RESET: action %+v", act)
	}
}

// planShape is the kinds of a plan's items and the types of its local
// answers' messages, in order.
func planShape(p *planner) (kinds []itemKind, local []byte) {
	for _, it := range p.plan.items {
		kinds = append(kinds, it.kind)
		if it.kind != itLocal {
			continue
		}
		for b := p.plan.lbuf[it.lo:it.hi]; len(b) >= 5; {
			n := int(b[1])<<24 | int(b[2])<<16 | int(b[3])<<8 | int(b[4])
			local = append(local, b[0])
			b = b[1+n:]
		}
	}
	return kinds, local
}

// TestPlanQueryValue: a Query the proxy answers itself is planned into
// the plan value (its items and local answers), with no backend and
// nothing written to the session's client.
func TestPlanQueryValue(t *testing.T) {
	s := planSession(t)
	msg := pgwire.AppendQuery(nil, "BEGIN; SET LOCAL pgshard.shard = 's1'")
	as, err := s.gen.Config.Analyzer.SplitBytes([]byte("BEGIN; SET LOCAL pgshard.shard = 's1'"))
	if err != nil {
		t.Fatal(err)
	}
	p := s.planQuery(context.Background(), msg, as, nil, nil)
	kinds, local := planShape(p)
	if len(kinds) != 3 || kinds[0] != itLocal || kinds[1] != itLocal || kinds[2] != itLocal || string(local) != "CCZ" || len(p.plan.bw) != 0 {
		t.Fatalf("plan: items %v, local messages %q, %d bytes for a backend", kinds, local, len(p.plan.bw))
	}
	if !bytes.HasSuffix(p.plan.lbuf, []byte{'Z', 0, 0, 0, 5, 'T'}) || p.sim.tx != txDeferred || p.sim.hint != 1 {
		t.Errorf("plan: local answers %q, simulated tx %v hint %d", p.plan.lbuf, p.sim.tx, p.sim.hint)
	}
	if s.txn.tx != txIdle || s.txn.hint != -1 || len(s.cc.out) != 0 {
		t.Errorf("planning changed the session: tx %v hint %d, %d bytes for the client", s.txn.tx, s.txn.hint, len(s.cc.out))
	}
}

// planPipeline plans s.grp (Parse, Bind, Describe, Execute, Sync) as
// runPipeline does, without running it.
func planPipeline(s *Session) pipePlanner { return planPipelineFrom(s, nil) }

// planPipelineFrom is planPipeline for a runner that plans again (r:
// what it did for the plan that stopped; nil: the first plan), up to
// where planning stops.
func planPipelineFrom(s *Session, r *resume) pipePlanner {
	p := pipePlanner{s.newPlanner(context.Background())}
	p.planner.pipeline = true
	if r != nil {
		p.planner.restartable = true
		r.on(p.planner)
	}
	for i, m := range s.grp {
		p.planner.cur = i
		if p.planner.need.on || p.planner.failed && m.typ != 'S' {
			continue
		}
		switch m.typ {
		case 'P':
			p.parse(m.raw)
		case 'B':
			p.bind(m.raw, i)
		case 'D':
			p.describe(m.raw, i)
		case 'E':
			p.execute(m.raw)
		case 'S':
			p.sync(m.raw)
		}
	}
	return p
}

// TestPlanPipelineValue: an extended-protocol pipeline the proxy answers
// itself (Parse/Bind/Execute of BEGIN, Sync) is planned into the plan
// value likewise.
func TestPlanPipelineValue(t *testing.T) {
	s := planSession(t)
	s.grp = []cmsg{
		{'P', pgwire.AppendParseMsg(nil, "", "BEGIN", nil)},
		{'B', pgwire.AppendBindText(nil, "", "", nil)},
		{'E', pgwire.AppendExecute(nil, "", 0)},
		{'S', []byte{'S', 0, 0, 0, 4}},
	}
	p := planPipeline(s)
	kinds, local := planShape(p.planner)
	if p.planner.protoErr != nil || len(kinds) != 4 || string(local) != "12CZ" || len(p.planner.plan.bw) != 0 || len(p.planner.plan.portals) != 1 || !p.planner.plan.portals[0].local {
		t.Fatalf("plan: items %v, local messages %q, %d bytes for a backend, portals %+v (%v)", kinds, local, len(p.planner.plan.bw), p.planner.plan.portals, p.planner.protoErr)
	}
	if s.txn.tx != txIdle || len(s.cc.out) != 0 {
		t.Errorf("planning changed the session: tx %v, %d bytes for the client", s.txn.tx, len(s.cc.out))
	}
}

// terminateFixture is a session s and another, other, registered in
// reg; clientEnd is other's client's end of its connection.
func terminateFixture(t *testing.T) (s *Session, reg *Registry, other *Session, clientEnd net.Conn) {
	t.Helper()
	s = planSession(t)
	reg = NewRegistry(obs.NewMetrics())
	s.host = &HostEnv{Clients: reg}
	clientEnd, proxyEnd := net.Pipe()
	t.Cleanup(func() { clientEnd.Close() })
	other = &Session{cc: clientConn{conn: proxyEnd}}
	for _, x := range []*Session{s, other} {
		if !reg.register(x, 10) {
			t.Fatal("register refused")
		}
	}
	return s, reg, other, clientEnd
}

// TestPlanTerminate: whether a pg_terminate_backend of PIDs is the
// proxy's is decided without I/O (resolve: the session register), and
// the call is planned as a step (stepTerminate) that the executor takes:
// only then does the other session get its FATAL and lose its client.
func TestPlanTerminate(t *testing.T) {
	s, reg, other, clientEnd := terminateFixture(t)
	stranger := uint32(1)
	for i := 0; i < 10 && reg.byPID(stranger) != nil; i++ {
		stranger++
	}
	arr := func(pids ...uint32) [][]byte {
		var b strings.Builder
		for i, pid := range pids {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString(strconv.FormatUint(uint64(pid), 10))
		}
		return [][]byte{[]byte("{" + b.String() + "}")}
	}
	many := analyze(t, s, "select pg_terminate_backend(n) from unnest($1::int[]) n")
	if c := parseTerminate(many, arr(other.pid, stranger), nil); c == nil || c.resolve(s) || c.targets != nil {
		t.Fatalf("a PID that is no session's: %+v, want it sent on", c)
	}
	c := parseTerminate(many, arr(other.pid), nil)
	if c == nil || !c.resolve(s) || len(c.targets) != 1 || c.targets[0] != other {
		t.Fatalf("another session's PID: %+v, want it resolved to that session", c)
	}
	act := terminateAction(c)
	if act.step == nil || act.step.kind != stepTerminate || act.step.term != c || act.err != nil {
		t.Fatalf("plan: %+v, want a stepTerminate", act)
	}
	if other.closed || s.terminateSelf {
		t.Fatal("planning ended a session")
	}
	got := make(chan []byte, 1)
	go func() {
		b, _ := io.ReadAll(clientEnd)
		got <- b
	}()
	if done := s.newPlanner(context.Background()).exec().take(act); done.step != nil || done.err != nil {
		t.Errorf("take: %+v", done)
	}
	if b := <-got; !other.closed || len(b) == 0 || b[0] != 'E' || !bytes.Contains(b, []byte("57P01")) {
		t.Errorf("the other session: closed %v, its client got %q; want FATAL 57P01", other.closed, b)
	}
	if s.terminateSelf {
		t.Error("the caller's session is to end too")
	}

	// Its own session (the self form): the answer is the FATAL; the
	// executor's step marks the session to end.
	c = parseTerminate(analyze(t, s, "select pg_terminate_backend(pg_backend_pid())"), nil, nil)
	if c == nil || !c.resolve(s) || len(c.pids) != 1 || c.pids[0] != s.pid {
		t.Fatalf("self: %+v", c)
	}
	act = terminateAction(c)
	if act.step == nil || act.step.kind != stepTerminate || act.err == nil || act.err.Code != "57P01" || act.err.Severity != "FATAL" {
		t.Fatalf("self: plan %+v, want a stepTerminate answered with FATAL 57P01", act)
	}
	if s.terminateSelf || s.selfFatalSent {
		t.Fatal("self: planning marked the session")
	}
	if done := s.newPlanner(context.Background()).exec().take(act); done.err != act.err || !s.terminateSelf || !s.selfFatalSent {
		t.Errorf("self: take %+v, terminateSelf %v selfFatalSent %v", done, s.terminateSelf, s.selfFatalSent)
	}
}

// TestPlanTerminatePipeline: a pipeline's pg_cancel_backend of a proxy
// session is answered by the proxy (nothing for a backend), its result
// in the format the Bind asked for; pg_terminate_backend(pg_backend_pid())
// is answered with its FATAL, and the rest of the pipeline skipped.
func TestPlanTerminatePipeline(t *testing.T) {
	s := planSession(t)
	reg := NewRegistry(obs.NewMetrics())
	s.host = &HostEnv{Clients: reg}
	other := new(Session) // no backend: its cancel does no I/O
	for _, x := range []*Session{s, other} {
		if !reg.register(x, 10) {
			t.Fatal("register refused")
		}
	}
	pid := []byte(strconv.FormatUint(uint64(other.pid), 10))
	for _, binary := range []bool{false, true} {
		bind := pgwire.AppendBindText(nil, "", "", [][]byte{pid})
		if binary {
			var bv pgwire.BindView
			if err := bv.Decode(bind); err != nil {
				t.Fatal(err)
			}
			bind = pgwire.AppendBindFormats(nil, bind, &bv, []int16{1})
		}
		s.grp = []cmsg{
			{'P', pgwire.AppendParseMsg(nil, "", "select pg_cancel_backend($1)", nil)},
			{'B', bind},
			{'D', pgwire.AppendDescribe(nil, 'P', "")},
			{'E', pgwire.AppendExecute(nil, "", 0)},
			{'S', []byte{'S', 0, 0, 0, 4}},
		}
		p := planPipeline(s)
		kinds, local := planShape(p.planner)
		if p.planner.protoErr != nil || string(local) != "12TDCZ" || len(p.planner.plan.bw) != 0 {
			t.Fatalf("binary %v: items %v, local messages %q, %d bytes for a backend (%v)", binary, kinds, local, len(p.planner.plan.bw), p.planner.protoErr)
		}
		// The column's format code (RowDescription), then its row.
		want := []byte{0xff, 0xff, 0xff, 0xff, 0, 0, 'D', 0, 0, 0, 11, 0, 1, 0, 0, 0, 1, 't'}
		if binary {
			want[5], want[len(want)-1] = 1, 1
		}
		if !bytes.Contains(p.planner.plan.lbuf, want) {
			t.Errorf("binary %v: the answer %q has no row %q", binary, p.planner.plan.lbuf, want)
		}
	}
	s.grp = []cmsg{
		{'P', pgwire.AppendParseMsg(nil, "", "select pg_terminate_backend(pg_backend_pid())", nil)},
		{'B', pgwire.AppendBindText(nil, "", "", nil)},
		{'E', pgwire.AppendExecute(nil, "", 0)},
		{'S', []byte{'S', 0, 0, 0, 4}},
	}
	p := planPipeline(s)
	if _, local := planShape(p.planner); string(local) != "1EZ" || !p.planner.failed || !s.terminateSelf || !s.selfFatalSent {
		t.Errorf("self: local messages %q, failed %v, terminateSelf %v selfFatalSent %v", local, p.planner.failed, s.terminateSelf, s.selfFatalSent)
	}
}
