package proxy

import (
	"errors"
	"math"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/pgshard/pgshard/proxy/internal/pgwire"
	"github.com/pgshard/pgshard/proxy/route"
)

// Per-shard statistics, kept once and read by both the admin console
// (SHOW STATS, SHOW SHARDS, SHOW ROUTES) and the Prometheus collector
// (metrics.go), so that the two always agree.
//
// Cost on the hot path: a transaction (one hold of a backend connection,
// from acquire to release) adds two clock reads, one histogram observation
// and four atomic additions; its statements and bytes are counted on the
// connection (owned by one session at a time, so plain fields) and added
// to the shard's totals when the connection is released.

// shardStats are one shard's counters.
type shardStats struct {
	// xacts counts holds of a backend connection (a transaction, an
	// implicit one, a fan-out's part, the proxy's own statements),
	// PgBouncer's xact_count; xactNanos is their total duration.
	xacts, xactNanos atomic.Uint64
	// queries counts statements sent (Execute and Query messages).
	queries atomic.Uint64
	// bytesIn are the bytes received from the shard, bytesOut those sent.
	bytesIn, bytesOut atomic.Uint64
	// waits counts acquisitions that waited for a connection; waitNanos
	// is the total time they waited.
	waits, waitNanos atomic.Uint64
	// routes counts routing decisions for this shard, by kind.
	routes [numRouteKinds]atomic.Uint64

	xactHist prometheus.Histogram
	waitHist prometheus.Histogram

	errMu sync.Mutex
	errs  map[string]uint64 // errors the clients got for this shard, by SQLSTATE class
}

// Histogram buckets (seconds) of transaction and pool-wait durations.
var (
	xactBuckets = prometheus.ExponentialBuckets(0.0001, 2, 18) // 100µs .. 13s
	waitBuckets = prometheus.ExponentialBuckets(0.0001, 2, 18)
)

func newShardStats(shard string) *shardStats {
	labels := prometheus.Labels{"shard": shard}
	return &shardStats{
		xactHist: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:        "pgshard_proxy_transaction_duration_seconds",
			Help:        "Time a backend connection of the shard was held for one transaction (acquire to release).",
			ConstLabels: labels, Buckets: xactBuckets}),
		waitHist: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:        "pgshard_proxy_pool_wait_seconds",
			Help:        "Time sessions waited for a backend connection of the shard (only waits are observed).",
			ConstLabels: labels, Buckets: waitBuckets}),
		errs: map[string]uint64{},
	}
}

// noteError counts an error a client got for this shard, by the class
// (first two characters) of its SQLSTATE.
func (st *shardStats) noteError(code string) {
	if len(code) < 2 {
		code = "XX"
	}
	class := code[:2]
	st.errMu.Lock()
	st.errs[class]++
	st.errMu.Unlock()
}

// noteErr counts err by its SQLSTATE (XX000 when it has none).
func (st *shardStats) noteErr(err error) {
	var e interface{ SQLState() string }
	if errors.As(err, &e) {
		st.noteError(e.SQLState())
		return
	}
	st.noteError(pgwire.CodeInternalError)
}

// errors returns a copy of the error counts by class.
func (st *shardStats) errorCounts() map[string]uint64 {
	st.errMu.Lock()
	defer st.errMu.Unlock()
	out := make(map[string]uint64, len(st.errs))
	for k, v := range st.errs {
		out[k] = v
	}
	return out
}

