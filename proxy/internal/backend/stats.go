package backend

import (
	"errors"
	"math"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/pgshard/pgshard/proxy/internal/pgwire"
)

// Per-shard statistics, kept once and read by both the admin console
// (SHOW STATS, SHOW SHARDS, SHOW ROUTES) and the Prometheus collector
// (the proxy's metrics.go), so that the two always agree.
//
// Cost on the hot path: a transaction (one hold of a backend connection,
// from acquire to release) adds two clock reads, one histogram observation
// and four atomic additions; its statements and bytes are counted on the
// connection (owned by one session at a time, so plain fields) and added
// to the shard's totals when the connection is released.

// Stats are one shard's counters.
type Stats struct {
	// xacts counts holds of a backend connection (a transaction, an
	// implicit one, a fan-out's part, the proxy's own statements),
	// PgBouncer's xact_count; xactNanos is their total duration.
	Xacts, XactNanos atomic.Uint64
	// queries counts statements sent (Execute and Query messages).
	Queries atomic.Uint64
	// bytesIn are the bytes received from the shard, bytesOut those sent.
	BytesIn, BytesOut atomic.Uint64
	// waits counts acquisitions that waited for a connection; waitNanos
	// is the total time they waited.
	Waits, WaitNanos atomic.Uint64
	// routes counts routing decisions for this shard, by kind.
	Routes [NumRouteKinds]atomic.Uint64

	XactHist prometheus.Histogram
	WaitHist prometheus.Histogram

	errMu sync.Mutex
	errs  map[string]uint64 // errors the clients got for this shard, by SQLSTATE class

	// SHOW STATS's averages over the last period (Roll, Averages).
	avgMu    sync.Mutex
	lastSnap statsSnap
	avg      atomic.Pointer[Averages]
}

// Histogram buckets (seconds) of transaction and pool-wait durations.
var (
	xactBuckets = prometheus.ExponentialBuckets(0.0001, 2, 18) // 100µs .. 13s
	waitBuckets = prometheus.ExponentialBuckets(0.0001, 2, 18)
)

func newShardStats(shard string) *Stats {
	labels := prometheus.Labels{"shard": shard}
	return &Stats{
		XactHist: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:        "pgshard_proxy_transaction_duration_seconds",
			Help:        "Time a backend connection of the shard was held for one transaction (acquire to release).",
			ConstLabels: labels, Buckets: xactBuckets}),
		WaitHist: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:        "pgshard_proxy_pool_wait_seconds",
			Help:        "Time sessions waited for a backend connection of the shard (only waits are observed).",
			ConstLabels: labels, Buckets: waitBuckets}),
		errs: map[string]uint64{},
	}
}

// endUse ends the current use of c (if any) in the shard's statistics.
func (st *Stats) endUse(c *Conn) {
	since := c.UsedSince.Swap(0)
	if since == 0 {
		return
	}
	d := time.Duration(time.Now().UnixNano() - since)
	st.Xacts.Add(1)
	st.XactNanos.Add(uint64(d))
	st.XactHist.Observe(d.Seconds())
	if c.Queries > 0 {
		st.Queries.Add(c.Queries)
		c.Queries = 0
	}
	if c.sent > 0 {
		st.BytesOut.Add(c.sent)
		c.sent = 0
	}
	if in := c.Reader.BytesRead() - c.recvMark; in > 0 {
		st.BytesIn.Add(in)
		c.recvMark = c.Reader.BytesRead()
	}
}

// NoteError counts an error a client got for this shard, by the class
// (first two characters) of its SQLSTATE.
func (st *Stats) NoteError(code string) {
	if len(code) < 2 {
		code = "XX"
	}
	class := code[:2]
	st.errMu.Lock()
	st.errs[class]++
	st.errMu.Unlock()
}

// noteErr counts err by its SQLSTATE (XX000 when it has none).
func (st *Stats) noteErr(err error) {
	var e interface{ SQLState() string }
	if errors.As(err, &e) {
		st.NoteError(e.SQLState())
		return
	}
	st.NoteError(pgwire.CodeInternalError)
}

