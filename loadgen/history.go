package loadgen

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"sync/atomic"
	"time"
)

// Observer receives every operation of a run when it completes: the
// history a chaos run records and then verifies (package chaos writes it,
// package verify checks it). Observe is called from many goroutines at
// once, on the hot path: it must be safe for concurrent use and must not
// block for long. The *Op is the observer's to keep.
//
// Every effect of a commit carries the committing op's ID — in the
// execution's data (State.Op), in each outbox event ("op"), in the trace
// entry and in each spawn's context — so that an operation whose outcome
// was unknown can be resolved from the final state.
type Observer interface {
	Observe(op *Op)
}

// OpKind names what an Op did.
type OpKind string

// Operation kinds.
const (
	OpLoad        OpKind = "load"         // LoadForEvent
	OpCommit      OpKind = "commit"       // one Commit attempt
	OpReadOutbox  OpKind = "read_outbox"  // a relay's PendingOutbox poll
	OpAckOutbox   OpKind = "ack_outbox"   // AckOutbox
	OpReadSpawns  OpKind = "read_spawns"  // a relay's PendingSpawns poll
	OpAckSpawn    OpKind = "ack_spawn"    // AckSpawn
	OpDueTimers   OpKind = "due_timers"   // the sweeper's DueTimers poll
	OpDeleteTimer OpKind = "delete_timer" // DeleteTimer
)

// Causes: why a load or commit ran.
const (
	CauseSetup     = "setup"     // the setup phase creating executions
	CauseWorker    = "worker"    // a worker's step
	CauseRedeliver = "redeliver" // a worker re-sending an event it had applied
	CauseOutbox    = "outbox"    // the outbox relay delivering an event
	CauseTimer     = "timer"     // the sweeper firing a timer
	// CauseReadback is a load right after a commit whose outcome is
	// unknown: it reads the execution back so that the history says which
	// commit wrote the version (the verifier resolves the unknown commit
	// from it instead of leaving it undecided).
	CauseReadback = "readback"
)

// Op is one operation of a run, as an Observer sees it.
type Op struct {
	// ID is unique in the run: RUN/SRC/N.
	ID   string
	Kind OpKind
	// Src is who ran it: "w0".."wN" (workers), "setup", "relay",
	// "sweeper".
	Src string
	// ExecutionID is the execution the op is about ("" for relay polls).
	ExecutionID string
	// Invoke and Complete carry monotonic clock readings.
	Invoke, Complete time.Time
	// Err is nil when the op succeeded (a lost compare-and-swap is an
	// error wrapping ErrConflict).
	Err error
	// Unknown reports that the op failed after its request may have
	// reached the server, so it may have taken effect: for a commit, the
	// target said so (ErrOutcomeUnknown: the commit had been sent); for
	// the other writes (acks, timer deletes) any error counts, since they
	// are not classified.
	Unknown bool
	// Cause is why a load or commit ran (Cause* constants).
	Cause string

	// EventID is, for a load, the event asked about and, for a commit,
	// the event recorded in the dedupe ledger.
	EventID string
	// Load results.
	Exists, Processed bool
	Version           int    // the version read
	Writer            string // State.Op of the version read

	// Commit is what a commit attempt wrote: Commit.Exe.Version is the
	// version it expected (the CAS token), Commit.Exe.State.Op is ID.
	Commit *Commit
	// Input is what the commit applies: a worker step's event id, the
	// delivered event's id, or the timer fire "timer:PATH:FIRE_AT". A
	// correct client applies an input to an execution at most once.
	Input string
	// Found is the version a lost compare-and-swap found (when the target
	// reports it, see ConflictError).
	Found int

	// Seq is the outbox row (delivery commits and their acks) or spawn
	// intent (acks) concerned.
	Seq int64
	// Origin is the op id that emitted a delivered event; Target its
	// receiving execution (acks of outbox rows).
	Origin, Target string
	// Path and FireAt name the timer of a fire commit or a DeleteTimer.
	Path   string
	FireAt float64
	// Deleted is DeleteTimer's answer.
	Deleted bool
	// Child is the spawned execution of an AckSpawn.
	Child string
	// N is the number of rows a relay poll returned.
	N int
	// Now and Timers are a DueTimers poll's argument and answer; Limit
	// its row limit (an answer shorter than Limit holds every due timer).
	Now    float64
	Timers []TimerEntry
	Limit  int

	// ReadDigest is, for a load that found the execution, StateDigest of
	// the state it read; BodyDigest is, for an outbox delivery commit,
	// ContentDigest of the event document the relay read from the row.
	ReadDigest, BodyDigest string
}