// errorSummary is the error counts as "08:3 23:1", classes in order.
func (st *shardStats) errorSummary() string {
	m := st.errorCounts()
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

// quantile estimates the q-quantile (0..1) of a histogram from its
// buckets, interpolating linearly inside the bucket that holds it (as
// Prometheus's histogram_quantile does). 0 when it has no samples.
func quantile(h prometheus.Histogram, q float64) time.Duration {
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

// routeKind classifies a routing decision (SHOW ROUTES, metrics).
type routeKind uint8

const (
	routeKeyed   routeKind = iota // a key in the SQL or the Bind parameters chose the shard
	routeHinted                   // a pgshard hint (comment or SET LOCAL) chose it
	routeAny                      // no sharded data: any shard (or the default one) will do
	routeFanout                   // every shard (merged read, DDL)
	routeRefused                  // refused instead of routed
	numRouteKinds
)

var routeKindNames = [numRouteKinds]string{"keyed", "hinted", "any", "fanout", "refused"}

func (k routeKind) String() string { return routeKindNames[k] }

// routeLogSize is how many recent decisions SHOW ROUTES keeps.
const routeLogSize = 128

// keyedSample: one keyed decision in keyedSample is recorded in the log
// (they are the common case, and the log is for seeing what else
// happens); every other kind is recorded.
const keyedSample = 64

// routeEntry is one recorded decision.
type routeEntry struct {
	at     time.Time
	kind   routeKind
	shard  string // "" for fan-outs and refusals without a shard
	sql    string
	reason string
}

// routeLog is a ring of recent routing decisions, plus counts of the
// decisions that name no shard (refusals before a shard was known).
type routeLog struct {
	noShard    [numRouteKinds]atomic.Uint64
	mu         sync.Mutex
	ring       [routeLogSize]routeEntry
	next, size int
}

// record adds a decision to the ring.
func (l *routeLog) record(kind routeKind, shard, sql, reason string) {
	if len(sql) > 200 {
		sql = sql[:200] + "…"
	}
	l.mu.Lock()
	l.ring[l.next] = routeEntry{at: time.Now(), kind: kind, shard: shard, sql: sql, reason: reason}
	l.next = (l.next + 1) % routeLogSize
	if l.size < routeLogSize {
		l.size++
	}
	l.mu.Unlock()
}

// recent returns the recorded decisions, newest first.
func (l *routeLog) recent() []routeEntry {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]routeEntry, 0, l.size)
	for i := 1; i <= l.size; i++ {
		out = append(out, l.ring[(l.next-i+routeLogSize)%routeLogSize])
	}
	return out
}

// noteRoute counts and records a routing decision: shard is the chosen
// shard's index in srv (-1 for none), fan a fan-out, refused an error.
func (srv *Server) noteRoute(kind routeKind, shard int, sql, reason string) {
	name := ""
	if shard >= 0 && shard < len(srv.pools) {
		n := srv.pools[shard].stats.routes[kind].Add(1)
		if kind == routeKeyed && n%keyedSample != 1 {
			return // keyed decisions are sampled into the log
		}
		name = srv.pools[shard].shard.Name
	} else if kind == routeFanout {
		for _, p := range srv.pools {
			p.stats.routes[routeFanout].Add(1)
			p.stats.queries.Add(1)
		}
	} else {
		srv.routes.noShard[kind].Add(1)
	}
	srv.routes.record(kind, name, sql, reason)
}

// ---- pool figures ----

// poolFigures is a snapshot of one shard pool (SHOW POOLS, metrics).
type poolFigures struct {
	// active: connections held by a session; idle: in the pool; login:
	// being opened; waiting: sessions waiting for one (pool full, or the
	// shard paused); maxWait: how long the oldest waiter has waited.
	active, idle, login, waiting int
	maxWait                      time.Duration
	open                         int
}

// figures returns the pool's current figures.
func (p *shardPool) figures() poolFigures {
	now := time.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	f := poolFigures{idle: p.nidle, open: p.open}
	f.active = len(p.conns) - p.nidle
	f.login = max(p.open-len(p.conns), 0)
	f.waiting = len(p.waiters) + int(p.pauseWaiters)
	oldest := p.oldestPauseWaiter
	for _, w := range p.waiters {
		if oldest.IsZero() || w.since.Before(oldest) {
			oldest = w.since
		}
	}
	if !oldest.IsZero() {
		f.maxWait = now.Sub(oldest)
	}
	return f
}

// snapshotConns returns the pool's open connections with their state
// (SHOW SERVERS), in a stable order.
func (p *shardPool) snapshotConns() []connInfo {
	p.mu.Lock()
	idle := make(map[*bconn]bool, p.nidle)
	for _, l := range p.idle {
		for _, c := range l {
			idle[c] = true
		}
	}
	out := make([]connInfo, 0, len(p.conns))
	for c := range p.conns {
		ci := connInfo{pid: c.pid, opened: c.opened, idle: idle[c], local: c.nc.LocalAddr(), remote: c.nc.RemoteAddr(), tls: c.tls, gen: c.gen}
		if !ci.idle {
			ci.since = c.usedSince.Load()
		}
		out = append(out, ci)
	}
	p.mu.Unlock()
	slices.SortFunc(out, func(a, b connInfo) int { return a.opened.Compare(b.opened) })
	return out
}

