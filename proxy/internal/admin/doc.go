// Package admin is the proxy's admin console: the commands a client of
// the virtual database Config.AdminDatabase ("pgshard") runs as one of
// Config.AdminUsers, PgBouncer-style, over the simple query protocol —
// one result set (or command tag) per command, PgBouncer's column names
// where the concept is the same (a "database" of PgBouncer is a shard
// here), so that dashboards and scripts written for PgBouncer's console
// keep working.
//
// The package sees the proxy only through Host: methods that return
// snapshots (plain structs the console owns: pools, clients, servers, the
// map, the settings) and the few actions (reload, pause, kill, ...). It
// never holds a session, a pool or a lock of the proxy's; the proxy
// (proxy/admin.go, adminHost) implements Host and owns the session: its
// startup, the message loop, cancel requests.
//
//	session (proxy) ── Query message ──▶ Query (console.go)
//	                                       │ parseQuery (parse.go): split on ';',
//	                                       │ comments dropped, verbs upper case
//	                                       ▼
//	                                     run: one command
//	           ┌──────────────────────────┼────────────────────────────┐
//	           ▼                          ▼                            ▼
//	     SHOW name (show.go: HELP,   RELOAD, PAUSE, RESUME,      DISABLE, ENABLE,
//	     VERSION, the table)         RECONNECT, KILL,            SHUTDOWN (console.go)
//	       show_pools.go  SHARDS,    WAIT_CLOSE [shard]
//	         POOLS, STATS,           (actions.go)
//	         DATABASES                    │
//	       show_conns.go  CLIENTS,        │
//	         SERVERS                      │
//	       show_config.go CONFIG,         │
//	         USERS                        │
//	       show_map.go    MAP,            │
//	         ROUTES, LISTS                │
//	           │                          │
//	           └────── Host (host.go): snapshots in, actions out ──▶ proxy
//	                                      │
//	                                      ▼
//	     result.go: RowDescription, DataRows (PgBouncer's text forms: integers,
//	     0/1 for booleans, times in UTC, NULL for none), CommandComplete; an
//	     error (pgwire.Error, its SQLSTATE kept) stops the query string
//
// Commands (SHOW HELP lists them, Commands documents them): SHOW HELP |
// VERSION | CONFIG | SHARDS | MAP | POOLS | STATS | CLIENTS | SERVERS |
// DATABASES | LISTS | USERS | ROUTES; RELOAD; PAUSE [shard]; RESUME
// [shard]; DISABLE; ENABLE; RECONNECT [shard]; KILL [shard]; SHUTDOWN;
// WAIT_CLOSE [shard].
//
// Errors: an unknown command or SHOW name is 08P01 ("use SHOW HELP"), too
// many arguments 42601, an unknown shard 22023, a rejected RELOAD 22023
// with the reason; a command a cancel request stops (the proxy cancels the
// query's context with ErrCanceled) is 57014.
//
// The console's output is pinned byte for byte by testdata/console.golden
// (written from the proxy in a fixed state, proxy/admin_golden_test.go)
// and checked here too through a fake Host (console_test.go).
//
// Layering (internal/layering): the package imports pgwire only, and
// only package proxy imports it.
package admin
