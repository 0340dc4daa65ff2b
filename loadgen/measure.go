package loadgen

import (
	"context"
	"errors"
	"strings"
	"sync"
	"time"

	hdr "github.com/HdrHistogram/hdrhistogram-go"
)

// Kind is an operation kind with its own latency histogram.
type Kind int

// Operation kinds.
const (
	// KindOp is a whole worker operation: load → transition → commit,
	// retries included, from its intended start.
	KindOp Kind = iota
	// KindLoad is one LoadForEvent call.
	KindLoad
	// KindFast is one state-only (fast path) Commit call.
	KindFast
	// KindComplex is one Commit call with emits, timers, spawns or trace.
	KindComplex
	// KindRedelivery is a redelivered event's dedupe check.
	KindRedelivery
	// KindRelay is one outbox delivery: load, commit, ack.
	KindRelay
	// KindOutboxLag is the time from an emit's commit to its delivery.
	KindOutboxLag
	// KindTimerFire is one timer fire: load, commit, delete.
	KindTimerFire
	// KindTimerLag is the time from a timer's fire_at to its fire.
	KindTimerLag
	numKinds
)

var kindNames = [numKinds]string{"op", "load", "fast_commit", "complex_commit", "redelivery", "relay_delivery", "outbox_lag", "timer_fire", "timer_lag"}

// KindCommit names the derived histogram of every commit (fast + complex).
const KindCommit = "commit"

// String is the kind's name in reports ("op", "fast_commit", ...).
func (k Kind) String() string {
	if k >= 0 && k < numKinds {
		return kindNames[k]
	}
	return "kind?"
}

// Outcome counters.
const (
	OutcomeOK         = "ok"          // operations that completed as intended
	OutcomeConflict   = "conflict"    // CAS conflicts seen (each attempt)
	OutcomeRetry      = "retry"       // reloads after a conflict
	OutcomeGaveUp     = "gave_up"     // operations that hit the retry cap
	OutcomeDedupeHit  = "dedupe_hit"  // redelivered events recognised as processed
	OutcomeDedupeMiss = "dedupe_miss" // redelivered events NOT recognised (a store bug)
	OutcomeError      = "error"       // operations that failed with an error
	OutcomeCanceled   = "canceled"    // operations cut by the end of the run (latency recorded as a lower bound)
)

// Histogram range: 1 µs .. 60 s with 3 significant digits; values are µs.
const (
	histMin    = 1
	histMax    = 60_000_000
	histDigits = 3
)

func newHist() *hdr.Histogram { return hdr.New(histMin, histMax, histDigits) }

func recordUS(h *hdr.Histogram, d time.Duration) {
	_ = h.RecordValue(clampUS(d)) // in range by construction
}

// clampUS is d in µs, clamped to the histograms' range.
func clampUS(d time.Duration) int64 {
	return min(max(d.Microseconds(), histMin), histMax)
}

// pendingSize is how many values a recorder holds before it records them
// into its histograms.
const pendingSize = 256

// pendingValue is a value held for one of a recorder's histograms: the
// window (hist < 0), a kind (hist < numKinds) or a shard's KindOp
// (numKinds + shard).
type pendingValue struct {
	hist int32
	us   int64
}

// recorder collects one stripe of workers' measurements. HDR histograms are
// not safe for concurrent use: each recorder has its own, behind a mutex
// that is contended only by the workers of its stripe and by the collector
// once a second; the collector merges them.
//
// Values are held in pending and recorded into the histograms 256 at a
// time (and before every read: a window taken, the result merged): a
// histogram's counts (~180 KB) are cold by the next operation at a low
// rate, so recording each value at once cost a cache miss or more per
// histogram, five histograms per operation (a tenth of the engine's CPU
// at 600 ops/s); a batch touches a few lines of each.
type recorder struct {
	mu       sync.Mutex
	pending  []pendingValue
	kinds    [numKinds]*hdr.Histogram // measured period only, lazily made
	shards   []*hdr.Histogram         // KindOp per shard, measured period
	shardOps []int64
	counts   map[string]int64 // outcomes, measured period
	classes  map[string]int64 // errors by class, measured period
	samples  []string         // first error messages

	// current 1 s window (warm-up included)
	window                      *hdr.Histogram
	wOps, wConflicts, wErrors   int64
	wDropped, wLate, wDedupeHit int64
}

func newRecorder(shards int) *recorder {
	return &recorder{
		shards:   make([]*hdr.Histogram, shards),
		shardOps: make([]int64, shards),
		counts:   map[string]int64{},
		classes:  map[string]int64{},
		window:   newHist(),
		pending:  make([]pendingValue, 0, pendingSize),
	}
}

// holdLocked holds d for histogram hist (see pendingValue), recording
// the held values when the buffer is full.
func (r *recorder) holdLocked(hist int, d time.Duration) {
	r.pending = append(r.pending, pendingValue{int32(hist), clampUS(d)})
	if len(r.pending) == cap(r.pending) {
		r.flushLocked()
	}
}

// flushLocked records the held values into their histograms.
func (r *recorder) flushLocked() {
	for _, v := range r.pending {
		var h *hdr.Histogram
		switch k := int(v.hist); {
		case k < 0:
			h = r.window
		case k < int(numKinds):
			if r.kinds[k] == nil {
				r.kinds[k] = newHist()
			}
			h = r.kinds[k]
		default:
			if r.shards[k-int(numKinds)] == nil {
				r.shards[k-int(numKinds)] = newHist()
			}
			h = r.shards[k-int(numKinds)]
		}
		_ = h.RecordValue(v.us) // in range by construction
	}
	r.pending = r.pending[:0]
}

