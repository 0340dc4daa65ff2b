package chaos

import (
	"bufio"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/klauspost/compress/zstd"

	"github.com/pgshard/pgshard/loadgen"
	"github.com/pgshard/pgshard/shardmap"
)

// HistoryFormat and HistoryVersion name the format the History writes
// (verify/HISTORY.md is its definition).
const (
	HistoryFormat  = "pgshard-history"
	HistoryVersion = 2
)

// Header is the first line of a history.
type Header struct {
	Run       string          `json:"run"`
	StartedAt time.Time       `json:"started_at"`
	Seed      uint64          `json:"seed"`
	Scenario  string          `json:"scenario"`
	Target    string          `json:"target"`
	Workload  HeaderWorkload  `json:"workload"`
	Map       HeaderMap       `json:"map"`
	Schedule  []HeaderPlanned `json:"schedule"`
}

// HeaderWorkload is what the checker needs to know of the workload.
type HeaderWorkload struct {
	Executions   int     `json:"executions"`
	DefinitionID string  `json:"definition_id"`
	TraceMax     int     `json:"trace_max"`
	TimerDelayMs int64   `json:"timer_delay_ms"`
	Fast         float64 `json:"fast"`
	MaxEmits     int     `json:"max_emits"`
	Timer        float64 `json:"timer"`
	Spawn        float64 `json:"spawn"`
	Redelivery   float64 `json:"redelivery"`
	RetryCap     int     `json:"retry_cap"`
	Concurrency  int     `json:"concurrency"`
	// PayloadBytes is the length of the padding every state carries
	// ("x" repeated).
	PayloadBytes int `json:"payload_bytes"`
	// Mutant names the deliberately broken variant the run used, "" for
	// the production store.
	Mutant string `json:"mutant,omitempty"`
}

// HeaderMap is the shard map the workload was routed by.
type HeaderMap struct {
	Epoch   uint64        `json:"epoch"`
	Buckets int           `json:"buckets"`
	Shards  []HeaderShard `json:"shards"`
}

// HeaderShard is one shard of HeaderMap; ranges are inclusive [lo, hi].
type HeaderShard struct {
	Name    string   `json:"name"`
	Ordinal int      `json:"ordinal"`
	Ranges  [][2]int `json:"ranges"`
}

// HeaderPlanned is one fault of the schedule drawn before the run.
type HeaderPlanned struct {
	ID     string            `json:"id"`
	Kind   string            `json:"kind"`
	Shard  string            `json:"shard"`
	AtMs   int64             `json:"at_ms"`
	HoldMs int64             `json:"hold_ms"`
	Params map[string]string `json:"params,omitempty"`
}

// HeaderMapOf describes m.
func HeaderMapOf(m *shardmap.Map) HeaderMap {
	h := HeaderMap{Epoch: m.Epoch, Buckets: m.Buckets}
	for _, s := range m.Shards {
		hs := HeaderShard{Name: s.Name, Ordinal: s.Ordinal, Ranges: [][2]int{}}
		for _, r := range m.RangesOf(s.Name) {
			hs.Ranges = append(hs.Ranges, [2]int{r.Lo, r.Hi})
		}
		h.Shards = append(h.Shards, hs)
	}
	return h
}

// End is the last line of a history.
type End struct {
	EndedAt     time.Time    `json:"ended_at"`
	Interrupted bool         `json:"interrupted"`
	Quiesce     *EndQuiesce  `json:"quiesce,omitempty"`
	Error       string       `json:"error,omitempty"`
	Ops         int64        `json:"ops"`
	Faults      map[Kind]int `json:"faults,omitempty"`
	// ScheduleCutMs, when set, is the offset in the schedule (at_ms's
	// clock) where the fault schedule was stopped for the heal: planned
	// faults at or after it were never due (an extended run plans up to
	// its ceiling).
	ScheduleCutMs int64 `json:"schedule_cut_ms,omitempty"`
	// Map is the map in force at the end when it is not the header's:
	// the run's catalog after its last move (runs with move faults). The
	// verifier places rows by it.
	Map *HeaderMap `json:"map,omitempty"`
}

// EndQuiesce is the heal-and-quiesce phase's outcome.
type EndQuiesce struct {
	OK         bool   `json:"ok"`
	Ms         int64  `json:"ms"`
	HealError  string `json:"heal_error,omitempty"`
	OutboxLeft int    `json:"outbox_left"`
	SpawnsLeft int    `json:"spawns_left"`
	TimersLeft int    `json:"timers_left"`
}

