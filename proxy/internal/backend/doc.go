// Package backend holds the proxy's connections to the shards: one pool
// per shard (its Postgres, or its PgBouncer in transaction mode), keyed by
// the startup settings a client needs, with the statement cache of direct
// connections, the shard's health, its PgBouncer's readings and
// back-pressure, the operator's controls and the statistics the console
// and the metrics read. It knows no session, no planner and no server: the
// configuration generation that uses a pool hands it an Env (its settings,
// the metric and logger it reports to, the statement-cache epoch, the
// identity register) and hands it the next generation's Env on a reload.
//
//	proxy (sessions, planner) ──Acquire(key *Settings)──▶ Pool ──▶ *Conn ──▶ PgBouncer or Postgres
//	       ◀──────────────── Release / Discard ──────────┘   │
//	proxy's core ── Monitor (health.go) ─▶ probe, bouncer.poll│
//	             ── ReapIdle, Stats.Roll every second         ▼
//	console, metrics ◀── Figures, SnapshotConns, Stats (counters, Averages)
//	console (PAUSE, RESUME, RECONNECT, KILL), reload ──▶ Pool.Ops (ops.go)
//
//	env.go             Env, BouncerConfig: what a pool is handed (SetEnv)
//	pool.go            Pool: acquire/release/wait, connect (a slot's new
//	                   connection, registered), reaping, CloseIdle, shutdown;
//	                   AcquireAs for pinned sessions' own connections;
//	                   OpenOutside, a connection of no slot's; the
//	                   connections' user, database, server version; SendCancel
//	dial.go            dialer: making a connection (pgconn, identity check,
//	                   then Hijack) and its connect errors; the Pool owns one
//	conn.go            Conn: one taken-over connection, its one-write Write,
//	                   Send (the request written by the answer's first read),
//	                   the non-blocking idle health peek
//	stmtcache.go       StmtCache: a direct connection's prepared statements (LRU)
//	clientsettings.go  Settings: a client's settings as a pool key (startup
//	                   parameters; through PgBouncer its five tracked ones plus
//	                   a transaction-local preamble)
//	ops.go             poolOps (Pool.Ops): the operator's state and controls —
//	                   PAUSE/RESUME and the sessions it holds, RECONNECT,
//	                   KILL, the refusal (down, back-pressure, retirement),
//	                   State; the pool it acts on; PollUntil
//	bouncer.go         bouncerWatch: PgBouncer readings (SHOW POOLS/STATS) and
//	                   back-pressure; the Pool owns one, its monitor uses it
//	health.go          Monitor: the health probe and PgBouncer polling loop;
//	                   probe (a shard found down unblocks its waiting sessions)
//	reachability.go    Unreachable: errors that mean "the shard is down"
//	query.go           RunSimple: the proxy's own simple queries on a Conn
//	stats.go           Stats: per-shard counters (a use ended: endUse), route
//	                   kinds, the period's Averages (Roll); the Pool's Figures,
//	                   InUse, ConnInfo; Quantile of a histogram
//
// Every method of a Pool (and of its Ops and Stats) is safe for concurrent use; a Conn is used by one
// session at a time (between transactions it sits idle in its pool).
package backend
