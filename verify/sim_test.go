package verify_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"time"

	"github.com/pgshard/pgshard/shardmap"
	"github.com/pgshard/pgshard/verify"
)

// sim is a small, sequential model of the chaos run used to build the
// regression corpus: a correct in-memory store (the six tables of two
// shards, with the store's commit semantics) driven by a correct client,
// writing the history of HISTORY.md as it goes. Mutant switches break it
// the way the chaos mutants break the real store; corruptions of the
// final state are applied to the State afterwards. It is test code: the
// corpus files it writes are the reviewable artefact.
type sim struct {
	run   string
	now   int64 // ns since the start
	start time.Time
	mp    *shardmap.Map

	lines    []obj
	schedule []obj
	traceMax int

	exes      map[string]*sExe
	outbox    []*sOut
	processed map[string]map[string]bool
	timers    map[string]map[string]float64
	spawns    []*sSpawn
	trace     map[string][]sTrace
	seq       map[string]int64
	n         map[string]int
	events    map[string]int

	mut mutants

	end *obj
	// sink, when set, receives each line instead of lines (a history too
	// large to keep); emitted and opLines count the lines either way.
	sink             func(obj)
	emitted, opLines int
}

// mutants are store or client bugs the sim can have.
type mutants struct {
	outboxOutsideTx bool // a commit that loses its CAS still writes its outbox rows
	dedupeOutsideTx bool // ... still writes its processed_events row
	cancelNoDelete  bool // a cancel disarms the state but leaves the timers row
	staleDelete     bool // delete_timer ignores fire_at
	ackBeforeApply  bool // the relay acks a row, then its delivery fails
	newEventRetry   bool // after an unknown outcome the client retries under a new event id
	traceOffByOne   bool // the ring keeps trace_max+1 entries
	noDedupeFire    bool // the sweeper fires without asking the ledger
}

type sExe struct {
	id      string
	version int
	last    string
	op      string
	timers  map[string]float64
	digest  string // the content digest of the state it holds
}

type sOut struct {
	seq    int64
	shard  string
	target string
	event  string
	from   string
	op     string
}

type sSpawn struct {
	seq    int64
	shard  string
	parent string
	child  string
	op     string
}

type sTrace struct {
	idx   int
	op    string
	step  int
	event string
}

// kv and obj write JSON objects with their members in a fixed order, so
// the corpus reads like the examples of HISTORY.md.
type kv struct {
	k string
	v any
}

type obj []kv

func (o obj) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, p := range o {
		if i > 0 {
			b.WriteByte(',')
		}
		k, _ := json.Marshal(p.k)
		v, err := json.Marshal(p.v)
		if err != nil {
			return nil, err
		}
		b.Write(k)
		b.WriteByte(':')
		b.Write(v)
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

func (o obj) get(k string) any {
	for _, p := range o {
		if p.k == k {
			return p.v
		}
	}
	return nil
}

func (o *obj) set(k string, v any) {
	for i, p := range *o {
		if p.k == k {
			(*o)[i].v = v
			return
		}
	}
	*o = append(*o, kv{k, v})
}

func (o *obj) del(k string) {
	for i, p := range *o {
		if p.k == k {
			*o = append((*o)[:i], (*o)[i+1:]...)
			return
		}
	}
}

const simBuckets = 64

func newSim() *sim {
	m, err := shardmap.Even(simBuckets, []shardmap.Shard{
		{Name: "shard0", Ordinal: 0, DSN: "postgres://x/0"},
		{Name: "shard1", Ordinal: 1, DSN: "postgres://x/1"},
	})
	if err != nil {
		panic(err)
	}
	return &sim{
		run: "r1", start: time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC), mp: m, traceMax: 2,
		exes: map[string]*sExe{}, processed: map[string]map[string]bool{}, timers: map[string]map[string]float64{},
		trace: map[string][]sTrace{}, seq: map[string]int64{}, n: map[string]int{}, events: map[string]int{},
	}
}

