package admin

import (
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgtype"
)

// The per-shard commands: SHOW SHARDS (pgshard's), POOLS, STATS and
// DATABASES (PgBouncer's columns; a "database" of PgBouncer is a shard),
// one row per shard from one Host.Pools snapshot.

func showPools(h Host) *result {
	r := &result{cols: []column{
		{"database", pgtype.TextOID}, {"user", pgtype.TextOID}, {"cl_active", pgtype.Int4OID}, {"cl_waiting", pgtype.Int4OID},
		{"cl_active_cancel_req", pgtype.Int4OID}, {"cl_waiting_cancel_req", pgtype.Int4OID}, {"sv_active", pgtype.Int4OID},
		{"sv_active_cancel", pgtype.Int4OID}, {"sv_being_canceled", pgtype.Int4OID}, {"sv_idle", pgtype.Int4OID},
		{"sv_used", pgtype.Int4OID}, {"sv_tested", pgtype.Int4OID}, {"sv_login", pgtype.Int4OID}, {"maxwait", pgtype.Int4OID},
		{"maxwait_us", pgtype.Int4OID}, {"pool_mode", pgtype.TextOID}, {"pool_size", pgtype.Int4OID}, {"state", pgtype.TextOID},
		{"cl_pinned", pgtype.Int4OID},
	}}
	ps := h.Pools()
	for _, p := range ps.Shards {
		r.rows = append(r.rows, []any{p.Name, p.User, p.Active, p.Waiting, 0, 0, p.Active,
			0, 0, p.Idle, 0, 0, p.Login, int(p.MaxWait / time.Second), int((p.MaxWait % time.Second) / time.Microsecond),
			ps.Mode, ps.Size, p.State, p.Pinned})
	}
	return r
}

func showStats(h Host) *result {
	r := &result{cols: []column{
		{"database", pgtype.TextOID}, {"total_xact_count", pgtype.NumericOID}, {"total_query_count", pgtype.NumericOID},
		{"total_received", pgtype.NumericOID}, {"total_sent", pgtype.NumericOID}, {"total_xact_time", pgtype.NumericOID},
		{"total_query_time", pgtype.NumericOID}, {"total_wait_time", pgtype.NumericOID}, {"avg_xact_count", pgtype.NumericOID},
		{"avg_query_count", pgtype.NumericOID}, {"avg_recv", pgtype.NumericOID}, {"avg_sent", pgtype.NumericOID},
		{"avg_xact_time", pgtype.NumericOID}, {"avg_query_time", pgtype.NumericOID}, {"avg_wait_time", pgtype.NumericOID},
		{"p99_xact_time", pgtype.NumericOID}, {"errors", pgtype.TextOID},
	}}
	for _, p := range h.Pools().Shards {
		// Query times are not measured separately: a statement's time is
		// part of its transaction's (total_query_time and avg_query_time
		// report the transaction figures, as PgBouncer does in
		// transaction pooling for one-statement transactions).
		r.rows = append(r.rows, []any{p.Name, p.Xacts, p.Queries, p.BytesIn, p.BytesOut,
			p.XactNanos / 1e3, p.XactNanos / 1e3, p.WaitNanos / 1e3, p.XactsPerSec, p.QueriesPerSec, p.RecvPerSec, p.SentPerSec,
			p.XactMicros, p.XactMicros, p.WaitMicros, p.P99XactMicros, p.Errors})
	}
	return r
}

func showShards(h Host) *result {
	r := &result{cols: []column{
		{"shard", pgtype.TextOID}, {"ordinal", pgtype.Int4OID}, {"state", pgtype.TextOID}, {"reason", pgtype.TextOID}, {"buckets", pgtype.Int4OID},
		{"ranges", pgtype.TextOID}, {"via", pgtype.TextOID}, {"addr", pgtype.TextOID}, {"dsn", pgtype.TextOID}, {"pooler_dsn", pgtype.TextOID},
		{"verified", pgtype.Int4OID}, {"cl_active", pgtype.Int4OID}, {"cl_waiting", pgtype.Int4OID}, {"sv_active", pgtype.Int4OID},
		{"sv_idle", pgtype.Int4OID}, {"maxwait_us", pgtype.Int8OID}, {"xact_count", pgtype.Int8OID}, {"avg_xact_time", pgtype.Int8OID},
		{"p99_xact_time", pgtype.Int8OID}, {"keyed", pgtype.Int8OID}, {"hinted", pgtype.Int8OID}, {"any", pgtype.Int8OID},
		{"fanout", pgtype.Int8OID}, {"refused", pgtype.Int8OID}, {"errors", pgtype.TextOID},
		{"pgbouncer_cl_active", pgtype.Int4OID}, {"pgbouncer_cl_waiting", pgtype.Int4OID}, {"pgbouncer_sv_active", pgtype.Int4OID},
		{"pgbouncer_sv_idle", pgtype.Int4OID}, {"pgbouncer_maxwait_us", pgtype.Int8OID}, {"pgbouncer_read_at", pgtype.TextOID},
	}}
	for _, p := range h.Pools().Shards {
		var ranges []string
		n := 0
		for _, rg := range p.Ranges {
			ranges = append(ranges, fmt.Sprintf("%d-%d", rg.Lo, rg.Hi))
			n += rg.Hi - rg.Lo + 1
		}
		via := "direct"
		if p.ViaPooler {
			via = "pgbouncer"
		}
		row := []any{p.Name, p.Ordinal, p.State, p.Reason, n, strings.Join(ranges, ","), via, p.Addr,
			p.DSN, nullIfEmpty(p.PoolerDSN), p.Verified, p.Active, p.Waiting,
			p.Active, p.Idle, int64(p.MaxWait / time.Microsecond), p.Xacts,
			p.AvgXactMicros, p.P99XactMicros,
			p.Keyed, p.Hinted, p.Any, p.Fanout, p.Refused, p.Errors}
		if b := p.Bouncer; b != nil && b.Err == "" {
			row = append(row, b.ClActive, b.ClWaiting, b.SvActive, b.SvIdle, int64(b.MaxWait/time.Microsecond), b.At)
		} else if b != nil {
			row = append(row, nil, nil, nil, nil, nil, "error: "+b.Err)
		} else {
			row = append(row, nil, nil, nil, nil, nil, nil)
		}
		r.rows = append(r.rows, row)
	}
	return r
}

func showDatabases(h Host) *result {
	r := &result{cols: []column{
		{"name", pgtype.TextOID}, {"host", pgtype.TextOID}, {"port", pgtype.Int4OID}, {"database", pgtype.TextOID}, {"force_user", pgtype.TextOID},
		{"pool_size", pgtype.Int4OID}, {"min_pool_size", pgtype.Int4OID}, {"reserve_pool", pgtype.Int4OID}, {"pool_mode", pgtype.TextOID},
		{"max_connections", pgtype.Int4OID}, {"current_connections", pgtype.Int4OID}, {"paused", pgtype.Int4OID}, {"disabled", pgtype.Int4OID},
	}}
	ps := h.Pools()
	for _, p := range ps.Shards {
		host, port := hostPort(p.Addr)
		r.rows = append(r.rows, []any{p.Name, host, port, p.Database, p.User, ps.Size, 0, 0,
			ps.Mode, ps.Size, p.Open, p.Paused, ps.LoginsDisabled})
	}
	return r
}
