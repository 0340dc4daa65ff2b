package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/pgshard/pgshard/internal/ctxtime"
)

var pgbouncerReconnectInfo = kindInfo{
	needs:    NeedsPooler,
	instant:  true,
	resource: "proc",
	settle:   200 * time.Millisecond,
	new:      func() Fault { return &pgbouncerReconnect{} },
}

// reconnectWait bounds how long a heal watches SHOW SERVERS for the
// server connections RECONNECT closed and the new ones.
const reconnectWait = 3 * time.Second

// pgbouncerReconnect is KindPgBouncerReconnect.
type pgbouncerReconnect struct {
	mu     sync.Mutex
	before map[string]bool // server connections (backend PIDs) before RECONNECT
	done   bool            // RECONNECT was answered
}

func (*pgbouncerReconnect) Kind() Kind   { return KindPgBouncerReconnect }
func (*pgbouncerReconnect) Needs() Needs { return pgbouncerReconnectInfo.needs }

// Inject waits (at most reconnectWait) until the workload database has a
// server connection and none logging in, notes them (SHOW SERVERS) and
// sends RECONNECT for it: RECONNECT with no server connection would do
// nothing. Evidence:
// reconnected, servers (server connections before).
func (f *pgbouncerReconnect) Inject(ctx context.Context, env *Env, shard int, _ Params, _ *rand.Rand) (Evidence, error) {
	db, err := env.database()
	if err != nil {
		return Evidence{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, adminTimeout)
	defer cancel()
	var before map[string]bool
	wctx, wcancel := context.WithTimeout(ctx, reconnectWait)
	for {
		before, err = serverPIDs(ctx, env, shard, db)
		if err != nil {
			wcancel()
			return Evidence{Fields: map[string]any{"reconnected": false}}, fmt.Errorf("pgbouncer-reconnect: %w", err)
		}
		quiet := len(before) > 0
		if quiet {
			// RECONNECT closes a server that is still logging in as a
			// failed login: PgBouncer then answers clients "server login
			// has been failing" for server_login_retry (seen in CI at
			// load 10-25). That is the login-failure fault other kinds
			// inject; this one waits for a pool with no login under way.
			n, err := poolColumn(ctx, env, shard, "sv_login")
			quiet = err == nil && n == 0
		}
		if quiet || ctxtime.Sleep(wctx, 100*time.Millisecond) != nil {
			break
		}
	}
	wcancel()
	if _, err := consoleRun(ctx, env, shard, "RECONNECT "+consoleIdent(db)); err != nil {
		return Evidence{Fields: map[string]any{"reconnected": false}}, fmt.Errorf("pgbouncer-reconnect: %w", err)
	}
	f.mu.Lock()
	f.before, f.done = before, true
	f.mu.Unlock()
	return Evidence{Fields: map[string]any{"reconnected": true, "servers": len(before)}}, nil
}

// Heal watches SHOW SERVERS (at most reconnectWait) until a server
// connection that existed before RECONNECT is gone and a new one is
// there. Evidence: reconnected, servers, closed (connections of before
// gone), new (connections not seen before); landed when both are
// positive: RECONNECT closed connections in use and the pool
// re-established them.
func (f *pgbouncerReconnect) Heal(ctx context.Context, env *Env, shard int) (Evidence, error) {
	f.mu.Lock()
	before, done := f.before, f.done
	f.mu.Unlock()
	if !done {
		return Evidence{}, nil
	}
	db, err := env.database()
	if err != nil {
		return Evidence{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, reconnectWait)
	defer cancel()
	closed, fresh := 0, 0
	for {
		now, err := serverPIDs(ctx, env, shard, db)
		if err == nil {
			closed, fresh = 0, 0
			for pid := range before {
				if !now[pid] {
					closed++
				}
			}
			for pid := range now {
				if !before[pid] {
					fresh++
				}
			}
		}
		if (closed > 0 && fresh > 0) || ctxtime.Sleep(ctx, 100*time.Millisecond) != nil {
			break
		}
	}
	return Evidence{Landed: closed > 0 && fresh > 0, Fields: map[string]any{
		"reconnected": true, "servers": len(before), "closed": closed, "new": fresh,
	}}, nil
}

// serverPIDs returns the backend PIDs of database db's server connections
// in the shard's PgBouncer (SHOW SERVERS' remote_pid).
func serverPIDs(ctx context.Context, env *Env, shard int, db string) (map[string]bool, error) {
	res, err := consoleRun(ctx, env, shard, "SHOW SERVERS")
	if err != nil {
		return nil, err
	}
	out := map[string]bool{}
	found := false
	for _, r := range res {
		dbCol, pidCol := -1, -1
		for j, fd := range r.FieldDescriptions {
			switch fd.Name {
			case "database":
				dbCol = j
			case "remote_pid":
				pidCol = j
			}
		}
		if dbCol < 0 || pidCol < 0 {
			continue // not the server list (a console answers some commands with several results)
		}
		found = true
		for _, row := range r.Rows {
			if string(row[dbCol]) == db && string(row[pidCol]) != "0" {
				out[string(row[pidCol])] = true
			}
		}
	}
	if !found {
		return nil, fmt.Errorf("SHOW SERVERS of %s: no result with database and remote_pid columns (%d results)", env.shardName(shard), len(res))
	}
	return out, nil
}