// errors returns a copy of the error counts by class.
func (st *Stats) ErrorCounts() map[string]uint64 {
	st.errMu.Lock()
	defer st.errMu.Unlock()
	out := make(map[string]uint64, len(st.errs))
	for k, v := range st.errs {
		out[k] = v
	}
	return out
}

// ErrorSummary is the error counts as "08:3 23:1", classes in order.
func (st *Stats) ErrorSummary() string {
	m := st.ErrorCounts()
	classes := make([]string, 0, len(m))
	for k := range m {
		classes = append(classes, k)
	}
	sort.Strings(classes)
	var b []byte
	for i, k := range classes {
		if i > 0 {
			b = append(b, ' ')
		}
		b = append(b, k...)
		b = append(b, ':')
		b = appendUint(b, m[k])
	}
	return string(b)
}

func appendUint(b []byte, v uint64) []byte {
	var tmp [20]byte
	i := len(tmp)
	for {
		i--
		tmp[i] = byte('0' + v%10)
		v /= 10
		if v == 0 {
			break
		}
	}
	return append(b, tmp[i:]...)
}

// Quantile estimates the q-quantile (0..1) of a histogram from its
// buckets, interpolating linearly inside the bucket that holds it (as
// Prometheus's histogram_quantile does). 0 when it has no samples.
func Quantile(h prometheus.Histogram, q float64) time.Duration {
	var m dto.Metric
	if err := h.Write(&m); err != nil || m.Histogram == nil {
		return 0
	}
	total := m.Histogram.GetSampleCount()
	if total == 0 {
		return 0
	}
	rank := q * float64(total)
	lower, prevCount := 0.0, uint64(0)
	for _, b := range m.Histogram.GetBucket() {
		upper, count := b.GetUpperBound(), b.GetCumulativeCount()
		if float64(count) >= rank {
			if count == prevCount {
				return time.Duration(upper * float64(time.Second))
			}
			frac := (rank - float64(prevCount)) / float64(count-prevCount)
			return time.Duration((lower + (upper-lower)*frac) * float64(time.Second))
		}
		lower, prevCount = upper, count
	}
	// Above the last bucket: report its bound (the estimate cannot say more).
	bs := m.Histogram.GetBucket()
	if len(bs) == 0 {
		return 0
	}
	return time.Duration(bs[len(bs)-1].GetUpperBound() * float64(time.Second))
}

// ---- routing decisions ----

// RouteKind classifies a routing decision (SHOW ROUTES, metrics).
type RouteKind uint8

const (
	RouteKeyed   RouteKind = iota // a key in the SQL or the Bind parameters chose the shard
	RouteHinted                   // a pgshard hint (comment or SET LOCAL) chose it
	RouteAny                      // no sharded data: any shard (or the default one) will do
	RouteFanout                   // every shard (merged read, DDL)
	RouteRefused                  // refused instead of routed
	NumRouteKinds
)

var routeKindNames = [NumRouteKinds]string{"keyed", "hinted", "any", "fanout", "refused"}

func (k RouteKind) String() string { return routeKindNames[k] }

// ---- pool figures ----

// Figures is a snapshot of one shard pool (SHOW POOLS, metrics).
type Figures struct {
	// active: connections held by a session; idle: in the pool; login:
	// being opened; waiting: sessions waiting for one (pool full, or the
	// shard paused); maxWait: how long the oldest waiter has waited.
	Active, Idle, Login, Waiting int
	MaxWait                      time.Duration
	Open                         int
}

// Figures returns the pool's current figures.
func (p *Pool) Figures() Figures {
	now := time.Now()
	held, oldest := p.Ops.pauseWaiting()
	p.mu.Lock()
	defer p.mu.Unlock()
	f := Figures{Idle: p.nidle, Open: p.open}
	f.Active = len(p.conns) - p.nidle
	f.Login = max(p.open-len(p.conns), 0)
	f.Waiting = len(p.waiters) + held
	for _, w := range p.waiters {
		if oldest.IsZero() || w.since.Before(oldest) {
			oldest = w.since
		}
	}
	if !oldest.IsZero() {
		f.MaxWait = now.Sub(oldest)
	}
	return f
}

// InUse reports how many connections are held or being opened.
func (p *Pool) InUse() int {
	f := p.Figures()
	return f.Active + f.Login
}

