// Package proxy is pgshard's Postgres wire-protocol sharding proxy.
// Unmodified clients (psql, pgbench, pgx, psycopg, JDBC, node-postgres)
// connect to it as to one database; each transaction runs on the shard that
// owns the first key it touches, through the shard's PgBouncer in
// transaction mode or directly. ARCHITECTURE.md §4 is the contract.
//
//	client ──TCP──▶ Server (server.go: what outlives a reload; generation.go:
//	                  │      one configuration, its pools; config.go;
//	                  │      lifecycle.go: logins, draining, readiness,
//	                  │      Serve; serve.go: serveRun, one run of Serve:
//	                  │      accept, reap, drain, hard stop)
//	                  │  each session (internal/engine, "engine/" below:
//	                  │  its doc.go names its files) sees the proxy only
//	                  │  through engine/sessionenv.go: GenerationEnv (its
//	                  │  generation: Config, pools, metrics) and HostEnv
//	                  │  (the server: its TLS, lifecycle, pins, fences, and
//	                  │  the Registry of the sessions, engine/sessionreg.go:
//	                  │  admission, cancel keys, KILL, shutdown), never a
//	                  │  Server or generation; sessionhost.go makes them and
//	                  │  implements their ops; engine.go: the engine's
//	                  │  public names (PoolMode, FenceMode, PinnedSession)
//	                  ▼
//	               Session (engine/session.go) ── startup (engine/startup.go): TLS (engine/tls.go,
//	                  │        internal/auth) or 'N', SCRAM-SHA-256 (internal/auth)
//	                  │        or trust;
//	                  │        database AdminDatabase → admin console
//	                  │        (engine/adminsession.go: the session side; admin.go:
//	                  │        adminHost; internal/admin)
//	                  │
//	                  │  Query ──────────────────┐   Parse/Bind/Describe/Execute/Close
//	                  │  (engine/simple.go)      │   buffered up to Sync/Flush, or a
//	                  │                          │   50 ms pause (engine/loop.go)
//	                  │                          │   (engine/extended.go)
//	                  ▼                          ▼
//	               planner (engine/plan.go) ◀── route.Statement: route.Analyzer parses
//	                  │                    once per text (pg_query), routes with Bind params
//	                  │  txn engine: idle ─BEGIN▶ deferred ─key▶ bound(shard)
//	                  │              deferred ─error▶ failed ─ROLLBACK▶ idle
//	                  │  emits a plan value (engine/planned.go): bytes for one backend write and ordered
//	                  │  items: local answers | backend responses to forward or
//	                  │  swallow | errors replacing an abort
//	                  ▼
//	    exchange (engine/exchange.go) ──one write──▶ backend.Pool[shard] ──▶ PgBouncer ──▶ Postgres
//	       ▲       (internal/backend: conns keyed by startup    (or direct)
//	       │        settings, held for one transaction only;
//	       │        backend/clientsettings.go: client settings without leaks;
//	       │        engine/genshards.go: pickAny, the shards' text order, the
//	       │        preamble check)
//	       └──raw bytes, headers read, one write per round trip (internal/pgwire)──▶ client
//
//	    fan-out (DestAll; engine/fanout.go): the statement goes to every shard at once
//	    ── outside a transaction on pooled connections, inside one in the
//	    transaction's backend and its readers (engine/readtxns.go) ── and the answers
//	    are merged as route.Merge says (internal/merge, each shard's answer
//	    a merge.Source: k-way merge of rows, merged groups; internal/pgvalue:
//	    Postgres's order and exact output of every value the proxy
//	    computes); DDL answers are checked on every shard.
//	    engine/twostage.go: a read in two stages (route.Stages): describe the
//	    statement, run each inner statement as a fan-out (or on its shard)
//	    collecting its merged rows, then the outer statement over them as
//	    typed VALUES on the default shard (a spread plan: where Route sends
//	    it, every shard merged as a fan-out of its own), its answer streamed
//	    to the client.
//	    engine/fanlead.go: transaction-local settings ahead of a read of every shard
//	    in its implicit transaction (set_config(..., true), SET LOCAL) run on
//	    every shard first; inside a transaction block set_config is repeated
//	    on every backend the transaction uses.
//	    internal/pgwire: framing, message views and builders, the startup
//	    packet, the proxy's errors and the ErrorResponse codec, raw I/O.
//
//	    operations: the pools' statistics (internal/backend) and
//	    routelog.go (routing decisions) read by the console through
//	    admin.go's adminHost and admin_config.go (SHOW CONFIG's rows), and
//	    by metrics.go (Prometheus); internal/backend also holds PAUSE,
//	    RECONNECT, KILL and retirement (a pool's Ops), the PgBouncer
//	    readings and back-pressure, the health monitor and the proxy's own
//	    queries; generation.go hands each pool its environment (backendEnv);
//	    poolkeeper.go runs the pools' monitors and drains retired pools;
//	    reload.go (generations; engine/sessiongen.go: a session moving to a
//	    newer one, between transactions), lifecycle.go, serve.go and
//	    handover.go (graceful shutdown, socket hand-over), secrets.go
//	    (redaction).
//
//	    catalog.go: Config.Follow (a catalog.Follower) runs in serve's group;
//	    serve accepts no client before its first lease (waitFirstLease,
//	    bounded by Config.LeaseWait); each newer map from the catalog ─▶
//	    Reload (a new generation); a lapsed lease ─▶ router.decide refuses
//	    keyed statements (57P03).
//	    engine/fence.go: router.decide puts the key in its plan (routePlan.fence)
//	    ─▶ backendExec.ensureBackend writes its assert with the transaction's opening
//	    (first statement of a pipeline, first of a simple Query's string
//	    via appendClientQuery — error positions moved back past it — or
//	    the BEGIN replay), or fenceHeld once per bucket on a held backend;
//	    answers swallowed, the error the client's. engine/fenceretry.go: that opening
//	    assert refused (PS001) before anything reached the client ─▶ the
//	    exchange is read to its end unforwarded, the backend rolled back,
//	    the map awaited (bounded), the Query or pipeline run again.
//
//	    pinning (engine/pin.go; pindirect.go: the direct pools, the pin metrics
//	    and PinnedSessions): session state no pooler keeps (temp tables, WITH
//	    HOLD cursors, session advisory locks, LISTEN, set_config(..., false),
//	    SET in a transaction or a mixed query string, large objects) pins
//	    the client to a direct backend of its own (s.bc across
//	    transactions) until the state is gone; PoolSession pins every
//	    client for its session. databases.go: further logical databases
//	    (passthrough or own map) on the same listener, by dbname.
//	    engine/terminate.go: pg_terminate_backend / pg_cancel_backend of a client
//	    session's PID (or pg_terminate_backend(pg_backend_pid())) act on
//	    that session. engine/exchange.go's copyIn peeks at the backend after each
//	    write, so a COPY FROM the server fails ends at once; a COPY in a
//	    query string of several statements (or a pipeline) runs as on one
//	    database, the COMMIT of a wrapped implicit transaction held until
//	    the string is done (planner.holdCommit).
//
// # Layers
//
// The proxy's lower layers are packages of their own under
// proxy/internal, imported only downward (internal/layering enforces it):
//
//	proxy (this package: Config, New, Server, lifecycle, reload, hand-over,
//	  │    the console's host; engine.go: the engine's public names)
//	  ├──▶ internal/engine ──▶ route, internal/{auth,backend,merge,obs,pgvalue,pgwire}
//	  │      the client sessions, their planner, fan-out, pinning, the map
//	  │      fence, the register of sessions; handed GenerationEnv and
//	  │      HostEnv by the server, it never imports this package or the
//	  │      console (its doc.go names its files)
//	  ├──▶ internal/obs          the metric handles the server and its
//	  │                          sessions share (obs.Metrics)
//	  ├──▶ route                 the analyzer (statements → routes, merge plans)
//	  ├──▶ internal/auth         SCRAM-SHA-256 server side, certificate loading
//	  ├──▶ internal/backend ──▶ internal/pgwire
//	  │      backend connections, pools keyed by startup settings, statement
//	  │      cache, PgBouncer readings, health, pool statistics; a pool is
//	  │      handed its environment (backend.Env), it never sees the server
//	  ├──▶ internal/merge ──▶ route, internal/pgvalue, internal/pgwire
//	  │      the fan-out merge executor: route.Merge plans over merge.Source
//	  │      (one shard's rows), written into the client's buffer; no session
//	  ├──▶ internal/pgvalue ──▶ internal/pgwire
//	  │      row descriptions, Postgres-exact value compare/decode/format
//	  ├──▶ internal/admin ──▶ internal/pgwire
//	  │      the admin console, one file per command family, over admin.Host:
//	  │      snapshots and actions the proxy gives it (admin.go's adminHost);
//	  │      no session, no pool; only this package imports it
//	  └──▶ internal/pgwire       framing, message views and builders, startup
//	                             packet, the wire error type, raw socket I/O
//
// A DSN shown anywhere goes through store.RedactDSN, the one redaction of
// a DSN in pgshard.
//
// # Pool modes, pinning and unsharded tables
//
// Config.PoolMode (per User too) is PoolTransaction (the default: each
// transaction on a pooled backend) or PoolSession (each client on a
// backend of its own, opened directly to the shard's Postgres as the
// client's user with its startup parameters: everything one Postgres
// session does works — SET/RESET/DISCARD, PREPARE, temp tables, LISTEN,
// cursors, COPY, large objects — on one shard; on a map of one shard the
// client is pinned at startup and BackendKeyData carries the backend's real
// PID and secret). In transaction pooling a statement creating session
// state pins the client the same way until that state is gone (see
// engine/pin.go for what ends each kind); Config.MaxPinned bounds such pins. A
// pinned session runs every statement on its backend as it is; one that
// needs another shard is refused (0A000), a read of every shard outside a
// transaction block still fans out on pooled connections. Pinned sessions
// are counted by the Server (pgshard_proxy_pinned_sessions,
// pgshard_proxy_pins_total by reason; SHOW CLIENTS pinned and remote_pid,
// SHOW POOLS cl_pinned, SHOW LISTS pinned_clients). The direct pools of
// pinned backends belong to a generation: a reload hands a kept shard's
// direct pool to the new generation and retires the others'; a pinned
// session stays on its generation until its pin ends. The extra databases
// (databases.go) are built once: a reload keeps them, and their sessions
// belong to the main Server like the others.
//
// Tables outside the sharding schema are unsharded and live on
// Config.DefaultShard: statements that touch only them (reads, writes,
// DDL, COPY, DO, CALL, functions the schema does not know) run there; one
// that joins them with rows of another shard, or reads them on every
// shard, is refused. On a map of one shard every statement is routable:
// reads of "every shard", DDL inside transactions and shapes no merge
// supports run on that shard.
//
// The catalog a client reads (pg_class, information_schema, regclass
// casts) is the default shard's, which holds every object. Each shard
// numbers its objects itself, so the table OIDs, attribute numbers and
// type OIDs (of types made after initdb) in a RowDescription or
// ParameterDescription another shard answers are told in the default
// shard's numbers before the client sees them (engine/relabel.go: learned
// on the first description that names them, again after a schema change;
// a column the default shard lacks is told as no table's, 0): else
// pgJDBC's updatable result sets and ResultSetMetaData, or any client
// that looks a column up by its table OID, find another table or none.
// The other way, the parameter types a client's Parse names by the
// default shard's OIDs (psycopg, Npgsql and pgJDBC name a user type so)
// reach each shard in its own numbers: else "cache lookup failed for
// type", or another type. A pinned session reads the catalog on its own
// backend: what other shards answer it is told in its shard's numbers.
// Not told: OIDs inside values (SELECT tableoid, a binary array's element
// type).
//
// # Reads of every shard (fan-out)
//
// A key-less read (or an IN list of keys on several shards) runs on every
// shard and is merged into the answer one database would give — rows,
// column names and types, text and binary values, command tag — or is
// refused with SQLSTATE 0A000 and the reason; the analyzer decides which
// shapes merge (see package route, "Fan-out merges"). Memory is bounded:
// ordered rows are k-way merged holding one row per shard, groups are
// merged as every shard sorts them holding one group; only a GROUP BY
// ordered by something other than its keys buffers its merged groups, at
// most Config.MergeGroupLimit (54000 beyond). The merge checks that the
// shards' rows arrive in the order it merges them (a shard sorting text by
// another collation stops the statement instead of answering wrongly), and
// merges text by bytes only where the shards' collation is C/POSIX (checked
// once per server and after DDL) or the statement says COLLATE "C".
//
// Values the proxy computes — merged sums, avg, the casts of merged
// aggregates — are what Postgres computes for that result type: sum(int2/
// int4) bigint, sum(int8) and avg of integers numeric (exact, avg with
// numeric_div's scale), sum(real) accumulated in real, float4out/float8out
// with the extra_float_digits in effect on the shards, range errors
// (22003) as Postgres raises them. A float sum is exact when the addends'
// sum does not depend on their order; otherwise, as on one database with
// parallel aggregation, the last bits depend on the order of addition.
//
// Inside a transaction (explicit BEGIN, or the BEGIN a driver sends with
// autocommit off) a transaction reads any shards and writes one. The
// shard of the transaction's backend reads in its transaction (it sees
// the transaction's writes); every other shard reads in a "reader", a
// read-only backend transaction opened with the client's BEGIN, SET
// LOCALs, savepoints and settings replayed, and held until the
// transaction ends (a transaction that read N shards holds N backends,
// each bounded by its pool's PoolSize). A keyed read of another shard
// runs in that shard's reader too; the first write binds the transaction
// to its shard (the backend that had only read becomes a reader); a
// write for a second shard is refused (0A000). COMMIT commits the writing
// shard and ends the readers; ROLLBACK ends all. A read that fails on one
// shard fails the transaction on every shard, as on one database. Under
// REPEATABLE READ or SERIALIZABLE a read of a second shard is refused: no
// snapshot spans shards (every participant checks its isolation level in
// the same write, once per transaction). Outside a transaction block the
// fan-out is its pipeline's implicit transaction and must be alone in it,
// but for statements that only set transaction-local settings ahead of it.
//
// A read of every shard fetched in parts — an Execute with a row limit, a
// Flush between its Bind and Execute, or a SQL DECLARE ... CURSOR over it
// and its FETCH/MOVE FORWARD and CLOSE — is merged to its end at the first
// fetch; the proxy keeps the rows (at most Config.CursorBufferBytes per
// read, 54000 beyond) and answers each fetch from them as Postgres answers
// a portal's, until the transaction ends (engine/cursor.go, sqlcursor.go).
//
// # Settings ahead of a read of every shard
//
// pgshard's own store (with a statement timeout) and drivers send
// SELECT set_config(name, $1, true) ahead of a statement in the same
// pipeline (one Sync: one implicit transaction), or SET LOCAL ...; ahead of
// it in one query string. Ahead of a keyed statement the settings run on
// its shard; ahead of a read of every shard, every shard runs them first,
// in the same write and implicit transaction, and the client gets the
// first shard's answers to them (each must succeed on every shard; an
// error fails the implicit transaction as on one database), then the
// merged read and one ReadyForQuery (engine/fanlead.go). Ahead of a statement of
// one shard of any kind (an unsharded table's, the default shard's
// function or DO block, a key-less statement any shard runs) they run on
// that shard (lookahead: the pipeline's backend is the one that statement
// uses or follows); ahead of DDL or another statement of every shard that
// no lead can precede they are refused (0A000), never dropped. Only what provably sets
// transaction-local state leads (route.Statement.Settings: set_config with
// a constant name, a constant or parameter value and true; SET LOCAL of a
// setting that is not a transaction characteristic), and only in a
// pipeline of that shape (each setting Bind, [Describe], Execute, then the
// read); anything else ahead of a read of every shard is refused as
// before. Inside a transaction block set_config(..., true) holds on every
// shard the transaction reads: it binds no shard and is no write, every
// shard runs it ahead of a read of every shard in its pipeline, and the
// readers opened later (or a soft transaction that moves) repeat it, like
// SET LOCAL; a value that cannot be repeated exactly as text is refused.