// History streams a run's history to a file as JSON lines (optionally
// gzip or zstd compressed, by the file name's extension). It implements
// loadgen.Observer; it is safe for concurrent use and holds nothing but
// its write buffer, so memory stays bounded whatever the run's length.
//
//	loadgen ops ─┐
//	faults ──────┼─▶ encode (one line each) ─▶ buffer ─▶ [gzip|zstd] ─▶ file
//	end ─────────┘
type History struct {
	m     *shardmap.Map
	start time.Time

	mu     sync.Mutex
	f      *os.File
	comp   io.WriteCloser // nil when uncompressed
	buf    *bufio.Writer
	enc    *json.Encoder
	ops    int64
	stats  HistoryStats
	faults map[Kind]int
	landed map[string]bool // fault ids counted in faults
	acks   ackMatcher      // lost-acks corroborated by the ops (history_acks.go)
	corr   corrMatcher     // the other kinds corroborated by the ops (history_corr.go)
	err    error           // the first write error; later writes are dropped
	via    func(*loadgen.Op) string
}

// SetVia sets how the history names the client each op went through (the
// op line's via: "proxy", "router"; "" leaves it out). Call it before the
// first op.
func (w *History) SetVia(via func(*loadgen.Op) string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.via = via
}

var _ loadgen.Observer = (*History)(nil)

// CreateHistory creates path and writes h as its header. Times of later
// lines count from start (monotonic). m names the shard of each op.
func CreateHistory(path string, h Header, m *shardmap.Map, start time.Time) (*History, error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("history: %w", err)
	}
	w := &History{m: m, start: start, f: f, faults: map[Kind]int{}, landed: map[string]bool{}, corr: newCorrMatcher(h.Schedule)}
	var out io.Writer = f
	switch {
	case strings.HasSuffix(path, ".gz"):
		w.comp = gzip.NewWriter(f)
	case strings.HasSuffix(path, ".zst"):
		z, err := zstd.NewWriter(f, zstd.WithEncoderLevel(zstd.SpeedFastest))
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("history: %w", err)
		}
		w.comp = z
	}
	if w.comp != nil {
		out = w.comp
	}
	w.buf = bufio.NewWriterSize(out, 256<<10)
	w.enc = json.NewEncoder(w.buf)
	w.enc.SetEscapeHTML(false)
	line := struct {
		Type    string `json:"type"`
		Format  string `json:"format"`
		Version int    `json:"version"`
		Header
	}{"header", HistoryFormat, HistoryVersion, h}
	if line.Schedule == nil {
		line.Schedule = []HeaderPlanned{}
	}
	w.write(line)
	if w.err != nil {
		w.Close()
		return nil, w.err
	}
	return w, nil
}

func (w *History) write(v any) {
	if w.err != nil {
		return
	}
	if err := w.enc.Encode(v); err != nil {
		w.err = fmt.Errorf("history: %w", err)
	}
}

func (w *History) since(t time.Time) int64 { return int64(t.Sub(w.start)) }

// Ops is the number of op lines written so far.
func (w *History) Ops() int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.ops
}

// opLine is one op line (verify/HISTORY.md, "op").
type opLine struct {
	Type     string   `json:"type"`
	ID       string   `json:"id"`
	Kind     string   `json:"kind"`
	Src      string   `json:"src"`
	Exe      string   `json:"exe"`
	Shard    string   `json:"shard,omitempty"`
	Via      string   `json:"via,omitempty"`
	T0       int64    `json:"t0"`
	T1       int64    `json:"t1"`
	Outcome  string   `json:"outcome"`
	Err      string   `json:"err,omitempty"`
	SQLState string   `json:"sqlstate,omitempty"`
	Class    string   `json:"class,omitempty"`
	Cause    string   `json:"cause,omitempty"`
	Event    string   `json:"event,omitempty"`
	Input    string   `json:"input,omitempty"`
	Exists   *bool    `json:"exists,omitempty"`
	Version  *int     `json:"version,omitempty"`
	Writer   *string  `json:"writer,omitempty"`
	Proc     *bool    `json:"processed,omitempty"`
	Exp      *int     `json:"exp,omitempty"`
	New      *int     `json:"new,omitempty"`
	Found    *int     `json:"found,omitempty"`
	Conflict bool     `json:"conflict,omitempty"`
	Fast     *bool    `json:"fast,omitempty"`
	Emits    []emit   `json:"emits,omitempty"`
	Timers   any      `json:"timers,omitempty"`
	Spawns   []string `json:"spawns,omitempty"`
	Trace    bool     `json:"trace,omitempty"`
	// What a commit writes into the execution's state (verify compares
	// the final row with its writer's).
	Step    *int64              `json:"step,omitempty"`
	Active  string              `json:"active,omitempty"`
	Armed   *map[string]float64 `json:"armed,omitempty"`
	Seq     int64               `json:"seq,omitempty"`
	Origin  string              `json:"origin,omitempty"`
	Target  string              `json:"target,omitempty"`
	Path    string              `json:"path,omitempty"`
	FireAt  *float64            `json:"fire_at,omitempty"`
	Deleted *bool               `json:"deleted,omitempty"`
	Parent  string              `json:"parent,omitempty"`
	Child   string              `json:"child,omitempty"`
	N       *int                `json:"n,omitempty"`
	Now     *float64            `json:"now,omitempty"`
	Limit   int                 `json:"limit,omitempty"`
	// Content digests (version 2): what a commit wrote, what a load or a
	// delivery read.
	DataDigest   string   `json:"data_digest,omitempty"`
	TraceDigest  string   `json:"trace_digest,omitempty"`
	SpawnDigests []string `json:"spawn_digests,omitempty"`
	BodyDigest   string   `json:"body_digest,omitempty"`
}

