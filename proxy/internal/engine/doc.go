// Package engine is the proxy's engine: the client sessions, their
// planner, the exchanges with the backends, fan-out, pinning and the map
// fence. Package proxy (the server: Config, New, Server, the lifecycle,
// reload, hand-over, the console's host) makes a session per client and
// hands it two environments; the engine never imports package proxy or
// the console (internal/layering's import rule, ARCHITECTURE.md §3).
//
//	proxy.Server ──NewSession(gen, host, conn)──▶ Session.Run
//	                                                 │
//	  sessionenv.go  GenerationEnv: one configuration generation (its
//	                 SessionConfig, pools, metrics handles (internal/obs),
//	                 logins; GenerationOps: routing log, catalog lease,
//	                 direct pools, another database's generation);
//	                 HostEnv: the accepting server for the session's life
//	                 (TLS, logins disabled, pin count, fences, the
//	                 Registry; HostOps: the current generation, the
//	                 console's ConsoleQuery for a ConsoleCaller)
//	  sessionreg.go  Registry: admission, cancel keys, rekey, KILL and
//	                 SHOW CLIENTS over ClientInfo snapshots, Pinned, the
//	                 shutdown's CloseAll
//	  attach.go      Registry.Attach and Session.ConsoleQuery: a session
//	                 registered without its startup (the console's golden
//	                 tests in package proxy)
//	                                                 │
//	  session.go     Session: what lives past the startup, Run (where
//	                 an idle session waits for its client: errIdle), the
//	                 backend it holds, cancel; startup.go: startup, the
//	                 startup phase and its state (negotiation, identity,
//	                 database, admission, authentication (internal/auth),
//	                 the greeting); txnstate.go: transaction, the
//	                 transaction's state machine (idle, deferred, bound,
//	                 failed); clientconn.go: clientConn, the client socket
//	                 (reader, output buffer, write lock, relay, the
//	                 pinned backend's notifications while it waits for the
//	                 client); tls.go:
//	                 SSLRequest and the handshake; adminsession.go:
//	                 consoleSession, a console's side
//	                                                 ▼
//	  loop.go        serve, the session's message loop (a pipeline whose
//	                 client pauses before Sync runs as if flushed; it
//	                 returns to Run when it must wait for the client)
//	  exchange.go    exchanger: one exchange with one backend (items,
//	                 effects, a lost backend, COPY FROM STDIN);
//	                 paramstatus.go: what the client was told of the
//	                 reported parameters (ParameterStatus);
//	                 timestyle.go: the DateStyle and TimeZone a read's
//	                 merge orders dates and times by; relabel.go:
//	                 OIDMaps, another shard's descriptions told in the
//	                 default shard's table OIDs, attnums and type OIDs,
//	                 a client's Parse's types in the shard's;
//	                 relabelvalues.go: the type OIDs inside the binary
//	                 values of the rows that follow, or that a portal's
//	                 Bind announces (arrays, records)
//	  simple.go      Query messages (queryPlanner); extended.go: Parse/
//	                 Bind/Describe/Execute/Close buffered up to Sync/Flush
//	                 (pipePlanner); both over the shared planner state;
//	                 pipecut.go: pipeParts, a pipeline run in parts (reads
//	                 of several shards, a read of every shard with more
//	                 after it), each part on one shard
//	  plan.go        planner: route.Statement → the plan value (planned.go:
//	                 the items, the local answers and the bytes of one
//	                 backend write, which the exchange runs) and the
//	                 proxy's own answers as action values (their I/O a
//	                 step: a soft move's ROLLBACK, a session SET's probe,
//	                 a pg_terminate_backend of the proxy's sessions);
//	                 router.go: the routing decision as a
//	                 routePlan value (no I/O); txnsim.go: txnSim, the
//	                 plan's simulation of the transaction (txnstate.go)
//	                 and its local answers; stmtbook.go: prepared statements as
//	                 the plan sees them; staledesc.go: a client's
//	                 statement described before a schema change,
//	                 described again at its Bind and refused (0A000)
//	                 when its columns changed; indexddl.go: a schema
//	                 change naming an index alone, on every shard when
//	                 the default shard says its table is placed there
//	                 (a question planning stops for); backendexec.go: backendExec,
//	                 the planner's I/O (acquire, readers, replay, moving
//	                 a soft transaction, an action's step) that carries
//	                 the plan out; acquirestep.go: acquireStep, an idle
//	                 session's pipeline's acquisition of its backend as a
//	                 step of the plan, which the executor takes (and
//	                 asks the pool's fence on, the first time);
//	                 acquireneed.go: every other acquisition of a
//	                 backend without one held, a Describe answered
//	                 apart or of a stale statement, a session SET's
//	                 probe on any shard, whose index a schema change
//	                 names, a soft transaction's move, a swap of the
//	                 transaction's backend, a terminate call:
//	                 planning stops for it (acquireNeed), the
//	                 runner does it and plans the part again with the
//	                 result given (givens)
//	  fanout.go      statements of every shard: fanPlan, the planner's
//	                 fan-out, and fanExec, made per fan-out, that carries
//	                 it out (reads merged by internal/merge) and sees the
//	                 session only through its fields and fanSession;
//	                 fanstream.go: fanStream, one shard's answer (a
//	                 merge.Source); fanlead.go: settings ahead of a read;
//	                 twostage.go: reads in two stages, each stage a
//	                 fanExec of its own; copyout.go: COPY ... TO STDOUT
//	                 of every shard, their outputs made one COPY;
//	                 copyrows.go: COPY (query) TO of a merged read, the
//	                 merge's answer written as the COPY (copyRowsWriter);
//	                 cursor.go: a read fetched in parts (an Execute
//	                 with a row limit, a Flush before it): fanCursor,
//	                 its rows kept, and cursorSet, the session's;
//	                 sqlcursor.go: DECLARE over a read of every shard,
//	                 FETCH/MOVE/CLOSE of a cursor the proxy keeps;
//	                 readtxns.go: readerSet, the read-only backend
//	                 transactions of a transaction's other shards
//	  pin.go         pinning (PoolMode, PinnedSession) and pinner, the
//	                 pin's life (pinning, publishing, applying what the
//	                 pinned backend ran, ending it); ownbackend.go:
//	                 ownBackend, a pinned session's own backend (shard,
//	                 reasons, what ends them); pinstmts.go: a pinned
//	                 session's prepared statements (the proxy's made real
//	                 on its backend, the backend's kept past the pin);
//	                 pinroute.go: where what a pinned backend runs as
//	                 sent reads (EXECUTE, statements that keep session
//	                 state), the pin's shard, its temporary tables;
//	                 fastpath.go: FunctionCall
//	                 messages (large objects); setreset.go: a
//	                 client's SET/RESET; setconfig.go: a set_config(name,
//	                 value, false) sent alone, kept as a SET and answered
//	                 with its row; sessiongen.go: moving to a newer
//	                 generation between transactions; genshards.go:
//	                 pickAny, the shards' text order, the preamble check,
//	                 adjustDest (placement: one shard, unsharded tables)
//	  fence.go       the map fence's asserts (FenceMode, StandInTexts,
//	                 PoolFences: each pool's fence, asked once);
//	                 fenceretry.go: fenceRetrier, the retry after a
//	                 refused assert (its budget, its deadline, the
//	                 client's output it drops); servedretry.go: a read
//	                 of every shard whose parts' served sets are not
//	                 its map's (PS002 at a move's flip): run again or
//	                 answered 40001
//	  terminate.go   pg_terminate_backend / pg_cancel_backend of a
//	                 client session's PID, and SELECT pg_backend_pid()
//	                 (that PID, unless pinned): terminateCall, the call
//	                 the analyzer recognized (route.Terminate) with its
//	                 PIDs read, resolved to sessions without I/O, its
//	                 call the executor's step (stepTerminate), answered
//
// Below it: proxy/route (the analyzer), internal/backend (pools),
// internal/merge, internal/pgvalue, internal/pgwire, internal/auth,
// internal/obs, and store (the fence's error) and shardmap. Package
// proxy's doc.go describes the behaviour these files implement.
package engine