// ContentDigest is the content digest of a JSON document (verify's
// HISTORY.md, "Content digests"): the first 16 bytes, in hex, of the
// SHA-256 of its canonical form — members sorted by key, no whitespace,
// numbers as written, no HTML escaping. It is what a history records of
// every document a commit writes or a read returns, so that the verifier
// can tell a row that holds exactly what its writer wrote from one that
// was rewritten in place.
func ContentDigest(doc []byte) (string, error) {
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return "", fmt.Errorf("content digest: %w", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return "", errors.New("content digest: data after the document")
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return "", fmt.Errorf("content digest: %w", err)
	}
	sum := sha256.Sum256(bytes.TrimSuffix(buf.Bytes(), []byte("\n")))
	return hex.EncodeToString(sum[:16]), nil
}

// StateDigest is the content digest of a workload state as the store
// holds it: the JSON of s (its members step, active, last, op, timers,
// payload; the empty optional ones omitted).
func StateDigest(s State) string {
	b, err := json.Marshal(s)
	if err != nil {
		return ""
	}
	d, _ := ContentDigest(b)
	return d
}

// SpawnDigest is the content digest of a spawn intent: of the document
// {"context":CONTEXT,"root_path":ROOT}.
func SpawnDigest(sp Spawn) string {
	b, err := json.Marshal(struct {
		Context  json.RawMessage `json:"context"`
		RootPath string          `json:"root_path"`
	}{json.RawMessage(sp.Context), sp.RootPath})
	if err != nil {
		return ""
	}
	d, _ := ContentDigest(b)
	return d
}

// readBack loads execution id again after a commit whose outcome is
// unknown, recorded with cause CauseReadback, so the history names the
// version's writer. Its result changes nothing else.
func (r *runner) readBack(ctx context.Context, src string, ids *opIDs, id, event string) {
	if r.o.Observer == nil || ctx.Err() != nil {
		return
	}
	op := r.startLoad(src, id, event, CauseReadback, ids)
	exe, done, err := r.t.LoadForEvent(ctx, id, event)
	r.endLoad(op, exe, done, err)
}

// Outcome classifies the op the way a history does: "ok", "fail" (it
// definitely had no effect) or "info" (unknown).
func (op *Op) Outcome() string {
	switch {
	case op.Err == nil:
		return "ok"
	case op.Unknown:
		return "info"
	}
	return "fail"
}

// ConflictError may be returned (wrapped) by a Target's Commit to report
// the version the lost compare-and-swap found. It matches ErrConflict.
type ConflictError struct {
	// Found is the version stored when the commit lost.
	Found int
	// Err is the target's own error.
	Err error
}

func (e *ConflictError) Error() string { return e.Err.Error() }

// Unwrap returns the target's error.
func (e *ConflictError) Unwrap() error { return e.Err }

// Is makes errors.Is(err, ErrConflict) true.
func (e *ConflictError) Is(target error) bool { return target == ErrConflict }

// foundVersion returns the version a conflict error reports, or -1.
func foundVersion(err error) int {
	var ce *ConflictError
	if errors.As(err, &ce) {
		return ce.Found
	}
	return -1
}

// opIDs hands out op ids of one source that several goroutines share.
type opIDs struct {
	prefix string
	n      atomic.Int64
}

func newOpIDs(run, src string) *opIDs { return &opIDs{prefix: run + "/" + src + "/"} }

func (g *opIDs) next() string { return g.prefix + strconv.FormatInt(g.n.Add(1), 10) }

// observing returns a started op when the run records a history, else nil:
// every recording helper accepts a nil op and then does nothing.
func (r *runner) observing(kind OpKind, src, id string) *Op {
	if r.o.Observer == nil {
		return nil
	}
	return &Op{Kind: kind, Src: src, ExecutionID: id, Invoke: time.Now()}
}

// done completes op with err and hands it to the observer.
func (r *runner) done(op *Op, err error) {
	if op == nil {
		return
	}
	op.Complete = time.Now()
	op.Err = err
	switch {
	case err == nil:
	case op.Kind == OpCommit:
		op.Unknown = errors.Is(err, ErrOutcomeUnknown)
		if errors.Is(err, ErrConflict) {
			op.Found = foundVersion(err)
		}
	case op.Kind == OpAckOutbox || op.Kind == OpAckSpawn || op.Kind == OpDeleteTimer:
		op.Unknown = true
	}
	r.o.Observer.Observe(op)
}
