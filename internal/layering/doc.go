// Package layering holds the test that enforces pgshard's dependency rules
// (ARCHITECTURE.md §3); it has no code of its own.
//
//	doc.go            this comment
//	layering_test.go  the rules, the checker, and a test of the checker
//	funclen_test.go   no function of any package of the proxy's tree
//	                  (proxy, proxy/route, proxy/internal/...) over 100
//	                  lines (issue 19), a test that every package of that
//	                  tree is listed, and a test of the checker
//	receivers_test.go no type of that tree with over 25 methods (on T and
//	                  *T together), no struct there embedding a struct
//	                  type of its package that has methods (the methods
//	                  would be promoted and the bound dodged) unless
//	                  embedAllowed lists it with its reason, and a test
//	                  of the checker
//
// The rules, one line each, allow-lists over the module's own packages
// (a package may always use its own subtree; anything outside the module is
// not checked):
//
//	cmd → internal/cli → proxy | loadgen | chaos | verify → router → store, shardmap
//
//	shardmap         nothing of ours
//	migrations       shardmap
//	catalog          shardmap                 (the map in Postgres; router and proxy may later import it)
//	reshard          catalog, migrations, shardmap  (the mover)
//	store            shardmap                 (knows nothing of router, proxy, loadgen)
//	router           store, shardmap, migrations
//	cluster          shardmap                 (no core logic)
//	clustertest      cluster, shardmap, migrations
//	proxy            router, store, shardmap, migrations
//	loadgen          router, store, shardmap, migrations
//	chaos            cluster, shardmap, store, router, loadgen, migrations, catalog, reshard (move faults)
//	verify           shardmap                 (a checker must not share the code it checks)
//	internal/config  shardmap, proxy/route
//	internal/sqlver  nothing of ours          (a foundation: every package may use it)
//	internal/ctxtime nothing of ours          (a foundation: the sleep bounded by a context)
//
//	inside the proxy (one way: proxy → internal/engine → internal/merge → route, internal/pgvalue → internal/pgwire;
//	internal/engine → internal/auth, internal/backend, internal/obs; proxy → internal/admin → internal/pgwire):
//	proxy/route             shardmap                 (the analyzer: no wire, no session)
//	proxy/internal/pgwire   nothing of ours          (the wire protocol)
//	proxy/internal/pgvalue  proxy/internal/pgwire    (the value codec)
//	proxy/internal/auth     proxy/internal/pgwire at most (SCRAM, TLS)
//	proxy/internal/backend  proxy/internal/pgwire, shardmap, migrations (pools; handed an Env, never the proxy)
//	proxy/internal/merge    proxy/route, proxy/internal/pgvalue, proxy/internal/pgwire (the fan-out merge over Sources; no session, no pool)
//	proxy/internal/obs      nothing of ours          (the metric handles the server and its sessions share)
//	proxy/internal/engine   proxy/route, proxy/internal/{pgwire,pgvalue,auth,backend,merge,obs}, store, shardmap, migrations
//	                        (the client sessions and their planner; never package proxy or the console:
//	                        the server hands a session engine.GenerationEnv and engine.HostEnv)
//	proxy/internal/admin    proxy/internal/pgwire    (the console over admin.Host snapshots; no session, no pool)
//	                        and only package proxy imports it (a direct-import rule: importRules)
//	everyone         never internal/cli or cmd (only cmd/pgshard uses internal/cli)
//
// The rules are checked on the production import graph (`go list`'s Deps,
// transitive; test files are not checked). A rule whose package does not
// exist yet is skipped, so the rules can name packages before they land. A
// violation fails with the rule's name and the import chain that breaks it.
package layering