type emit struct {
	Event  string `json:"event"`
	Target string `json:"target"`
	Digest string `json:"digest,omitempty"`
}

type timerOp struct {
	Path   string   `json:"path"`
	FireAt *float64 `json:"fire_at,omitempty"`
	Cancel bool     `json:"cancel,omitempty"`
}

type dueTimer struct {
	Exe    string  `json:"exe"`
	Path   string  `json:"path"`
	FireAt float64 `json:"fire_at"`
}

// maxErrLen bounds an error's text in the history.
const maxErrLen = 300

func ptr[T any](v T) *T { return &v }

// HistoryStats counts what a history holds so far.
type HistoryStats struct {
	Ops       int64 // op lines
	Commits   int64 // acknowledged commits
	Unknown   int64 // ops with an unknown outcome
	Conflicts int64 // lost compare-and-swaps
	Errors    int64 // other failed ops
}

// Stats returns the counts so far.
func (w *History) Stats() HistoryStats {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.stats
}

// Observe writes op as one line (loadgen.Observer).
func (w *History) Observe(op *loadgen.Op) {
	l := w.line(op)
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.via != nil {
		l.Via = w.via(op)
	}
	w.ops++
	w.stats.Ops++
	switch l.Outcome {
	case "ok":
		if op.Kind == loadgen.OpCommit {
			w.stats.Commits++
		}
	case "info":
		w.stats.Unknown++
		if op.Kind == loadgen.OpCommit {
			w.acks.observeInfo(infoCommit{shard: l.Shard, t0: l.T0, t1: l.T1})
		}
	default:
		if l.Conflict {
			w.stats.Conflicts++
		} else {
			w.stats.Errors++
		}
	}
	bucket := -1
	if op.ExecutionID != "" && w.m != nil {
		bucket = w.m.Bucket(op.ExecutionID)
	}
	w.corr.observe(corrOp{shard: l.Shard, bucket: bucket, t0: l.T0, t1: l.T1,
		bad: l.Outcome == "info" || (l.Outcome == "fail" && !l.Conflict), ok: l.Outcome == "ok",
		info: l.Outcome == "info" && op.Kind == loadgen.OpCommit})
	w.write(l)
}

// ScheduleStarted says when the fault schedule's clock began, as an
// offset from the history's start: no fault injects before offset plus
// its planned time, which tells the online corroboration (history_corr.go)
// when an op can no longer be overlapped by a fault not yet reported.
// Until it is called no op is decided.
func (w *History) ScheduleStarted(offset time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.corr.start(int64(offset))
}

