package loadgen

import (
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"time"

	hdr "github.com/HdrHistogram/hdrhistogram-go"
)

// ResultVersion is the version of the JSON result format.
const ResultVersion = 1

// Result is everything one run measured. Latencies are in milliseconds.
// Only the measured period counts (warm-up excluded) except in Windows,
// which cover the whole run and mark warm-up windows.
type Result struct {
	Version int `json:"version"`
	// Label names the run in comparisons (default: the target).
	Label string `json:"label"`
	// Target is direct, pgbouncer, proxy (or the name of a test target).
	Target string `json:"target"`
	// Shards names the shards, as the Locator knows them.
	Shards []string `json:"shards"`
	// Options are the run's effective settings.
	Options Options `json:"options"`
	// Start is when the run (warm-up included) started.
	Start time.Time `json:"start"`
	// SetupSeconds is how long creating the executions took.
	SetupSeconds float64 `json:"setup_seconds"`
	// WarmupSeconds and MeasuredSeconds split the run.
	WarmupSeconds   float64 `json:"warmup_seconds"`
	MeasuredSeconds float64 `json:"measured_seconds"`
	// Interrupted is set when the run was cut short (Ctrl-C).
	Interrupted bool `json:"interrupted"`
	// Ops is the number of worker operations measured (every outcome).
	Ops int64 `json:"ops"`
	// Throughput is operations completed (ok + dedupe hits) during the
	// measured period, per second.
	Throughput float64 `json:"throughput"`
	// CommitRate is successful commits per second: the workers' (fast and
	// complex) and the relays' (outbox deliveries, timer fires).
	CommitRate float64 `json:"commit_rate"`
	// Kinds has a latency summary per operation kind.
	Kinds map[string]*KindStats `json:"kinds"`
	// Outcomes counts operations and events by outcome.
	Outcomes map[string]int64 `json:"outcomes"`
	// Errors counts errors by class (SQLSTATE class, timeout, ...).
	Errors map[string]int64 `json:"errors"`
	// ErrorSamples holds the first few error messages.
	ErrorSamples []string `json:"error_samples,omitempty"`
	// PerShard has the operations and latency of each shard.
	PerShard []ShardStats `json:"per_shard"`
	// HottestShare is the busiest shard's share of operations.
	HottestShare float64 `json:"hottest_share"`
	// Windows is throughput and latency per 1 s window.
	Windows []Window `json:"windows"`
	// OpenLoop has the open-loop dispatcher's figures (nil in closed loop).
	OpenLoop *OpenLoopStats `json:"open_loop,omitempty"`
	// Relays has the background relays' counters.
	Relays RelayStats `json:"relays"`
	// SelfCheck says whether the generator or the machine was saturated.
	SelfCheck SelfCheck `json:"self_check"`
	// Quiesce is the heal-and-quiesce phase's outcome (nil without one).
	Quiesce *QuiesceStats `json:"quiesce,omitempty"`
	// Parts lists the part runs a merged result was made of (see
	// MergeResults); empty for a run.
	Parts []PartRun `json:"parts,omitempty"`
	// Freezes are the range moves' freezes within the run, read from the
	// shard map's catalog at its end (the command does it when its config
	// names a catalog; none without one). The reports mark them on the
	// timelines.
	Freezes []Freeze `json:"freezes,omitempty"`
	// Histograms are the run's HDR histograms themselves, so that the
	// results of parts can be merged without loss.
	Histograms *Histograms `json:"histograms,omitempty"`

	hists map[string]*hdr.Histogram // for .hgrm files; not serialized
}

// Histograms are a run's HDR histograms (µs, 1 µs – 60 s, 3 significant
// digits), each in HdrHistogram's V2 compressed encoding (base64): the
// format every HdrHistogram implementation reads.
type Histograms struct {
	// Kinds has one histogram per measured operation kind (the derived
	// "commit" kind is rebuilt from fast_commit and complex_commit).
	Kinds map[string]string `json:"kinds"`
	// Shards has the op histogram of each shard, in Result.Shards order
	// ("" for a shard without operations).
	Shards []string `json:"shards"`
	// Windows has the op histogram of each window, in Result.Windows order.
	Windows []string `json:"windows"`
	// Lag is the open-loop dispatcher's lag (measured period).
	Lag string `json:"dispatch_lag,omitempty"`
}

