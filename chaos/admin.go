package chaos

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgshard/pgshard/internal/ctxtime"
)

// Application names that the faults never touch: the chaos tool's own
// admin sessions and the verifier's.
const (
	// ControlAppName is the application_name of the chaos tool's admin
	// connections; terminate and backend-kill spare its sessions.
	ControlAppName = "pgshard-chaos-control"
	// VerifyAppName is the verifier's application_name; spared too.
	VerifyAppName = "pgshard-verify"
)

// adminTimeout bounds one admin connection's work.
const adminTimeout = 10 * time.Second

// database is the workload's database: Env.Database, else the first
// shard's DSN's.
func (e *Env) database() (string, error) {
	if e.Database != "" {
		return e.Database, nil
	}
	sh, err := e.mapShard(0)
	if err != nil {
		return "", err
	}
	cfg, err := pgconn.ParseConfig(sh.DSN)
	if err != nil {
		return "", fmt.Errorf("the workload database: %w", err)
	}
	return cfg.Database, nil
}

// adminConnect opens a direct connection to shard i's Postgres (the
// original map's DSN), named ControlAppName.
func adminConnect(ctx context.Context, env *Env, i int) (*pgx.Conn, error) {
	sh, err := env.mapShard(i)
	if err != nil {
		return nil, err
	}
	cfg, err := pgx.ParseConfig(sh.DSN)
	if err != nil {
		return nil, fmt.Errorf("admin connection to %s: %w", sh.Name, err)
	}
	cfg.ConnectTimeout = 5 * time.Second
	cfg.RuntimeParams["application_name"] = ControlAppName
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("admin connection to %s: %w", sh.Name, err)
	}
	return conn, nil
}

// consoleConnect opens PgBouncer's admin console of shard i (database
// "pgbouncer" at the original map's pooler DSN, as the cluster user).
func consoleConnect(ctx context.Context, env *Env, i int) (*pgconn.PgConn, error) {
	sh, err := env.mapShard(i)
	if err != nil {
		return nil, err
	}
	if sh.PoolerDSN == "" {
		return nil, fmt.Errorf("shard %s has no PgBouncer (no pooler DSN in the map)", sh.Name)
	}
	cfg, err := pgconn.ParseConfig(sh.PoolerDSN)
	if err != nil {
		return nil, fmt.Errorf("PgBouncer console of %s: %w", sh.Name, err)
	}
	cfg.Database = "pgbouncer"
	if env.User != "" {
		cfg.User = env.User
	}
	cfg.ConnectTimeout = 5 * time.Second
	cfg.RuntimeParams = map[string]string{"application_name": ControlAppName}
	conn, err := pgconn.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("PgBouncer console of %s: %w", sh.Name, err)
	}
	return conn, nil
}