const maxErrorSamples = 10

func (r *recorder) recordKind(measured bool, k Kind, d time.Duration) {
	if !measured {
		return
	}
	r.mu.Lock()
	r.kindLocked(k, d)
	r.mu.Unlock()
}

func (r *recorder) kindLocked(k Kind, d time.Duration) {
	r.holdLocked(int(k), d)
}

// recordOp records a finished worker operation.
func (r *recorder) recordOp(measured bool, shard int, d time.Duration, outcome string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.wOps++
	// A canceled operation (cut by the end of the run) is recorded with
	// its time until cancellation, a lower bound of its latency: leaving
	// it out would hide the worst of an overload's queue.
	r.holdLocked(-1, d)
	if outcome == OutcomeError || outcome == OutcomeDedupeMiss {
		r.wErrors++
	}
	if outcome == OutcomeDedupeHit {
		r.wDedupeHit++
	}
	if !measured {
		return
	}
	r.counts[outcome]++
	r.kindLocked(KindOp, d)
	if shard >= 0 && shard < len(r.shards) {
		r.holdLocked(int(numKinds)+shard, d)
		r.shardOps[shard]++
	}
}

// count adds n to an outcome counter (conflicts and retries count in the
// window too).
func (r *recorder) count(measured bool, outcome string, n int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch outcome {
	case OutcomeConflict:
		r.wConflicts += n
	case "dropped":
		r.wDropped += n
	case "late":
		r.wLate += n
	}
	if measured {
		r.counts[outcome] += n
	}
}

// recordError counts err by class (measured period) and keeps a sample.
func (r *recorder) recordError(measured bool, err error) {
	if !measured {
		return
	}
	cls := ErrorClass(err)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.classes[cls]++
	if len(r.samples) < maxErrorSamples {
		r.samples = append(r.samples, cls+": "+err.Error())
	}
}

// ErrorClass names the class of err: "outcome_unknown" for a commit that
// may have been applied, "sqlstate_XX" (the SQLSTATE class: 40, 57, ...)
// when the error carries a SQLSTATE, else "timeout", "canceled",
// "conflict", "missing", "dedupe", "connection" or "other".
func ErrorClass(err error) string {
	var st interface{ SQLState() string }
	switch {
	case err == nil:
		return ""
	case errors.Is(err, ErrOutcomeUnknown):
		return "outcome_unknown"
	case errors.As(err, &st) && len(st.SQLState()) >= 2:
		return "sqlstate_" + st.SQLState()[:2]
	case errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	case errors.Is(err, context.Canceled):
		return "canceled"
	case errors.Is(err, ErrConflict):
		return "conflict"
	case errors.Is(err, errMissing):
		return "missing"
	case errors.Is(err, errDedupeMiss):
		return "dedupe"
	case strings.Contains(err.Error(), "conn closed") || strings.Contains(err.Error(), "connection refused") ||
		strings.Contains(err.Error(), "broken pipe") || strings.Contains(err.Error(), "connection reset"):
		return "connection"
	}
	return "other"
}

var (
	errMissing    = errors.New("execution does not exist")
	errDedupeMiss = errors.New("redelivered event was not recognised as processed")
)

// windowSnap is what the collector takes from a recorder each second.
type windowSnap struct {
	ops, conflicts, errors, dropped, late, dedupeHit int64
}

// takeWindow merges r's window into into and resets it.
func (r *recorder) takeWindow(into *hdr.Histogram, s *windowSnap) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.flushLocked()
	// An empty window (a stripe no executor used this second: most of
	// them at a low rate) is left alone: merging and resetting walk the
	// whole counts array (about 180 KB) for nothing.
	if r.window.TotalCount() > 0 {
		into.Merge(r.window)
		r.window.Reset()
	}
	s.ops += r.wOps
	s.conflicts += r.wConflicts
	s.errors += r.wErrors
	s.dropped += r.wDropped
	s.late += r.wLate
	s.dedupeHit += r.wDedupeHit
	r.wOps, r.wConflicts, r.wErrors, r.wDropped, r.wLate, r.wDedupeHit = 0, 0, 0, 0, 0, 0
}

// totals is the merge of every recorder's measured-period figures.
type totals struct {
	kinds    [numKinds]*hdr.Histogram
	shards   []*hdr.Histogram
	shardOps []int64
	counts   map[string]int64
	classes  map[string]int64
	samples  []string
}

func mergeRecorders(shards int, rs []*recorder) *totals {
	t := &totals{shards: make([]*hdr.Histogram, shards), shardOps: make([]int64, shards),
		counts: map[string]int64{}, classes: map[string]int64{}}
	for k := range t.kinds {
		t.kinds[k] = newHist()
	}
	for i := range t.shards {
		t.shards[i] = newHist()
	}
	for _, r := range rs {
		r.mu.Lock()
		r.flushLocked()
		for k, h := range r.kinds {
			if h != nil {
				t.kinds[k].Merge(h)
			}
		}
		for i, h := range r.shards {
			if h != nil {
				t.shards[i].Merge(h)
			}
			t.shardOps[i] += r.shardOps[i]
		}
		for k, v := range r.counts {
			t.counts[k] += v
		}
		for k, v := range r.classes {
			t.classes[k] += v
		}
		for _, s := range r.samples {
			if len(t.samples) < maxErrorSamples {
				t.samples = append(t.samples, s)
			}
		}
		r.mu.Unlock()
	}
	return t
}
