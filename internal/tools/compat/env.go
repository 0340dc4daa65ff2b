package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgshard/pgshard/cluster"
)

// env is the servers every target runs against: a 2-shard local cluster
// (Postgres + PgBouncer in transaction pooling per shard), a PgBouncer in
// session pooling for shard0, and the pgshard proxies.
type env struct {
	o       options
	c       *cluster.Cluster
	user    string
	bouncer *exec.Cmd // session-pooling PgBouncer
	bport   int
	proxies map[string]*proxyProc // by target name, per database
}

type proxyProc struct {
	cmd  *exec.Cmd
	addr string
}

// target is one endpoint a suite runs against.
type target struct {
	name string
	host string
	port int
	// shards: how many shards the endpoint spreads over (1 = one server).
	shards int
	// pooler: the endpoint goes through PgBouncer somewhere (the test
	// that crashes PgBouncer 1.18 is left out there).
	viaBouncer bool
	// proxy: the endpoint is pgshard.
	proxy bool
}

func (t target) dsn(db string) string {
	return fmt.Sprintf("postgres://postgres@%s/%s?sslmode=disable", net.JoinHostPort(t.host, strconv.Itoa(t.port)), db)
}

// proxyTargets are pgshard's targets: name, pool mode, shards.
var proxyTargets = []struct {
	name, mode string
	shards     int
}{
	{"pgshard-session", "session", 1},
	{"pgshard-transaction", "transaction", 1},
	{"pgshard-session-2shards", "session", 2},
	{"pgshard-transaction-2shards", "transaction", 2},
}

// targets lists the endpoints for database db, in scoreboard order.
func (e *env) targets(db string) []target {
	s0 := e.c.Shards[0]
	ts := []target{
		{name: "direct", host: s0.Host, port: s0.Port, shards: 1},
		{name: "pgbouncer-session", host: s0.Host, port: e.bport, shards: 1, viaBouncer: true},
		{name: "pgbouncer-transaction", host: s0.Host, port: s0.PoolerPort, shards: 1, viaBouncer: true},
	}
	for _, pt := range proxyTargets {
		p := e.proxies[pt.name+"/"+db]
		if p == nil {
			continue
		}
		host, port, _ := net.SplitHostPort(p.addr)
		n, _ := strconv.Atoi(port)
		ts = append(ts, target{name: pt.name, host: host, port: n, shards: pt.shards, proxy: true, viaBouncer: pt.mode == "transaction"})
	}
	return ts
}

func startEnv(ctx context.Context, o options) (*env, error) {
	e := &env{o: o, user: "postgres", proxies: map[string]*proxyProc{}}
	spec := cluster.Spec{Shards: 2, PgBouncer: true, Database: "pgx_test",
		Settings: map[string]string{"max_connections": "400"}}
	logf("starting a 2-shard cluster with PgBouncer")
	c, err := cluster.Up(ctx, filepath.Join(o.out, "cluster"), spec)
	if err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	e.c = c
	for i := range c.Shards {
		if err := setupPgxDB(ctx, c.Shards[i].DSN("pgx_test", e.user)); err != nil {
			return e, fmt.Errorf("shard%d: pgx test setup: %w", i, err)
		}
	}
	if err := e.startSessionBouncer(ctx, spec); err != nil {
		return e, err
	}
	for _, db := range []string{"pgx_test", "regression"} {
		if db == "regression" && o.regressSrc == "" {
			continue
		}
		for _, pt := range proxyTargets {
			if db == "regression" && pt.shards > 1 {
				continue
			}
			if err := e.startProxy(ctx, pt.name, pt.mode, pt.shards, db); err != nil {
				return e, err
			}
		}
	}
	return e, nil
}

// setupPgxDB does what pgx's testsetup/postgresql_setup.sql does that the
// suite needs without TLS or password environment variables.
func setupPgxDB(ctx context.Context, dsn string) error {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	for _, q := range []string{
		"CREATE EXTENSION IF NOT EXISTS hstore",
		"CREATE EXTENSION IF NOT EXISTS ltree",
		"DO $$BEGIN CREATE DOMAIN uint64 AS numeric(20,0); EXCEPTION WHEN duplicate_object THEN END$$",
		`DO $$BEGIN CREATE USER " tricky, ' } "" \ test user " SUPERUSER PASSWORD 'secret'; EXCEPTION WHEN duplicate_object THEN END$$`,
	} {
		if _, err := conn.Exec(ctx, q); err != nil {
			return fmt.Errorf("%s: %w", q, err)
		}
	}
	return nil
}

// createRegressionDB (re)creates the database pg_regress would, with its
// settings, on every shard (so each run starts from scratch).
func (e *env) createRegressionDB(ctx context.Context) error {
	for i := range e.c.Shards {
		conn, err := pgx.Connect(ctx, e.c.Shards[i].DSN("postgres", e.user))
		if err != nil {
			return err
		}
		qs := []string{
			// Other sessions (pooled connections) may still hold it.
			"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = 'regression' AND pid <> pg_backend_pid()",
			"DROP DATABASE IF EXISTS regression WITH (FORCE)",
			"CREATE DATABASE regression TEMPLATE=template0",
		}
		for _, s := range []string{"lc_messages TO 'C'", "lc_monetary TO 'C'", "lc_numeric TO 'C'", "lc_time TO 'C'", "bytea_output TO 'hex'", "timezone_abbreviations TO 'Default'"} {
			qs = append(qs, "ALTER DATABASE regression SET "+s)
		}
		for _, q := range qs {
			if _, err := conn.Exec(ctx, q); err != nil {
				conn.Close(ctx)
				return fmt.Errorf("shard%d: %s: %w", i, q, err)
			}
		}
		conn.Close(ctx)
	}
	return nil
}