// exeID returns the k-th execution id (from 0) placed on the named shard.
func (s *sim) exeID(shard string, k int) string {
	for i := 1; ; i++ {
		id := fmt.Sprintf("%032x", 0xe0000+i)
		if s.mp.Lookup(id).Name == shard {
			if k == 0 {
				return id
			}
			k--
		}
	}
}

func (s *sim) shardOf(id string) string { return s.mp.Lookup(id).Name }

// unix is the wall-clock time (Unix seconds) d after now.
func (s *sim) unix(d time.Duration) float64 {
	return float64(s.start.Add(time.Duration(s.now)+d).UnixNano()) / 1e9
}

func (s *sim) opID(src string) string {
	s.n[src]++
	return fmt.Sprintf("%s/%s/%d", s.run, src, s.n[src])
}

// tick advances the clock by one op's duration and returns (t0, t1).
func (s *sim) tick() (int64, int64) {
	t0 := s.now
	s.now += int64(time.Millisecond)
	return t0, s.now
}

func (s *sim) emit(o obj) obj {
	s.emitted++
	if o.get("type") == "op" {
		s.opLines++
	}
	if s.sink != nil {
		s.sink(o)
		return o
	}
	s.lines = append(s.lines, o)
	return o
}

func (s *sim) newEvent(src string) string {
	s.events[src]++
	return fmt.Sprintf("%s-%s-%d", s.run, src, s.events[src])
}

// load records LoadForEvent(exe, event).
func (s *sim) load(src, exeID, event, cause string) (version int, processed bool) {
	t0, t1 := s.tick()
	o := obj{{"type", "op"}, {"id", s.opID(src)}, {"kind", "load"}, {"src", src}, {"exe", exeID}, {"shard", s.shardOf(exeID)},
		{"t0", t0}, {"t1", t1}, {"outcome", "ok"}, {"event", event}, {"cause", cause}}
	e := s.exes[exeID]
	processed = event != "" && s.processed[exeID][event]
	if e == nil {
		o = append(o, kv{"exists", false}, kv{"processed", processed})
		s.emit(o)
		return 0, processed
	}
	o = append(o, kv{"exists", true}, kv{"version", e.version}, kv{"writer", e.op}, kv{"processed", processed}, kv{"data_digest", e.digest})
	s.emit(o)
	return e.version, processed
}

// spec is what a commit writes.
type spec struct {
	event, input, cause string
	emits               []string // targets; event ids are EVENT-eK
	timers              []verify.TimerOp
	spawns              []string
	trace               bool
	seq                 int64  // outbox delivery
	origin              string // outbox delivery
	body                string // outbox delivery: the event document read
	path                string // timer fire
	fireAt              float64
}

func (sp spec) fast() bool {
	return len(sp.emits) == 0 && len(sp.timers) == 0 && len(sp.spawns) == 0 && !sp.trace
}

// mode is how a commit attempt ends.
type mode int

const (
	mOK          mode = iota // acknowledged if the CAS holds (a conflict otherwise)
	mInfoApplied             // committed, the reply was lost
	mInfoLost                // sent, then the connection died before the commit
	mFail                    // refused before it was sent
)