// SnapshotConns returns the pool's open connections with their state
// (SHOW SERVERS), in a stable order.
func (p *Pool) SnapshotConns() []ConnInfo {
	p.mu.Lock()
	idle := make(map[*Conn]bool, p.nidle)
	for _, l := range p.idle {
		for _, c := range l {
			idle[c] = true
		}
	}
	out := make([]ConnInfo, 0, len(p.conns))
	for c := range p.conns {
		ci := ConnInfo{PID: c.PID, Opened: c.opened, Idle: idle[c], Local: c.NetConn.LocalAddr(), Remote: c.NetConn.RemoteAddr(), TLS: c.TLS, Gen: c.gen}
		if !ci.Idle {
			ci.Since = c.UsedSince.Load()
		}
		out = append(out, ci)
	}
	p.mu.Unlock()
	slices.SortFunc(out, func(a, b ConnInfo) int { return a.Opened.Compare(b.Opened) })
	return out
}

// ConnInfo describes one backend connection for SHOW SERVERS.
type ConnInfo struct {
	PID           uint32
	Opened        time.Time
	Since         int64 // unix nanos the current use began (0 = idle)
	Idle          bool
	TLS           bool
	Gen           uint64
	Local, Remote interface{ String() string }
}

// nanosToSeconds converts a nanosecond total to seconds (for metrics).
func nanosToSeconds(n uint64) float64 { return float64(n) / 1e9 }

// AvgMicros is total/count in microseconds (0 without samples).
func AvgMicros(totalNanos, count uint64) uint64 {
	if count == 0 {
		return 0
	}
	return uint64(math.Round(float64(totalNanos) / float64(count) / 1e3))
}

// ---- averages over the last period (SHOW STATS's avg_* columns) ----

// statsPeriod is the period SHOW STATS's averages cover (PgBouncer's
// stats_period is 60 s; shorter here, so a change shows sooner).
const statsPeriod = 15 * time.Second

// Averages are the averages of the last complete period: per second for
// counts and bytes, per transaction (or wait) for times, in microseconds.
type Averages struct {
	XactsPerSec, QueriesPerSec, RecvPerSec, SentPerSec uint64
	XactMicros, WaitMicros                             uint64
}

// statsSnap is the counters at the start of a period.
type statsSnap struct {
	at                                 time.Time
	xacts, xactNanos, queries, in, out uint64
	waits, waitNanos                   uint64
}

func (st *Stats) snap(now time.Time) statsSnap {
	return statsSnap{at: now, xacts: st.Xacts.Load(), xactNanos: st.XactNanos.Load(), queries: st.Queries.Load(),
		in: st.BytesIn.Load(), out: st.BytesOut.Load(), waits: st.Waits.Load(), waitNanos: st.WaitNanos.Load()}
}

// Roll closes the averaging period when it is over (called every second
// by the reaper).
func (st *Stats) Roll(now time.Time) {
	st.avgMu.Lock()
	defer st.avgMu.Unlock()
	if st.lastSnap.at.IsZero() {
		st.lastSnap = st.snap(now)
		return
	}
	el := now.Sub(st.lastSnap.at)
	if el < statsPeriod {
		return
	}
	cur := st.snap(now)
	prev := st.lastSnap
	secs := el.Seconds()
	per := func(a, b uint64) uint64 { return uint64(math.Round(float64(a-b) / secs)) }
	st.avg.Store(&Averages{
		XactsPerSec: per(cur.xacts, prev.xacts), QueriesPerSec: per(cur.queries, prev.queries),
		RecvPerSec: per(cur.in, prev.in), SentPerSec: per(cur.out, prev.out),
		XactMicros: AvgMicros(cur.xactNanos-prev.xactNanos, cur.xacts-prev.xacts),
		WaitMicros: AvgMicros(cur.waitNanos-prev.waitNanos, cur.waits-prev.waits),
	})
	st.lastSnap = cur
}

// Averages returns the last period's averages (zeros before the first
// period ended).
func (st *Stats) Averages() Averages {
	if a := st.avg.Load(); a != nil {
		return *a
	}
	return Averages{}
}