// consoleRun runs one admin console command (simple protocol) on a new
// connection and returns its results.
func consoleRun(ctx context.Context, env *Env, i int, cmd string) ([]*pgconn.Result, error) {
	conn, err := consoleConnect(ctx, env, i)
	if err != nil {
		return nil, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	res, err := conn.Exec(ctx, cmd).ReadAll()
	if err != nil {
		return nil, fmt.Errorf("PgBouncer console of %s: %s: %w", env.shardName(i), cmd, err)
	}
	return res, nil
}

// clientsWaiting sums cl_waiting of the workload database's pools in
// shard i's PgBouncer (SHOW POOLS).
func clientsWaiting(ctx context.Context, env *Env, i int) (int, error) {
	return poolColumn(ctx, env, i, "cl_waiting")
}

// poolColumn sums the integer column col (cl_waiting, sv_login, ...) of
// the workload database's pools in shard i's PgBouncer (SHOW POOLS).
func poolColumn(ctx context.Context, env *Env, i int, col string) (int, error) {
	db, err := env.database()
	if err != nil {
		return 0, err
	}
	res, err := consoleRun(ctx, env, i, "SHOW POOLS")
	if err != nil {
		return 0, err
	}
	total := 0
	for _, r := range res {
		dbCol, valCol := -1, -1
		for j, f := range r.FieldDescriptions {
			switch f.Name {
			case "database":
				dbCol = j
			case col:
				valCol = j
			}
		}
		if dbCol < 0 || valCol < 0 {
			return 0, fmt.Errorf("SHOW POOLS of %s: no database or %s column", env.shardName(i), col)
		}
		for _, row := range r.Rows {
			if string(row[dbCol]) != db {
				continue
			}
			n, err := strconv.Atoi(string(row[valCol]))
			if err != nil {
				return 0, fmt.Errorf("SHOW POOLS of %s: %s %q", env.shardName(i), col, row[valCol])
			}
			total += n
		}
	}
	return total, nil
}

// consoleIdent writes a database name for an admin console command: as
// it is when it is a plain identifier, else double-quoted.
func consoleIdent(name string) string {
	for _, c := range name {
		if c != '_' && (c < '0' || c > '9') && (c < 'a' || c > 'z') && (c < 'A' || c > 'Z') {
			return pgx.Identifier{name}.Sanitize()
		}
	}
	return name
}

// isNotPaused reports whether a RESUME failed only because nothing was
// paused (or PgBouncer has not seen the database yet: nothing to resume).
func isNotPaused(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && (strings.Contains(pe.Message, "not paused") || strings.Contains(pe.Message, "no such database"))
}

// backend is a row of pg_stat_activity.
type backend struct {
	PID   int    `json:"pid"`
	State string `json:"state"`
}

// workloadBackends lists the workload's client backends on shard i
// (never the chaos tool's or the verifier's, never conn's own), busy ones
// (active, idle in transaction) only unless all.
func workloadBackends(ctx context.Context, conn *pgx.Conn, db string, all bool) ([]backend, error) {
	q := `SELECT pid, coalesce(state, '') FROM pg_stat_activity
WHERE datname = $1 AND backend_type = 'client backend' AND pid <> pg_backend_pid()
  AND coalesce(application_name, '') NOT IN ($2, $3)`
	if !all {
		q += ` AND state IN ('active', 'idle in transaction')`
	}
	rows, err := conn.Query(ctx, q+` ORDER BY pid`, db, ControlAppName, VerifyAppName)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (backend, error) {
		var b backend
		err := r.Scan(&b.PID, &b.State)
		return b, err
	})
}

// fileSize is the size of path, 0 if it cannot be read.
func fileSize(path string) int64 {
	fi, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return fi.Size()
}

// maxLogLines bounds the log lines a fault's evidence carries.
const maxLogLines = 20

// logLines returns the lines of path written from offset on that contain
// any of patterns (at most maxLogLines, each cut to 300 bytes).
func logLines(path string, offset int64, patterns []string) []string {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	if _, err := f.Seek(offset, io.SeekStart); err != nil {
		return nil
	}
	var out []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() && len(out) < maxLogLines {
		line := sc.Text()
		for _, p := range patterns {
			if strings.Contains(line, p) {
				if len(line) > 300 {
					line = line[:300]
				}
				out = append(out, line)
				break
			}
		}
	}
	return out
}

// anyContains reports whether a line contains s.
func anyContains(lines []string, s string) bool {
	for _, l := range lines {
		if strings.Contains(l, s) {
			return true
		}
	}
	return false
}

// parentPID reads a process's parent from /proc (0 if it is gone).
func parentPID(pid int) int {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 2 {
		return 0
	}
	ppid, _ := strconv.Atoi(f[1])
	return ppid
}

// waitAccepting polls shard i with a direct connection until it answers
// (or ctx ends).
func waitAccepting(ctx context.Context, env *Env, i int) error {
	var last error
	for {
		actx, cancel := context.WithTimeout(ctx, 5*time.Second)
		conn, err := adminConnect(actx, env, i)
		if err == nil {
			_, err = conn.Exec(actx, "SELECT 1")
			conn.Close(context.WithoutCancel(ctx))
		}
		cancel()
		if err == nil {
			return nil
		}
		last = err
		if err := ctxtime.Sleep(ctx, 50*time.Millisecond); err != nil {
			return fmt.Errorf("shard %s does not accept connections: %w (last error: %v)", env.shardName(i), err, last)
		}
	}
}