// commit records one Commit attempt at exp and applies it if it commits.
// It returns the op id and the outcome written.
func (s *sim) commit(src, exeID string, exp int, sp spec, md mode) (string, string) {
	id := s.opID(src)
	t0, t1 := s.tick()
	e := s.exes[exeID]
	cur := 0
	if e != nil {
		cur = e.version
	}
	casOK := cur == exp
	applied := casOK && (md == mOK || md == mInfoApplied)
	outcome := "ok"
	switch {
	case md == mInfoApplied || md == mInfoLost:
		outcome = "info"
	case md == mFail || !casOK:
		outcome = "fail"
	}
	o := obj{{"type", "op"}, {"id", id}, {"kind", "commit"}, {"src", src}, {"exe", exeID}, {"shard", s.shardOf(exeID)},
		{"t0", t0}, {"t1", t1}, {"outcome", outcome}, {"exp", exp}}
	switch {
	case outcome == "ok":
		o = append(o, kv{"new", exp + 1})
	case outcome == "fail" && !casOK && md == mOK:
		o = append(o, kv{"found", cur}, kv{"conflict", true}, kv{"err", "commit conflict"})
	case outcome == "fail":
		o = append(o, kv{"err", "connection refused"})
	default:
		o = append(o, kv{"err", "conn closed"})
	}
	var emits []obj
	for k, t := range sp.emits {
		ev := fmt.Sprintf("%s-e%d", sp.event, k)
		emits = append(emits, obj{{"event", ev}, {"target", t}, {"digest", mustDigest(simEventDoc(ev, exeID, id))}})
	}
	var timers []obj
	for _, t := range sp.timers {
		if t.Cancel {
			timers = append(timers, obj{{"path", t.Path}, {"cancel", true}})
		} else {
			timers = append(timers, obj{{"path", t.Path}, {"fire_at", t.FireAt}})
		}
	}
	o = append(o, kv{"event", sp.event}, kv{"input", sp.input}, kv{"cause", sp.cause}, kv{"fast", sp.fast()})
	if len(emits) > 0 {
		o = append(o, kv{"emits", emits})
	}
	if len(timers) > 0 {
		o = append(o, kv{"timers", timers})
	}
	if len(sp.spawns) > 0 {
		o = append(o, kv{"spawns", sp.spawns})
		var ds []string
		for range sp.spawns {
			ds = append(ds, mustDigest(simSpawnDoc(id)))
		}
		o = append(o, kv{"spawn_digests", ds})
	}
	if sp.trace {
		o = append(o, kv{"trace", true}, kv{"trace_digest", mustDigest(simTraceDoc(id, exp, sp.event))})
	}
	o = append(o, kv{"data_digest", s.writtenDigest(exeID, exp, id, sp)})
	if sp.cause == verify.CauseOutbox {
		o = append(o, kv{"seq", sp.seq}, kv{"origin", sp.origin})
		if sp.body != "" {
			o = append(o, kv{"body_digest", mustDigest([]byte(sp.body))})
		}
	}
	if sp.cause == verify.CauseTimer {
		o = append(o, kv{"path", sp.path}, kv{"fire_at", sp.fireAt})
	}
	s.emit(o)
	if applied {
		s.apply(id, exeID, sp)
	} else if md != mFail {
		// A commit that was sent and lost (its CAS, or its connection):
		// only mutants leave effects behind.
		if s.mut.outboxOutsideTx {
			s.writeOutbox(id, exeID, sp)
		}
		if s.mut.dedupeOutsideTx && sp.event != "" {
			s.markProcessed(exeID, sp.event)
		}
	}
	return id, outcome
}

func (s *sim) markProcessed(exeID, event string) {
	if s.processed[exeID] == nil {
		s.processed[exeID] = map[string]bool{}
	}
	s.processed[exeID][event] = true
}

func (s *sim) nextSeq(shard string) int64 {
	ord := 0
	if sh, err := s.mp.ShardByName(shard); err == nil {
		ord = sh.Ordinal
	}
	s.seq[shard]++
	return int64(ord+1) + (s.seq[shard]-1)*1024
}

func (s *sim) writeOutbox(opID, exeID string, sp spec) {
	for k, t := range sp.emits {
		sh := s.shardOf(exeID)
		s.outbox = append(s.outbox, &sOut{seq: s.nextSeq(sh), shard: sh, target: t, event: fmt.Sprintf("%s-e%d", sp.event, k), from: exeID, op: opID})
	}
}

// writtenDigest is the content digest of the state commit opID writes
// when it applies sp at exp to the current state (HISTORY.md: context
// members and "active").
func (s *sim) writtenDigest(exeID string, exp int, opID string, sp spec) string {
	timers := map[string]float64{}
	if e := s.exes[exeID]; e != nil {
		for p, at := range e.timers {
			timers[p] = at
		}
	}
	if sp.cause == verify.CauseTimer {
		if at, ok := timers[sp.path]; ok && at == sp.fireAt {
			delete(timers, sp.path)
		}
	}
	for _, t := range sp.timers {
		if t.Cancel {
			delete(timers, t.Path)
		} else {
			timers[t.Path] = t.FireAt
		}
	}
	b, _ := json.Marshal(simContext(exp, sp.event, opID, timers, "a"))
	return mustDigest(b)
}

