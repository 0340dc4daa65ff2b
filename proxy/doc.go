// Package proxy is pgshard's Postgres wire-protocol sharding proxy.
// Unmodified clients (psql, pgbench, pgx, psycopg, JDBC, node-postgres)
// connect to it as to one database; each transaction runs on the shard that
// owns the first key it touches, through the shard's PgBouncer in
// transaction mode or directly. DESIGN.md §4 is the contract.
//
//	client ──TCP──▶ Server (accept, cancel keys, MaxClients)
//	                  │
//	                  ▼
//	               session ── startup: SSL/GSS refused ('N'), SCRAM-SHA-256
//	                  │        or trust, ParameterStatus, BackendKeyData
//	                  │
//	                  │  Query ─────────────┐   Parse/Bind/Describe/Execute/
//	                  │                     │   Close buffered (no copy) up
//	                  ▼                     ▼   to Sync or Flush
//	               planner ◀── route.Analyzer (pg_query grammar, cached per
//	                  │          text; keys from SQL, Bind params, hints)
//	                  │  txn engine: idle ─BEGIN▶ deferred ─key▶ bound(shard)
//	                  │              deferred ─error▶ failed ─ROLLBACK▶ idle
//	                  │  emits: bytes for one backend write (s.bw) and
//	                  │  ordered items: local answers | backend responses
//	                  │  to forward or swallow | errors replacing an abort
//	                  ▼
//	    exchange ──one write──▶ shardPool[shard] ──▶ PgBouncer ──▶ Postgres
//	       ▲       (backend conns keyed by startup settings,     (or direct)
//	       │        held for one transaction only)
//	       └──raw bytes, headers read, one write per round trip──▶ client
//
//	    fan-out (DestAll, outside transactions): the statement goes to
//	    every shard at once; rows are concatenated or k-way merged per
//	    route.Merge (ORDER BY, LIMIT/OFFSET, count/sum/min/max), DDL
//	    answers are checked on every shard.
//
// # Transactions
//
// BEGIN, SET LOCAL and SAVEPOINT are answered by the proxy while no shard
// is chosen (ReadyForQuery 'T') and replayed, pipelined in the same write,
// on the shard the first routed statement picks. While a transaction runs
// on a backend, the backend's ReadyForQuery status is authoritative. A
// statement for another shard is refused with SQLSTATE 0A000 naming both
// shards; the proxy then aborts the backend transaction at the same point
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
// also starts every cache afresh. Describe of a statement runs on the pipeline's shard (or any);
// Describe of a portal always goes to the backend after the real Bind, so
// result formats are never mislabelled. The unnamed statement changes as
// soon as its Parse is planned (a failed pipeline may leave the new text in
// place where Postgres would have kept the old one; drivers re-parse the
// unnamed statement before use anyway).
//
// # Settings
//
// See params.go: a client's startup parameters and session SETs are kept
// per session and applied on whichever backend runs its transaction
// (startup parameters of the pooled connection, or transaction-local
// set_config through PgBouncer); they never reach another client. Session
// SET is validated by running it inside a rolled-back transaction on some
// shard, which also yields Postgres's canonical value and error. RESET
// returns to the client's startup value.
//
// # Shards that are down
//
// A TCP probe per shard each Config.HealthInterval marks a shard down; its
// transactions then fail at once with 08001 naming it (through PgBouncer,
// which would otherwise queue the client until its query_wait_timeout),
// sessions waiting on it are interrupted, and key-less statements go to the
// other shards. At start, a shard that is down is logged and verified on
// its first connection; a shard whose identity record disagrees with the
// map stops the start.
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
// # Errors
//
// Postgres errors are forwarded byte for byte, except a FATAL from a
// backend that is going away, which the client gets as ERROR (its own
// session survives; only the transaction is lost). The proxy's own errors
// carry a SQLSTATE and say what to do. Malformed or oversized messages get
// 08P01 and the connection is closed.
package proxy