// connInfo describes one backend connection for SHOW SERVERS.
type connInfo struct {
	pid           uint32
	opened        time.Time
	since         int64 // unix nanos the current use began (0 = idle)
	idle          bool
	tls           bool
	gen           uint64
	local, remote interface{ String() string }
}

// nanosToSeconds converts a nanosecond total to seconds (for metrics).
func nanosToSeconds(n uint64) float64 { return float64(n) / 1e9 }

// avgMicros is total/count in microseconds (0 without samples).
func avgMicros(totalNanos, count uint64) uint64 {
	if count == 0 {
		return 0
	}
	return uint64(math.Round(float64(totalNanos) / float64(count) / 1e3))
}

// ---- averages over the last period (SHOW STATS's avg_* columns) ----

// statsPeriod is the period SHOW STATS's averages cover (PgBouncer's
// stats_period is 60 s; shorter here, so a change shows sooner).
const statsPeriod = 15 * time.Second

// statsAvg are the averages of the last complete period: per second for
// counts and bytes, per transaction (or wait) for times, in microseconds.
type statsAvg struct {
	xactsPerSec, queriesPerSec, recvPerSec, sentPerSec uint64
	xactMicros, waitMicros                             uint64
}

// statsSnap is the counters at the start of a period.
type statsSnap struct {
	at                                 time.Time
	xacts, xactNanos, queries, in, out uint64
	waits, waitNanos                   uint64
}

func (st *shardStats) snap(now time.Time) statsSnap {
	return statsSnap{at: now, xacts: st.xacts.Load(), xactNanos: st.xactNanos.Load(), queries: st.queries.Load(),
		in: st.bytesIn.Load(), out: st.bytesOut.Load(), waits: st.waits.Load(), waitNanos: st.waitNanos.Load()}
}

// rollStats closes the averaging period when it is over (called every
// second by the reaper).
func (p *shardPool) rollStats(now time.Time) {
	p.avgMu.Lock()
	defer p.avgMu.Unlock()
	if p.lastSnap.at.IsZero() {
		p.lastSnap = p.stats.snap(now)
		return
	}
	el := now.Sub(p.lastSnap.at)
	if el < statsPeriod {
		return
	}
	cur := p.stats.snap(now)
	prev := p.lastSnap
	secs := el.Seconds()
	per := func(a, b uint64) uint64 { return uint64(math.Round(float64(a-b) / secs)) }
	p.avg.Store(&statsAvg{
		xactsPerSec: per(cur.xacts, prev.xacts), queriesPerSec: per(cur.queries, prev.queries),
		recvPerSec: per(cur.in, prev.in), sentPerSec: per(cur.out, prev.out),
		xactMicros: avgMicros(cur.xactNanos-prev.xactNanos, cur.xacts-prev.xacts),
		waitMicros: avgMicros(cur.waitNanos-prev.waitNanos, cur.waits-prev.waits),
	})
	p.lastSnap = cur
}

// averages returns the last period's averages (zeros before the first
// period ended).
func (p *shardPool) averages() statsAvg {
	if a := p.avg.Load(); a != nil {
		return *a
	}
	return statsAvg{}
}

// noteDecision classifies and records one routing decision of the
// planner (target): the statement's text, the analyzer's destination and
// what the planner made of it.
func (srv *Server) noteDecision(sql string, d route.Dest, shard int, fan bool, e *pgwire.Error, setLocalHint bool) {
	kind := routeAny
	switch {
	case e != nil:
		kind, shard = routeRefused, -1
		if d.Kind == route.DestShard {
			shard = d.Shard
		}
		srv.noteRoute(kind, shard, sql, e.Message)
		return
	case fan:
		kind, shard = routeFanout, -1
	case setLocalHint || strings.HasPrefix(d.Reason, "hint pgshard:"):
		kind = routeHinted
	case d.Kind == route.DestShard:
		kind = routeKeyed
	}
	srv.noteRoute(kind, shard, sql, d.Reason)
}