// simContext is the context of a state the sim writes, with "active"
// when active is not "" (the digest's form; the row carries active in
// active_path).
func simContext(step int, last, op string, timers map[string]float64, active string) obj {
	ctx := obj{{"step", step}}
	if last != "" {
		ctx = append(ctx, kv{"last", last})
	}
	ctx = append(ctx, kv{"op", op})
	if len(timers) > 0 {
		ts := obj{}
		for _, p := range sortedPaths(timers) {
			ts = append(ts, kv{p, timers[p]})
		}
		ctx = append(ctx, kv{"timers", ts})
	}
	ctx = append(ctx, kv{"payload", "xx"})
	if active != "" {
		ctx = append(ctx, kv{"active", active})
	}
	return ctx
}

func simEventDoc(event, from, op string) []byte {
	b, _ := json.Marshal(obj{{"id", event}, {"name", "ping"}, {"from", from}, {"op", op}, {"emitted_ns", 1}})
	return b
}

func simTraceDoc(op string, step int, event string) []byte {
	b, _ := json.Marshal(obj{{"op", op}, {"step", step}, {"event", event}, {"active", "a"}})
	return b
}

func simSpawnDoc(op string) []byte {
	c, _ := json.Marshal(obj{{"op", op}})
	b, _ := json.Marshal(obj{{"root_path", "child"}, {"context", json.RawMessage(c)}})
	return b
}

func mustDigest(b []byte) string {
	d, err := verify.ContentDigest(b)
	if err != nil {
		panic(err)
	}
	return d
}

// apply is the store's commit transaction.
func (s *sim) apply(opID, exeID string, sp spec) {
	e := s.exes[exeID]
	if e == nil {
		e = &sExe{id: exeID, timers: map[string]float64{}}
		s.exes[exeID] = e
	}
	e.digest = s.writtenDigest(exeID, e.version, opID, sp)
	e.version++
	e.op, e.last = opID, sp.event
	if sp.cause == verify.CauseTimer {
		if at, ok := e.timers[sp.path]; ok && at == sp.fireAt {
			delete(e.timers, sp.path)
		}
	}
	s.writeOutbox(opID, exeID, sp)
	if sp.event != "" {
		s.markProcessed(exeID, sp.event)
	}
	for _, ch := range sp.spawns {
		sh := s.shardOf(exeID)
		s.spawns = append(s.spawns, &sSpawn{seq: s.nextSeq(sh), shard: sh, parent: exeID, child: ch, op: opID})
	}
	if s.timers[exeID] == nil {
		s.timers[exeID] = map[string]float64{}
	}
	for _, t := range sp.timers {
		if t.Cancel {
			delete(e.timers, t.Path)
			if !s.mut.cancelNoDelete {
				delete(s.timers[exeID], t.Path)
			}
			continue
		}
		e.timers[t.Path] = t.FireAt
		s.timers[exeID][t.Path] = t.FireAt
	}
	if sp.trace {
		tr := s.trace[exeID]
		idx := 0
		if len(tr) > 0 {
			idx = tr[len(tr)-1].idx + 1
		}
		tr = append(tr, sTrace{idx: idx, op: opID, step: e.version - 1, event: sp.event})
		keep := s.traceMax
		if s.mut.traceOffByOne {
			keep++
		}
		if s.traceMax > 0 && len(tr) > keep {
			tr = tr[len(tr)-keep:]
		}
		s.trace[exeID] = tr
	}
}

// setup is the first save of an execution.
func (s *sim) setup(exeID string) string {
	id, _ := s.commit("setup", exeID, 0, spec{cause: verify.CauseSetup}, mOK)
	return id
}

// step is a correct worker's transition: load, commit, and after an
// unknown outcome reload and retry only if the event is not processed.
// first is the mode of the first attempt; retries are acknowledged. It
// returns the ids of its commit attempts.
func (s *sim) step(src, exeID string, sp spec, first mode) []string {
	sp.event = s.newEvent(src)
	sp.input, sp.cause = sp.event, verify.CauseWorker
	return s.attempts(src, exeID, sp, first, nil)
}