func (w *History) line(op *loadgen.Op) *opLine {
	l := &opLine{Type: "op", ID: op.ID, Kind: string(op.Kind), Src: op.Src, Exe: op.ExecutionID,
		T0: w.since(op.Invoke), T1: w.since(op.Complete), Outcome: op.Outcome(), Cause: op.Cause}
	l.Shard = w.shardOf(op)
	if op.Err != nil {
		l.Err = op.Err.Error()
		if len(l.Err) > maxErrLen {
			l.Err = l.Err[:maxErrLen] + "..."
		}
		l.SQLState = sqlState(op.Err)
		l.Class = errorClass(op.Err, l.SQLState)
	}
	ok := op.Err == nil
	switch op.Kind {
	case loadgen.OpLoad:
		l.Event = op.EventID
		if ok {
			l.Exists, l.Proc = ptr(op.Exists), ptr(op.Processed)
			if op.Exists {
				l.Version, l.Writer = ptr(op.Version), ptr(op.Writer)
				l.DataDigest = op.ReadDigest
			}
		}
	case loadgen.OpCommit:
		c := op.Commit
		l.Event, l.Input = op.EventID, op.Input
		l.Exp, l.Fast = ptr(c.Exe.Version), ptr(c.Fast())
		switch {
		case ok:
			l.New = ptr(c.Exe.Version + 1)
		case errors.Is(op.Err, loadgen.ErrConflict):
			l.Conflict = true
			if op.Found >= 0 {
				l.Found = ptr(op.Found)
			}
		}
		for _, e := range c.Emits {
			d, _ := loadgen.ContentDigest([]byte(e.Event))
			l.Emits = append(l.Emits, emit{Event: e.ID, Target: e.TargetID, Digest: d})
		}
		if len(c.Timers) > 0 {
			ts := make([]timerOp, len(c.Timers))
			for i, t := range c.Timers {
				ts[i] = timerOp{Path: t.Path, Cancel: t.Cancel}
				if !t.Cancel {
					ts[i].FireAt = ptr(t.FireAt)
				}
			}
			l.Timers = ts
		}
		for _, s := range c.Spawns {
			l.Spawns = append(l.Spawns, s.ChildID)
			l.SpawnDigests = append(l.SpawnDigests, loadgen.SpawnDigest(s))
		}
		l.Trace = c.Trace != ""
		if l.Trace {
			l.TraceDigest, _ = loadgen.ContentDigest([]byte(c.Trace))
		}
		l.DataDigest, l.BodyDigest = loadgen.StateDigest(c.Exe.State), op.BodyDigest
		armed := c.Exe.State.Timers
		if armed == nil {
			armed = map[string]float64{}
		}
		l.Step, l.Active, l.Armed = ptr(c.Exe.State.Step), c.Exe.State.Active, &armed
		l.Seq, l.Origin = op.Seq, op.Origin
		if op.Path != "" {
			l.Path, l.FireAt = op.Path, ptr(op.FireAt)
		}
	case loadgen.OpReadOutbox, loadgen.OpReadSpawns:
		l.N = ptr(op.N)
	case loadgen.OpAckOutbox:
		l.Seq, l.Event, l.Target = op.Seq, op.EventID, op.Target
	case loadgen.OpAckSpawn:
		l.Seq, l.Parent, l.Child = op.Seq, op.ExecutionID, op.Child
	case loadgen.OpDueTimers:
		l.Now, l.Limit = ptr(op.Now), op.Limit
		if ok {
			ts := make([]dueTimer, len(op.Timers))
			for i, t := range op.Timers {
				ts[i] = dueTimer{Exe: t.ExecutionID, Path: t.Path, FireAt: t.FireAt}
			}
			l.Timers = ts
		}
	case loadgen.OpDeleteTimer:
		l.Path, l.FireAt = op.Path, ptr(op.FireAt)
		if ok {
			l.Deleted = ptr(op.Deleted)
		}
	}
	return l
}

// shardOf names the shard an op went to: its execution's, or its seq's.
func (w *History) shardOf(op *loadgen.Op) string {
	if w.m == nil {
		return ""
	}
	if op.ExecutionID != "" {
		return w.m.Lookup(op.ExecutionID).Name
	}
	if op.Seq > 0 {
		if s, err := w.m.ShardForSeq(op.Seq); err == nil {
			return s.Name
		}
	}
	return ""
}

// errorClass classifies an op's error for counting: "conflict", the
// SQLSTATE's class (its first two characters: "57", "08", ...), or, for an
// error the server never answered with, "timeout", "canceled" or
// "connection".
func errorClass(err error, state string) string {
	switch {
	case errors.Is(err, loadgen.ErrConflict):
		return "conflict"
	case len(state) >= 2:
		return state[:2]
	case errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	case errors.Is(err, context.Canceled):
		return "canceled"
	}
	return "connection"
}

// sqlState returns the SQLSTATE an error carries, "" if none.
func sqlState(err error) string {
	var se interface{ SQLState() string }
	if errors.As(err, &se) {
		return se.SQLState()
	}
	return ""
}