// postgresCred is the credential of the postgres OS user (PgBouncer refuses
// to run as root).
func postgresCred() (*syscall.Credential, error) {
	if os.Getuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, err
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

func (e *env) startSessionBouncer(ctx context.Context, spec cluster.Spec) error {
	bins, err := cluster.FindBinaries(ctx, spec)
	if err != nil {
		return err
	}
	dir := filepath.Join(e.o.out, "pgbouncer-session")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	port, err := freePort()
	if err != nil {
		return err
	}
	s0 := e.c.Shards[0]
	ini := fmt.Sprintf(`[databases]
* = host=%s port=%d

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = %d
unix_socket_dir =
auth_type = trust
auth_file = %s/userlist.txt
admin_users = postgres
pool_mode = session
max_client_conn = 500
default_pool_size = 100
server_login_retry = 1
logfile = %s/pgbouncer.log
pidfile = %s/pgbouncer.pid
`, s0.Host, s0.Port, port, dir, dir, dir)
	if err := os.WriteFile(filepath.Join(dir, "pgbouncer.ini"), []byte(ini), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "userlist.txt"), []byte(`"postgres" ""`+"\n"), 0o644); err != nil {
		return err
	}
	cred, err := postgresCred()
	if err != nil {
		return err
	}
	if cred != nil {
		_ = os.Chown(dir, int(cred.Uid), int(cred.Gid))
	}
	cmd := exec.Command(bins.PgBouncer, filepath.Join(dir, "pgbouncer.ini"))
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Setpgid: true}
	cmd.Stdout, cmd.Stderr = nil, nil
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("pgbouncer (session): %w", err)
	}
	e.bouncer, e.bport = cmd, port
	return waitPort(ctx, net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), 30*time.Second)
}

// startProxy runs `pgshard proxy` for one target and database.
func (e *env) startProxy(ctx context.Context, name, mode string, shards int, db string) error {
	dir := filepath.Join(e.o.out, "proxy", name+"-"+db)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "shardmap:\n  epoch: 1\n  buckets: 4096\n  shards:\n")
	for i := 0; i < shards; i++ {
		s := e.c.Shards[i]
		fmt.Fprintf(&b, "    - {name: shard%d, ordinal: %d, dsn: %q, pooler_dsn: %q}\n", i, i, s.DSN(db, e.user), s.PoolerDSN(db, e.user))
	}
	b.WriteString("  ranges:\n")
	per := 4096 / shards
	for i := 0; i < shards; i++ {
		hi := (i+1)*per - 1
		if i == shards-1 {
			hi = 4095
		}
		fmt.Fprintf(&b, "    - {lo: %d, hi: %d, shard: shard%d}\n", i*per, hi, i)
	}
	fmt.Fprintf(&b, "proxy:\n  pool_mode: %s\n  verify_identity: false\n  pool_size: 100\n  max_clients: 1000\n  max_pinned: 500\n  default_shard: shard0\n", mode)
	cfg := filepath.Join(dir, "pgshard.yaml")
	if err := os.WriteFile(cfg, []byte(b.String()), 0o644); err != nil {
		return err
	}
	ready := filepath.Join(dir, "ready.json")
	_ = os.Remove(ready)
	logFile, err := os.Create(filepath.Join(dir, "proxy.log"))
	if err != nil {
		return err
	}
	cmd := exec.Command(e.o.pgshard, "proxy", "--config", cfg, "--listen", "127.0.0.1:0", "--ready-file", ready, "--trust-user", "*", "--log-level", "warn")
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.Env = cleanEnv(os.Environ())
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return fmt.Errorf("pgshard proxy %s: %w", name, err)
	}
	logFile.Close()
	deadline := time.Now().Add(60 * time.Second)
	for {
		if b, err := os.ReadFile(ready); err == nil {
			var r struct{ Addr string }
			if json.Unmarshal(b, &r) == nil && r.Addr != "" {
				e.proxies[name+"/"+db] = &proxyProc{cmd: cmd, addr: r.Addr}
				return nil
			}
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			_ = cmd.Process.Kill()
			_, _ = cmd.Process.Wait()
			return fmt.Errorf("pgshard proxy %s did not start; see %s", name, filepath.Join(dir, "proxy.log"))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func cleanEnv(env []string) []string {
	var out []string
	for _, kv := range env {
		if strings.HasPrefix(kv, "PGSHARD_") && !strings.HasPrefix(kv, "PGSHARD_TEST_") {
			continue
		}
		out = append(out, kv)
	}
	return out
}

// stop ends every process the run started, by PID, and the cluster.
func (e *env) stop() {
	for _, p := range e.proxies {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _, _ = p.cmd.Process.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			_ = p.cmd.Process.Kill()
			<-done
		}
	}
	if e.bouncer != nil {
		_ = e.bouncer.Process.Signal(syscall.SIGINT)
		done := make(chan struct{})
		go func() { _, _ = e.bouncer.Process.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = e.bouncer.Process.Kill()
			<-done
		}
	}
	if e.c != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if err := e.c.Down(ctx); err != nil {
			logf("stopping the cluster: %v", err)
		}
	}
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func waitPort(ctx context.Context, addr string, d time.Duration) error {
	deadline := time.Now().Add(d)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return errors.Join(fmt.Errorf("%s does not accept connections", addr), err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
