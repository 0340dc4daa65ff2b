package backend

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgshard/pgshard/proxy/internal/pgwire"
)

// PgBouncer-aware back-pressure. A shard reached through its PgBouncer
// hides the shard's queue from the proxy: when PgBouncer's server pool is
// full, a client's query waits inside PgBouncer (cl_waiting) until a
// server is free or query_wait_timeout (120 s by default) fails it. The
// monitor (health.go) reads PgBouncer's admin console every
// Env.PgBouncer.PollInterval:
//
//	SHOW POOLS  → cl_active, cl_waiting, sv_active, sv_idle, sv_used, sv_login, maxwait(+_us)
//	SHOW STATS  → total_xact_count, total_query_count, avg_xact_time, avg_wait_time
//
// summed over the pools of the shard's database (every user: other
// clients of the same PgBouncer count too). While cl_waiting ≥
// MaxWaiting or maxwait ≥ MaxWait, new transactions for the shard fail at
// once with 53300 naming it and the figures; the first reading below both
// thresholds lets them through again. The readings are in SHOW SHARDS and
// the metrics (pgshard_proxy_pgbouncer_*).

// BouncerFigures is one reading of a shard's PgBouncer.
type BouncerFigures struct {
	At  time.Time
	Err string // "" when the reading succeeded
	// From SHOW POOLS, summed over the database's pools (maxWait: the max).
	ClActive, ClWaiting, SvActive, SvIdle, svUsed, svLogin int
	MaxWait                                                time.Duration
	// From SHOW STATS for the database.
	XactCount, queryCount uint64
	avgXact, avgWait      time.Duration
}

// bouncerWatch reads one shard's PgBouncer for its pool's monitor and
// applies the back-pressure rule to the pool's operator state. It holds
// what that needs: the shard's name, its PgBouncer's address and parsed
// DSN, whether the pool goes through it, and the pool's environment and
// ops (where the readings and the refusal go). Only the monitor goroutine
// uses it.
type bouncerWatch struct {
	shard     string
	addr      string
	base      *pgconn.Config // the pool's (dialer.base); read-only
	viaPooler bool
	env       *atomic.Pointer[Env]
	ops       *poolOps
	// pc is the connection to the admin console, kept between readings.
	pc *pgconn.PgConn
}

func (b *bouncerWatch) Env() *Env { return b.env.Load() }

// enabled reports whether the shard is reached through a PgBouncer whose
// admin console the config lets the proxy read.
func (b *bouncerWatch) enabled() bool {
	return b.viaPooler && b.Env().PgBouncer.AdminUser != ""
}

// poll takes one reading and applies the back-pressure rule.
func (b *bouncerWatch) poll(ctx context.Context) {
	cfg := b.Env().PgBouncer
	timeout := min(max(cfg.PollInterval, time.Second), 5*time.Second)
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	f, err := b.read(ctx)
	if err != nil {
		if ctx.Err() != nil && errors.Is(ctx.Err(), context.Canceled) {
			return // stopping
		}
		prev := b.ops.Bouncer.Load()
		if prev == nil || prev.Err == "" {
			b.Env().Log.Warn("cannot read the shard's PgBouncer admin console", "shard", b.shard, "addr", b.addr, "err", ShortErr(err))
		}
		f = &BouncerFigures{At: time.Now(), Err: ShortErr(err)}
		b.ops.Bouncer.Store(f)
		// No reading: keep the last decision (a PgBouncer that is down
		// fails its clients by itself; the health probe covers the shard).
		return
	}
	b.ops.Bouncer.Store(f)
	over := cfg.MaxWaiting > 0 && f.ClWaiting >= cfg.MaxWaiting || cfg.MaxWait > 0 && f.MaxWait >= cfg.MaxWait
	if b.ops.Retired.Load() {
		return
	}
	if over {
		e := &pgwire.Error{Code: pgwire.CodeTooManyConnections,
			Message: fmt.Sprintf("shard %q is overloaded: its PgBouncer has %d clients waiting for a server, the oldest for %s (thresholds: %s)",
				b.shard, f.ClWaiting, f.MaxWait.Round(time.Millisecond), thresholds(cfg)),
			Hint: "The transaction was not started. Retry later; transactions for other shards are not affected."}
		if b.ops.Refuse.Swap(e) == nil {
			b.Env().Log.Warn("shard overloaded behind PgBouncer: failing its new transactions fast", "shard", b.shard,
				"cl_waiting", f.ClWaiting, "maxwait", f.MaxWait.String())
		}
		return
	}
	if b.ops.Refuse.Swap(nil) != nil {
		b.Env().Log.Info("shard's PgBouncer no longer overloaded", "shard", b.shard, "cl_waiting", f.ClWaiting, "maxwait", f.MaxWait.String())
	}
}