// stepRacing is step with another writer committing between its load and
// its first commit (a conflict, then a retry).
func (s *sim) stepRacing(src, exeID string, sp spec, race func()) []string {
	sp.event = s.newEvent(src)
	sp.input, sp.cause = sp.event, verify.CauseWorker
	return s.attempts(src, exeID, sp, mOK, race)
}

func (s *sim) attempts(src, exeID string, sp spec, first mode, race func()) []string {
	var ids []string
	md := first
	for attempt := 0; attempt < 5; attempt++ {
		v, done := s.load(src, exeID, sp.event, sp.cause)
		if done {
			return ids
		}
		if race != nil {
			race()
			race = nil
		}
		id, outcome := s.commit(src, exeID, v, sp, md)
		ids = append(ids, id)
		md = mOK
		switch outcome {
		case "ok":
			return ids
		case "info":
			if s.mut.newEventRetry {
				sp.event = s.newEvent(src) // the bug: a new id for the same input
			}
		}
	}
	return ids
}

// relay delivers every pending outbox row (oldest first) and acks every
// spawn intent, as the production relay does.
func (s *sim) relay() {
	rows := append([]*sOut{}, s.outbox...)
	sort.Slice(rows, func(i, j int) bool { return rows[i].seq < rows[j].seq })
	t0, t1 := s.tick()
	s.emit(obj{{"type", "op"}, {"id", s.opID("relay")}, {"kind", "read_outbox"}, {"src", "relay"}, {"exe", ""}, {"shard", ""},
		{"t0", t0}, {"t1", t1}, {"outcome", "ok"}, {"n", len(rows)}})
	for _, r := range rows {
		if s.mut.ackBeforeApply {
			s.ackOutbox(r)
			// The delivery then fails before it is sent.
			v, _ := s.load("relay", r.target, r.event, verify.CauseOutbox)
			s.commit("relay", r.target, v, spec{event: r.event, input: r.event, cause: verify.CauseOutbox, seq: r.seq, origin: r.op}, mFail)
			continue
		}
		sp := spec{event: r.event, input: r.event, cause: verify.CauseOutbox, seq: r.seq, origin: r.op, body: string(simEventDoc(r.event, r.from, r.op))}
		s.attempts("relay", r.target, sp, mOK, nil)
		s.ackOutbox(r)
	}
	sp := append([]*sSpawn{}, s.spawns...)
	t0, t1 = s.tick()
	s.emit(obj{{"type", "op"}, {"id", s.opID("relay")}, {"kind", "read_spawns"}, {"src", "relay"}, {"exe", ""}, {"shard", ""},
		{"t0", t0}, {"t1", t1}, {"outcome", "ok"}, {"n", len(sp)}})
	for _, r := range sp {
		t0, t1 := s.tick()
		s.emit(obj{{"type", "op"}, {"id", s.opID("relay")}, {"kind", "ack_spawn"}, {"src", "relay"}, {"exe", r.parent}, {"shard", r.shard},
			{"t0", t0}, {"t1", t1}, {"outcome", "ok"}, {"seq", r.seq}, {"parent", r.parent}, {"child", r.child}})
		s.removeSpawn(r.seq)
	}
}

func (s *sim) ackOutbox(r *sOut) {
	t0, t1 := s.tick()
	s.emit(obj{{"type", "op"}, {"id", s.opID("relay")}, {"kind", "ack_outbox"}, {"src", "relay"}, {"exe", ""}, {"shard", r.shard},
		{"t0", t0}, {"t1", t1}, {"outcome", "ok"}, {"seq", r.seq}, {"event", r.event}, {"target", r.target}})
	for i, x := range s.outbox {
		if x.seq == r.seq {
			s.outbox = append(s.outbox[:i], s.outbox[i+1:]...)
			break
		}
	}
}

func (s *sim) removeSpawn(seq int64) {
	for i, x := range s.spawns {
		if x.seq == seq {
			s.spawns = append(s.spawns[:i], s.spawns[i+1:]...)
			return
		}
	}
}