// faultLine is one fault line (verify/HISTORY.md, "fault").
type faultLine struct {
	Type     string         `json:"type"`
	ID       string         `json:"id"`
	Kind     Kind           `json:"kind"`
	Phase    string         `json:"phase"`
	T        int64          `json:"t"`
	Shard    string         `json:"shard,omitempty"`
	Landed   bool           `json:"landed"`
	Evidence map[string]any `json:"evidence,omitempty"`
	Err      string         `json:"err,omitempty"`
}

// Fault writes a fault's inject or heal line.
func (w *History) Fault(e Event) {
	l := faultLine{Type: "fault", ID: e.ID, Kind: e.Kind, Phase: e.Phase, T: int64(e.T), Shard: e.Shard,
		Landed: e.Landed, Evidence: e.Evidence, Err: e.Err}
	if e.Kind == KindLostAck {
		l.Evidence = w.rebaseDrops(e.Evidence)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	// A fault lands at its injection (a crash) or shows it only when
	// healed (a lost acknowledgement: the dropped replies are counted
	// then): each fault counts once, at its first landed line.
	if e.Landed && !w.landed[e.ID] {
		w.landed[e.ID] = true
		w.faults[e.Kind]++
	}
	if e.Kind == KindLostAck {
		for _, d := range committedDrops(l.Evidence) {
			w.acks.observeDrop(pendingAck{fault: e.ID, shard: e.Shard, sent: w.since(d.Sent), at: w.since(d.At)})
		}
	}
	w.corr.fault(e, l.Evidence, w.since(time.Now()))
	w.write(l)
}

// rebaseDrops returns a lost-ack's evidence with its dropped replies'
// times put on the history's clock: the history's start plus their
// monotonic time since (the relay reads them on the monotonic clock). The
// verifier subtracts the header's started_at from them and compares the
// result with the ops' t0 and t1, which are monotonic offsets from the
// same start, within 250 ms; the wall clock may not keep pace with the
// monotonic one (on this project's 2-core machine it ran 0.5 % fast and
// jumped 1.5 s and 26 s past it within three minutes), which would leave
// every later lost-ack uncorroborated. Times without a monotonic reading,
// and zero ones, are kept. ev itself is not changed (faults.json and the
// log share it).
func (w *History) rebaseDrops(ev map[string]any) map[string]any {
	drops, ok := ev["replies"].([]DroppedReply)
	if !ok || len(drops) == 0 {
		return ev
	}
	out := maps.Clone(ev)
	re := make([]DroppedReply, len(drops))
	for i, d := range drops {
		if !d.Sent.IsZero() {
			d.Sent = w.start.Add(d.Sent.Sub(w.start))
		}
		if !d.At.IsZero() {
			d.At = w.start.Add(d.At.Sub(w.start))
		}
		re[i] = d
	}
	out["replies"] = re
	return out
}

// Landed counts the faults that landed so far, by kind (the writer's own
// reading of their evidence; the verifier recounts).
func (w *History) Landed() map[Kind]int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return maps.Clone(w.faults)
}

// Corroborated counts the faults that landed so far by kind as the
// verifier will count them, a lower bound of its count: a kind the
// verifier credits by evidence alone as Landed; a lost-ack only once one
// of its committed dropped replies is matched to an unknown-outcome
// commit op of its shard around the drop (history_acks.go); the other
// kinds the ops corroborate only once their evidence says they landed as
// the verifier reads it and an op credits them by the verifier's rule
// (history_corr.go).
// An extended run's goal waits on these counts.
func (w *History) Corroborated() map[Kind]int {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := maps.Clone(w.faults)
	delete(out, KindLostAck)
	for k := range corrRules {
		delete(out, k)
	}
	if n := len(w.acks.confirmed); n > 0 {
		out[KindLostAck] = n
	}
	for id, k := range w.corr.credited {
		if w.corr.landed[id] {
			out[k]++
		}
	}
	return out
}

// End writes the last line; Close still has to be called.
func (w *History) End(e End) {
	w.mu.Lock()
	defer w.mu.Unlock()
	e.Ops = w.ops
	e.Faults = w.faults
	line := struct {
		Type string `json:"type"`
		T    int64  `json:"t"`
		End
	}{"end", w.since(time.Now()), e}
	w.write(line)
}

// Close flushes and closes the file; it returns the first error of any
// write.
func (w *History) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	err := w.err
	if ferr := w.buf.Flush(); err == nil && ferr != nil {
		err = fmt.Errorf("history: %w", ferr)
	}
	if w.comp != nil {
		if cerr := w.comp.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("history: %w", cerr)
		}
	}
	if cerr := w.f.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("history: %w", cerr)
	}
	return err
}