// # Transactions
//
// BEGIN, SET LOCAL and SAVEPOINT are answered by the proxy while no shard
// is chosen (ReadyForQuery 'T') and replayed, pipelined in the same write,
// on the shard the first routed statement picks. While a transaction runs
// on a backend, the backend's ReadyForQuery status is authoritative. The
// transaction keeps its start (BEGIN, SET LOCAL, savepoint commands) to
// replay it on the other shards it reads (engine/readtxns.go). A write for a second
// shard (or any statement for another shard that is not a read) is refused
// with SQLSTATE 0A000 naming both shards; the proxy then aborts the backend transaction at the same point
// (a failing statement whose error it replaces), so a later COMMIT cannot
// commit the earlier statements, and the client must roll back. A key-less,
// table-less read-only statement (SELECT 1, SHOW, now()) in a deferred
// transaction binds it "softly" to any shard; if a later statement needs
// another shard, the soft transaction (which has read no table) is rolled
// back there and replayed on the right shard; now() may then differ between
// the first statements and the rest. Other
// key-less statements with side effects (nextval, advisory locks) run on
// Config.DefaultShard, so that they always meet the same shard.
//
// # Prepared statements
//
// Client-named statements are virtual: the session keeps name → text and
// parameter types and answers Parse, Close and DEALLOCATE itself. Backends
// receive an unnamed Parse before each Bind that needs it (in the same
// write), which no transaction pooler can break; on a direct connection a
// per-connection cache of proxy-named server-side statements (LRU) saves the
// re-parse.
//
// On a direct connection that cache also serves clients' unnamed statements
// (pgbench -M extended, JDBC before prepareThreshold, psycopg before
// auto-prepare) from a text's second use (Config.UnnamedStatements): the
// client still sees its unnamed Parse answered, and Postgres parses the
// text once per connection and plans it through its plan cache, as it does
// for a client that names its statements. This is what lets a proxy cost
// less than it adds: it saves Postgres the parse and most of the planning
// of each query (make bench-proxy measures the effect). A schema change made through the
// proxy (DDL) starts every cache afresh; one made behind its back that
// changes a cached statement's result columns fails that statement once
// with Postgres's 0A000 "cached plan must not change result type", which
// also starts every cache afresh; a client's statement prepared before a
// schema change seen through the proxy that altered its column count gets
// the same 0A000 at its next Bind (engine/exchange.go, fStale), and the client
// prepares it again. Describe of a statement runs on the pipeline's shard (or any);
// Describe of a portal always goes to the backend after the real Bind, so
// result formats are never mislabelled. The unnamed statement changes as
// soon as its Parse is planned (a failed pipeline may leave the new text in
// place where Postgres would have kept the old one; drivers re-parse the
// unnamed statement before use anyway).
//
// # Settings
//
// See internal/backend/clientsettings.go and engine/setreset.go: a client's startup parameters and session SETs are kept
// per session and applied on whichever backend runs its transaction
// (startup parameters of the pooled connection, or transaction-local
// set_config through PgBouncer); they never reach another client. Session
// SET is validated by running it inside a rolled-back transaction on some
// shard, which also yields Postgres's canonical value and error. RESET
// returns to the client's startup value.
//
// # Operations
//
// The admin console (internal/admin; engine/adminsession.go is its session side,
// admin.go adminHost, admin_config.go SHOW CONFIG's rows): a client connecting to
// the virtual database Config.AdminDatabase ("pgshard") as one of
// Config.AdminUsers gets PgBouncer's console commands and column names (SHOW POOLS, STATS,
// CLIENTS, SERVERS, DATABASES, LISTS, CONFIG, VERSION, HELP), pgshard's
// own (SHOW SHARDS, MAP, ROUTES, USERS), RELOAD, PAUSE/RESUME [shard],
// DISABLE/ENABLE, RECONNECT/KILL [shard], SHUTDOWN, WAIT_CLOSE [shard];
// a "database" of PgBouncer is a shard here. Others get 42501.
//
// Metrics (metrics.go): per-shard series are read from the same counters
// at scrape time (a reload may change the shards); names follow
// Prometheus's conventions (pgshard_proxy_*_total, *_seconds).
//
// Back-pressure (internal/backend/bouncer.go): a shard reached through its PgBouncer is
// overloaded while PgBouncer's cl_waiting or maxwait is at or above the
// configured thresholds; its new transactions then fail at once with
// 53300 naming it, instead of waiting invisibly inside PgBouncer.
//
// Reload (reload.go): a new configuration is validated whole (every field,
// TLS files, the map's epoch never lower, new shards' identity records)
// and published as a new generation; sessions move to it between
// transactions; removed shards' pools drain. Graceful shutdown
// (serve.go): stop accepting, serve the connected sessions until their
// clients leave, at most ShutdownTimeout. Hand-over (handover.go): a new
// process takes the listening socket over through a unix socket, so a
// restart refuses and drops no connection.
//
// # Shards that are down
//
// A TCP probe per shard each Config.HealthInterval marks a shard down; its
// transactions then fail at once with 08006 naming it (through PgBouncer,
// which would otherwise queue the client until its query_wait_timeout),
// sessions waiting on it are interrupted, and key-less statements go to the
// other shards. A shard marked down is probed every 100 ms until it
// answers, so it is served again at once after a restart. At start, a shard that is down is logged and verified on
// its first connection; a shard whose identity record disagrees with the
// map stops the start. Through PgBouncer a shard that is down can look
// like an answer — the login succeeds and the identity read fails with
// PgBouncer's 08P01 "server login has been failing" — which counts as down
// too (internal/backend/reachability.go), never as a disagreement.
//
// # Limits
//
// MaxMessageSize (default 64 MiB: large enough for big bytea/jsonb
// parameters, small enough that MaxClients sessions cannot exhaust memory
// at once with the pipeline limit of 4×) bounds Query, Parse, Bind and
// CopyData; other messages keep Postgres's 10000-byte limit. MaxClients
// refuses further clients with 53300, PoolSize and PoolTimeout bound the
// backend connections per shard and the wait for one.
//
// An idle client costs about 7.5 KiB of the proxy's memory (`make
// bench-idle`, beside PgBouncer's): its goroutine's stack (4 KiB), the
// session and its socket. Its 16 KiB read buffer is in a pool shared by
// the sessions while it waits (pgwire's lending MsgReader), its startup
// ParameterStatus values are the pool's shared map until it changes one
// (engine/startup.go greet, engine/paramstatus.go told), and its
// exchange scratch (planner, output buffer) is allocated by its first
// message.
//
// # Errors
//
// Postgres errors are forwarded byte for byte, except a FATAL from a
// backend that is going away, which the client gets as ERROR (its own
// session survives; only the transaction is lost). The proxy's own errors
// carry a SQLSTATE and say what to do. Malformed or oversized messages get
// 08P01 and the connection is closed.
package proxy