// sweep fires every due timer as the production sweeper does: read the due
// timers, then per timer a deduplicated fire and a delete that only
// removes the row if it still fires at the same time. between runs after
// the read, before the fires (to race a re-arm against a stale sweep).
func (s *sim) sweep(now float64, between func()) {
	type due struct {
		exe, path string
		at        float64
	}
	var ds []due
	for _, id := range sortedIDs(s.timers) {
		for _, p := range sortedPaths(s.timers[id]) {
			if at := s.timers[id][p]; at <= now {
				ds = append(ds, due{id, p, at})
			}
		}
	}
	{
		// Every poll is recorded, with its limit (HISTORY.md version 2).
		ts := []obj{}
		for _, d := range ds {
			ts = append(ts, obj{{"exe", d.exe}, {"path", d.path}, {"fire_at", d.at}})
		}
		t0, t1 := s.tick()
		s.emit(obj{{"type", "op"}, {"id", s.opID("sweeper")}, {"kind", "due_timers"}, {"src", "sweeper"}, {"exe", ""}, {"shard", ""},
			{"t0", t0}, {"t1", t1}, {"outcome", "ok"}, {"now", now}, {"limit", 100}, {"timers", ts}})
	}
	if between != nil {
		between()
	}
	for _, d := range ds {
		ev := fmt.Sprintf("timer:%s:%.6f", d.path, d.at)
		sp := spec{event: ev, input: ev, cause: verify.CauseTimer, path: d.path, fireAt: d.at}
		if s.mut.noDedupeFire {
			v, _ := s.load("sweeper", d.exe, "", verify.CauseTimer)
			s.commit("sweeper", d.exe, v, sp, mOK)
		} else {
			s.attempts("sweeper", d.exe, sp, mOK, nil)
		}
		s.deleteTimer(d.exe, d.path, d.at)
	}
}

func (s *sim) deleteTimer(exeID, path string, at float64) {
	t0, t1 := s.tick()
	cur, ok := s.timers[exeID][path]
	deleted := ok && (cur == at || s.mut.staleDelete)
	if deleted {
		delete(s.timers[exeID], path)
	}
	s.emit(obj{{"type", "op"}, {"id", s.opID("sweeper")}, {"kind", "delete_timer"}, {"src", "sweeper"}, {"exe", exeID}, {"shard", s.shardOf(exeID)},
		{"t0", t0}, {"t1", t1}, {"outcome", "ok"}, {"path", path}, {"fire_at", at}, {"deleted", deleted}})
}

// redeliver re-sends an event the worker's earlier commit applied.
func (s *sim) redeliver(src, exeID, event string) {
	s.load(src, exeID, event, verify.CauseRedeliver)
}

// fault writes an injection line now; heal writes its heal line.
func (s *sim) fault(id, kind, shard string, landed bool, evidence obj) {
	s.schedule = append(s.schedule, obj{{"id", id}, {"kind", kind}, {"shard", shard}, {"at_ms", s.now / 1e6}, {"hold_ms", 5}})
	s.emit(obj{{"type", "fault"}, {"id", id}, {"kind", kind}, {"phase", "inject"}, {"t", s.now}, {"shard", shard}, {"landed", landed}, {"evidence", evidence}})
}

func (s *sim) heal(id, kind, shard string) {
	s.now += int64(time.Millisecond)
	s.emit(obj{{"type", "fault"}, {"id", id}, {"kind", kind}, {"phase", "heal"}, {"t", s.now}, {"shard", shard}})
}

// errOp records a failed load (a fault's visible effect).
func (s *sim) errOp(src, exeID, sqlstate string) {
	t0, t1 := s.tick()
	o := obj{{"type", "op"}, {"id", s.opID(src)}, {"kind", "load"}, {"src", src}, {"exe", exeID}, {"shard", s.shardOf(exeID)},
		{"t0", t0}, {"t1", t1}, {"outcome", "fail"}, {"err", "terminating connection due to administrator command"}, {"sqlstate", sqlstate},
		{"event", ""}, {"cause", verify.CauseWorker}}
	s.emit(o)
}