// PartRun is one part of a merged result.
type PartRun struct {
	Part  Part      `json:"part"`
	Label string    `json:"label"`
	Start time.Time `json:"start"`
	Ops   int64     `json:"ops"`
}

func encodeHist(h *hdr.Histogram) (string, error) {
	if h == nil || h.TotalCount() == 0 {
		return "", nil
	}
	if s, ok := encodeV2(h); ok {
		return s, nil
	}
	b, err := h.Encode(hdr.V2CompressedEncodingCookieBase)
	if err != nil {
		return "", fmt.Errorf("encode histogram: %w", err)
	}
	return string(b), nil
}

// decodeHist decodes what encodeHist wrote ("" is an empty histogram)
// into a histogram with the engine's range and precision.
func decodeHist(s string) (*hdr.Histogram, error) {
	h := newHist()
	if s == "" {
		return h, nil
	}
	d, err := hdr.Decode([]byte(s))
	if err != nil {
		return nil, fmt.Errorf("decode histogram: %w", err)
	}
	if dropped := h.Merge(d); dropped > 0 {
		return nil, fmt.Errorf("decode histogram: %d values outside 1 µs – 60 s", dropped)
	}
	return h, nil
}

// KindStats summarizes one operation kind's latency.
type KindStats struct {
	Count  int64   `json:"count"`
	Mean   float64 `json:"mean_ms"`
	Min    float64 `json:"min_ms"`
	P50    float64 `json:"p50_ms"`
	P90    float64 `json:"p90_ms"`
	P99    float64 `json:"p99_ms"`
	P999   float64 `json:"p999_ms"`
	Max    float64 `json:"max_ms"`
	Stddev float64 `json:"stddev_ms"`
	// Spectrum is the percentile distribution (as in a .hgrm file).
	Spectrum []SpectrumPoint `json:"spectrum"`
}

// SpectrumPoint is one point of a percentile distribution.
type SpectrumPoint struct {
	Percentile float64 `json:"p"`
	Ms         float64 `json:"ms"`
}

// Percentile returns the latency at percentile p (0..100) by linear
// interpolation in the spectrum; exact for the stored summary points.
func (k *KindStats) Percentile(p float64) float64 {
	switch p {
	case 50:
		return k.P50
	case 90:
		return k.P90
	case 99:
		return k.P99
	case 99.9:
		return k.P999
	case 100:
		return k.Max
	}
	var prev SpectrumPoint
	for _, s := range k.Spectrum {
		if s.Percentile >= p {
			if s.Percentile == prev.Percentile {
				return s.Ms
			}
			f := (p - prev.Percentile) / (s.Percentile - prev.Percentile)
			return prev.Ms + f*(s.Ms-prev.Ms)
		}
		prev = s
	}
	return k.Max
}

// ShardStats is one shard's share of the measured operations.
type ShardStats struct {
	Name  string  `json:"name"`
	Ops   int64   `json:"ops"`
	Share float64 `json:"share"`
	P50   float64 `json:"p50_ms"`
	P99   float64 `json:"p99_ms"`
}

// Window is one second of the run.
type Window struct {
	// T is the window's end, in seconds since the run's start.
	T      float64 `json:"t"`
	Warmup bool    `json:"warmup,omitempty"`
	// Rate is operations finished in the window, per second.
	Rate      float64 `json:"ops_per_s"`
	P50       float64 `json:"p50_ms"`
	P99       float64 `json:"p99_ms"`
	Max       float64 `json:"max_ms"`
	Conflicts int64   `json:"conflicts"`
	Errors    int64   `json:"errors"`
	Dropped   int64   `json:"dropped,omitempty"`
	Late      int64   `json:"late,omitempty"`
	InFlight  int64   `json:"in_flight"`
	// Self-check samples for the window.
	GenCPU   float64 `json:"gen_cpu"`              // generator's share of the machine's CPU (0..1)
	HostCPU  float64 `json:"host_cpu"`             // machine CPU busy (0..1)
	Load1    float64 `json:"load1"`                // 1-minute load average
	SchedP99 float64 `json:"sched_p99_ms"`         // Go scheduler latency p99 in the window
	LagP99   float64 `json:"lag_p99_ms,omitempty"` // open-loop dispatcher lag p99
}