func thresholds(c BouncerConfig) string {
	var s string
	if c.MaxWaiting > 0 {
		s = fmt.Sprintf("cl_waiting ≥ %d", c.MaxWaiting)
	}
	if c.MaxWait > 0 {
		if s != "" {
			s += " or "
		}
		s += fmt.Sprintf("maxwait ≥ %s", c.MaxWait)
	}
	return s
}

// read reads SHOW POOLS and SHOW STATS for the shard's database.
func (b *bouncerWatch) read(ctx context.Context) (*BouncerFigures, error) {
	if b.pc == nil || b.pc.IsClosed() {
		pc, err := b.connect(ctx)
		if err != nil {
			return nil, err
		}
		b.pc = pc
	}
	pc := b.pc
	var results []*pgconn.Result
	for _, q := range []string{"SHOW POOLS", "SHOW STATS"} { // one command per query on PgBouncer's console
		r, err := pc.Exec(ctx, q).ReadAll()
		if err == nil && len(r) != 1 {
			err = fmt.Errorf("PgBouncer answered %d results to %s", len(r), q)
		}
		if err != nil {
			_ = pc.Close(context.Background())
			b.pc = nil
			return nil, err
		}
		results = append(results, r[0])
	}
	db := b.base.Database
	f := &BouncerFigures{At: time.Now()}
	for _, row := range rowsOf(results[0]) {
		if row["database"] != db {
			continue
		}
		f.ClActive += atoi(row["cl_active"])
		f.ClWaiting += atoi(row["cl_waiting"])
		f.SvActive += atoi(row["sv_active"])
		f.SvIdle += atoi(row["sv_idle"])
		f.svUsed += atoi(row["sv_used"])
		f.svLogin += atoi(row["sv_login"])
		w := time.Duration(atoi(row["maxwait"]))*time.Second + time.Duration(atoi(row["maxwait_us"]))*time.Microsecond
		f.MaxWait = max(f.MaxWait, w)
	}
	for _, row := range rowsOf(results[1]) {
		if row["database"] != db {
			continue
		}
		f.XactCount = uint64(atoi(row["total_xact_count"]))
		f.queryCount = uint64(atoi(row["total_query_count"]))
		f.avgXact = time.Duration(atoi(row["avg_xact_time"])) * time.Microsecond
		f.avgWait = time.Duration(atoi(row["avg_wait_time"])) * time.Microsecond
	}
	return f, nil
}

// connect logs in to the PgBouncer's admin database.
func (b *bouncerWatch) connect(ctx context.Context) (*pgconn.PgConn, error) {
	cfg := b.Env().PgBouncer
	c := b.base.Copy()
	c.Database = "pgbouncer"
	c.User = cfg.AdminUser
	c.Password = cfg.AdminPassword
	c.RuntimeParams = map[string]string{} // PgBouncer's console accepts few startup parameters
	pc, err := pgconn.ConnectConfig(ctx, c)
	if err != nil {
		return nil, fmt.Errorf("connect to PgBouncer's admin console at %s as %q: %w", b.addr, cfg.AdminUser, err)
	}
	return pc, nil
}

// close closes the monitor's admin connection.
func (b *bouncerWatch) close() {
	if b.pc != nil {
		_ = b.pc.Close(context.Background())
		b.pc = nil
	}
}

// rowsOf returns a result's rows as column name → text value.
func rowsOf(r *pgconn.Result) []map[string]string {
	out := make([]map[string]string, 0, len(r.Rows))
	for _, row := range r.Rows {
		m := make(map[string]string, len(row))
		for i, v := range row {
			if i < len(r.FieldDescriptions) {
				m[r.FieldDescriptions[i].Name] = string(v)
			}
		}
		out = append(out, m)
	}
	return out
}

func atoi(s string) int {
	n, _ := strconv.Atoi(s)
	return n
}