// finish writes the end line.
func (s *sim) finish(quiesceOK bool) {
	s.now += int64(time.Millisecond)
	left := len(s.outbox)
	end := obj{{"type", "end"}, {"t", s.now}, {"ended_at", s.start.Add(time.Duration(s.now)).Format(time.RFC3339Nano)},
		{"ops", s.opCount()}, {"interrupted", false},
		{"quiesce", obj{{"ok", quiesceOK}, {"ms", 3}, {"outbox_left", left}, {"spawns_left", len(s.spawns)}, {"timers_left", 0}}}}
	s.end = &end
}

func (s *sim) opCount() int { return s.opLines }

func (s *sim) header() obj {
	var shards []obj
	for _, sh := range s.mp.Shards {
		var rs [][2]int
		for _, r := range s.mp.RangesOf(sh.Name) {
			rs = append(rs, [2]int{r.Lo, r.Hi})
		}
		shards = append(shards, obj{{"name", sh.Name}, {"ordinal", sh.Ordinal}, {"ranges", rs}})
	}
	sched := s.schedule
	if sched == nil {
		sched = []obj{}
	}
	return obj{{"type", "header"}, {"format", verify.Format}, {"version", verify.Version}, {"run", s.run},
		{"started_at", s.start.Format(time.RFC3339Nano)}, {"seed", 7}, {"scenario", "corpus"}, {"target", "sim"},
		{"workload", obj{{"executions", len(s.exes)}, {"definition_id", "chaos"}, {"trace_max", s.traceMax}, {"timer_delay_ms", 1500}}},
		{"map", obj{{"epoch", 1}, {"buckets", simBuckets}, {"shards", shards}}},
		{"schedule", sched}}
}

// historyLines is the whole history: header, lines, end (if finished).
func (s *sim) historyLines() []obj {
	out := append([]obj{s.header()}, s.lines...)
	if s.end != nil {
		out = append(out, *s.end)
	}
	return out
}

// encodeLines writes lines as JSON lines.
func encodeLines(lines []obj) []byte {
	var b bytes.Buffer
	for _, l := range lines {
		j, err := json.Marshal(l)
		if err != nil {
			panic(err)
		}
		b.Write(j)
		b.WriteByte('\n')
	}
	return b.Bytes()
}

// state is the final contents of both shards, as Dump would read them.
func (s *sim) state() *verify.State {
	st := &verify.State{Map: verify.MapInfoOf(s.mp)}
	idx := map[string]*verify.ShardState{}
	for _, sh := range s.mp.Shards {
		ss := &verify.ShardState{Name: sh.Name, Ordinal: sh.Ordinal,
			Identity:   &verify.Identity{Name: sh.Name, Ordinal: sh.Ordinal, Buckets: simBuckets, MapEpoch: 1},
			Executions: []verify.ExecutionRow{}, Outbox: []verify.OutboxRow{}, Processed: []verify.ProcessedRow{},
			Timers: []verify.TimerRow{}, Spawns: []verify.SpawnRow{}, Trace: []verify.TraceRow{}}
		st.Shards = append(st.Shards, ss)
		idx[sh.Name] = ss
	}
	b := func(k string) int { return s.mp.Bucket(k) }
	for _, id := range sortedIDs(s.exes) {
		e := s.exes[id]
		ss := idx[s.shardOf(id)]
		ctx := simContext(e.version-1, e.last, e.op, e.timers, "")
		data := obj{{"id", id}, {"definition_id", "chaos"}, {"version", e.version}, {"status", "running"}, {"outcome", nil},
			{"active_path", []string{"a"}}, {"parent_id", nil}, {"context", ctx}}
		j, _ := json.Marshal(data)
		ss.Executions = append(ss.Executions, verify.ExecutionRow{ID: id, DefinitionID: "chaos", Version: e.version, Data: verify.Doc(j), Bucket: b(id)})
		for _, ev := range sortedKeys(s.processed[id]) {
			ss.Processed = append(ss.Processed, verify.ProcessedRow{ExecutionID: id, EventID: ev, Bucket: b(id)})
		}
		for _, p := range sortedPaths(s.timers[id]) {
			ss.Timers = append(ss.Timers, verify.TimerRow{ExecutionID: id, Path: p, FireAt: s.timers[id][p], Bucket: b(id)})
		}
		for _, t := range s.trace[id] {
			en := simTraceDoc(t.op, t.step, t.event)
			ss.Trace = append(ss.Trace, verify.TraceRow{ExecutionID: id, Idx: t.idx, Entry: verify.Doc(en), Bucket: b(id)})
		}
	}
	for _, r := range s.outbox {
		ss := idx[r.shard]
		ev := simEventDoc(r.event, r.from, r.op)
		t := r.target
		ss.Outbox = append(ss.Outbox, verify.OutboxRow{Seq: r.seq, TargetID: &t, Event: verify.Doc(ev), Bucket: b(r.from)})
	}
	for _, r := range s.spawns {
		ss := idx[r.shard]
		c, _ := json.Marshal(obj{{"op", r.op}})
		ss.Spawns = append(ss.Spawns, verify.SpawnRow{Seq: r.seq, ParentID: r.parent, ChildID: r.child, RootPath: "child", Context: verify.Doc(c), Bucket: b(r.parent)})
	}
	for _, ss := range st.Shards {
		sort.Slice(ss.Outbox, func(i, j int) bool { return ss.Outbox[i].Seq < ss.Outbox[j].Seq })
		sort.Slice(ss.Spawns, func(i, j int) bool { return ss.Spawns[i].Seq < ss.Spawns[j].Seq })
	}
	return st
}