// OpenLoopStats are the open-loop dispatcher's figures (measured period).
type OpenLoopStats struct {
	// Rate is the offered arrival rate (operations per second).
	Rate float64 `json:"rate"`
	// Intended is how many operations the schedule intended.
	Intended int64 `json:"intended"`
	// Started is how many of them a worker started.
	Started int64 `json:"started"`
	// Late counts operations started more than LateThresholdMs after
	// their intended time.
	Late            int64   `json:"late"`
	LateThresholdMs float64 `json:"late_threshold_ms"`
	// Dropped counts operations not started because MaxOutstanding
	// operations were already in flight.
	Dropped        int64 `json:"dropped"`
	MaxOutstanding int   `json:"max_outstanding"`
	// Lag is how late the dispatcher itself woke up (generator saturation).
	LagP50 float64 `json:"dispatch_lag_p50_ms"`
	LagP99 float64 `json:"dispatch_lag_p99_ms"`
	LagMax float64 `json:"dispatch_lag_max_ms"`
}

// RelayStats counts the background relays' work (measured period).
type RelayStats struct {
	OutboxDelivered int64 `json:"outbox_delivered"`
	OutboxDeduped   int64 `json:"outbox_deduped"`
	SpawnsAcked     int64 `json:"spawns_acked"`
	TimersFired     int64 `json:"timers_fired"`
	TimersDeduped   int64 `json:"timers_deduped"`
	Errors          int64 `json:"errors"`
	// OutboxBacklogStart is what was pending when the run started (rows
	// an earlier run left; the relay delivers them first, in seq order).
	OutboxBacklogStart int `json:"outbox_backlog_start"`
	// OutboxBacklog and TimerBacklog are what was pending at the end.
	OutboxBacklog int `json:"outbox_backlog"`
	TimerBacklog  int `json:"timer_backlog"`
}

// QuiesceStats is how the heal-and-quiesce phase ended.
type QuiesceStats struct {
	// OK reports that nothing was left: no outbox row, spawn intent or
	// armed timer.
	OK bool `json:"ok"`
	// Seconds is how long the phase took, Heal included.
	Seconds float64 `json:"seconds"`
	// HealError is Heal's error, "" if none.
	HealError string `json:"heal_error,omitempty"`
	// OutboxLeft, SpawnsLeft and TimersLeft are what was still pending
	// when the phase ended (-1: could not be counted).
	OutboxLeft int `json:"outbox_left"`
	SpawnsLeft int `json:"spawns_left"`
	TimersLeft int `json:"timers_left"`
}

// SelfCheck is the generator watching itself.
type SelfCheck struct {
	CPUs int `json:"cpus"`
	// GenCPU is the generator process's mean share of all CPUs (0..1).
	GenCPU float64 `json:"gen_cpu"`
	// GenCPUSeconds is the generator process's CPU time (user + system,
	// relays and recording included) over the measured period.
	GenCPUSeconds float64 `json:"gen_cpu_seconds"`
	// GenCPUPerOpUS is GenCPUSeconds per measured worker operation, in µs
	// (0 when no operation was measured).
	GenCPUPerOpUS float64 `json:"gen_cpu_us_per_op"`
	// HostCPU is the machine's mean CPU busy share (0..1).
	HostCPU float64 `json:"host_cpu"`
	// Load1Max is the highest 1-minute load average seen.
	Load1Max float64 `json:"load1_max"`
	// SchedP99 and SchedMax are the Go scheduler's latency (time a
	// runnable goroutine waited to run) over the measured period, ms.
	SchedP99 float64 `json:"sched_p99_ms"`
	SchedMax float64 `json:"sched_max_ms"`
	// Warnings say what may have limited the run other than the database.
	Warnings []string `json:"warnings"`
}

func msOf(us int64) float64 { return float64(us) / 1000 }