func sortedIDs[V any](m map[string]V) []string { return sortedKeys(m) }

func sortedPaths(m map[string]float64) []string { return sortedKeys(m) }

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// findOp returns the index of the first history line matching all the
// given member values ("kind", "commit", "cause", "outbox", ...).
func findOp(lines []obj, kvs ...any) int {
	for i, l := range lines {
		ok := true
		for j := 0; j+1 < len(kvs); j += 2 {
			if fmt.Sprint(l.get(kvs[j].(string))) != fmt.Sprint(kvs[j+1]) {
				ok = false
				break
			}
		}
		if ok {
			return i
		}
	}
	panic(fmt.Sprintf("no line with %v", kvs))
}

// lastOp is findOp from the end.
func lastOp(lines []obj, kvs ...any) int {
	for i := len(lines) - 1; i >= 0; i-- {
		ok := true
		for j := 0; j+1 < len(kvs); j += 2 {
			if fmt.Sprint(lines[i].get(kvs[j].(string))) != fmt.Sprint(kvs[j+1]) {
				ok = false
				break
			}
		}
		if ok {
			return i
		}
	}
	panic(fmt.Sprintf("no line with %v", kvs))
}

// shardOfRow finds the shard and index of an executions row.
func exeRow(st *verify.State, id string) (*verify.ShardState, int) {
	for _, ss := range st.Shards {
		for i, r := range ss.Executions {
			if r.ID == id {
				return ss, i
			}
		}
	}
	panic("no executions row " + id)
}

// editContext rewrites the context of an executions row.
func editContext(st *verify.State, id string, f func(ctx map[string]any)) {
	ss, i := exeRow(st, id)
	var d map[string]any
	if err := json.Unmarshal([]byte(ss.Executions[i].Data), &d); err != nil {
		panic(err)
	}
	f(d["context"].(map[string]any))
	j, _ := json.Marshal(d)
	ss.Executions[i].Data = verify.Doc(j)
}

func editData(st *verify.State, id string, f func(d map[string]any)) {
	ss, i := exeRow(st, id)
	var d map[string]any
	if err := json.Unmarshal([]byte(ss.Executions[i].Data), &d); err != nil {
		panic(err)
	}
	f(d)
	j, _ := json.Marshal(d)
	ss.Executions[i].Data = verify.Doc(j)
}

func otherShard(st *verify.State, name string) *verify.ShardState {
	for _, ss := range st.Shards {
		if ss.Name != name {
			return ss
		}
	}
	panic("one shard")
}

func shardNamed(st *verify.State, name string) *verify.ShardState {
	for _, ss := range st.Shards {
		if ss.Name == name {
			return ss
		}
	}
	panic("no shard " + name)
}