// kindStats summarizes h (values in µs).
func kindStats(h *hdr.Histogram) *KindStats {
	k := &KindStats{Count: h.TotalCount()}
	if k.Count == 0 {
		return k
	}
	k.Mean = h.Mean() / 1000
	k.Stddev = h.StdDev() / 1000
	k.Min = msOf(h.Min())
	k.Max = msOf(h.Max())
	k.P50 = msOf(h.ValueAtQuantile(50))
	k.P90 = msOf(h.ValueAtQuantile(90))
	k.P99 = msOf(h.ValueAtQuantile(99))
	k.P999 = msOf(h.ValueAtQuantile(99.9))
	for _, p := range spectrumPercentiles {
		k.Spectrum = append(k.Spectrum, SpectrumPoint{Percentile: p, Ms: msOf(h.ValueAtQuantile(p))})
	}
	return k
}

// spectrumPercentiles are the points stored per kind: dense towards the tail.
var spectrumPercentiles = []float64{0, 10, 20, 30, 40, 50, 55, 60, 65, 70, 75, 80, 85, 87.5, 90, 92.5, 95,
	96.875, 97.5, 98.4375, 99, 99.21875, 99.5, 99.609375, 99.8, 99.9, 99.95, 99.97, 99.99, 99.995, 99.999, 100}

// KindNames returns the kinds present in r, in a stable order.
func (r *Result) KindNames() []string {
	order := map[string]int{}
	for i, n := range kindNames {
		order[n] = 2 * i
	}
	order[KindCommit] = 2*int(KindComplex) + 1 // right after the two commit kinds
	var names []string
	for n, k := range r.Kinds {
		if k.Count > 0 {
			names = append(names, n)
		}
	}
	sort.Slice(names, func(i, j int) bool {
		oi, oj := order[names[i]], order[names[j]]
		if oi != oj {
			return oi < oj
		}
		return names[i] < names[j]
	})
	return names
}

// ErrorCount is the number of errors of every class (relays included).
func (r *Result) ErrorCount() int64 {
	var n int64
	for _, v := range r.Errors {
		n += v
	}
	return n
}

// ReadResult reads a result.json file.
func ReadResult(path string) (*Result, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var r Result
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if r.Version != ResultVersion {
		return nil, fmt.Errorf("%s: result version %d, this build reads %d", path, r.Version, ResultVersion)
	}
	return &r, nil
}

// Freeze is one freeze of a bucket-range move: buckets Lo..Hi moving
// From → To, writes held from Started (the mover's clock; a flip's, the
// catalog server's) for DurationMS, then flipped or, Abandoned, undone (Why: deadline, catch_up or
// error, as the journal records it). When the catalog's journal records
// only the move's flip (the end of its last, successful freeze: the
// generation it wrote; journals written before the freezes were
// recorded), Started is the flip and DurationMS 0, and AtFlip says so.
// StartS is Started in seconds since the run's start (the timelines'
// axis), negative for a freeze during the setup.
type Freeze struct {
	Move       int64     `json:"move"`
	Lo         int       `json:"lo"`
	Hi         int       `json:"hi"`
	From       string    `json:"from"`
	To         string    `json:"to"`
	Started    time.Time `json:"started"`
	DurationMS float64   `json:"duration_ms"`
	StartS     float64   `json:"start_s"`
	AtFlip     bool      `json:"at_flip,omitempty"`
	Abandoned  bool      `json:"abandoned,omitempty"`
	Why        string    `json:"why,omitempty"`
}

// Label is the freeze's range, shards and duration, for charts and text.
func (f Freeze) Label() string {
	s := fmt.Sprintf("%d-%d %s→%s", f.Lo, f.Hi, f.From, f.To)
	switch {
	case f.AtFlip:
		s += " flip"
	case f.Abandoned && f.Why != "":
		s += fmt.Sprintf(" %.0f ms, abandoned (%s)", f.DurationMS, f.Why)
	case f.Abandoned:
		s += fmt.Sprintf(" %.0f ms, abandoned", f.DurationMS)
	default:
		s += fmt.Sprintf(" %.0f ms", f.DurationMS)
	}
	return s
}

// Short is the freeze's label on a chart: range, destination, duration.
func (f Freeze) Short() string {
	s := fmt.Sprintf("%d-%d→%s", f.Lo, f.Hi, f.To)
	switch {
	case f.AtFlip:
		return s + " flip"
	case f.Abandoned:
		return s + fmt.Sprintf(" %.0fms ✗", f.DurationMS)
	}
	return s + fmt.Sprintf(" %.0fms", f.DurationMS)
}
