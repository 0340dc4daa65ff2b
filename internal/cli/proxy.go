package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/pgshard/pgshard/internal/config"
	"github.com/pgshard/pgshard/proxy"
	"github.com/pgshard/pgshard/proxy/route"
	"github.com/pgshard/pgshard/shardmap"
)

// proxyReady is what `pgshard proxy --ready-file` writes once it is ready.
type proxyReady struct {
	PID  int    `json:"pid"`
	Addr string `json:"addr"`
	// MetricsAddr is the Prometheus endpoint's address ("" if off).
	MetricsAddr string `json:"metrics_addr,omitempty"`
	// AdminDatabase is the admin console's database ("" if off).
	AdminDatabase string `json:"admin_database,omitempty"`
	// TLS is the client TLS mode (disable, allow, require).
	TLS string `json:"tls,omitempty"`
}

func newProxyCmd() *cobra.Command {
	var listen, readyFile, logLevel, cpuProfile, memProfile, handover, poolMode string
	var trustUsers []string
	cmd := &cobra.Command{
		Use:   "proxy",
		Short: "Run the Postgres wire-protocol sharding proxy",
		Long: `Run pgshard's proxy: clients (psql, pgbench, pgx, psycopg, JDBC, node-postgres,
...) connect to it as to one PostgreSQL database; each transaction runs on the
shard that owns the first key it touches, through each shard's PgBouncer
(proxy.use_pooler) or directly. Statements that belong to another shard than
their transaction's fail with SQLSTATE 0A000; key-less reads fan out and are
merged; key-less DDL runs on every shard.

The config's proxy section sets users (SCRAM-SHA-256 or trust), pool sizes,
limits, timeouts, TLS, the admin console, metrics and the sharding schema. At
start the proxy checks every shard's identity record against the map and
refuses to start on a mismatch; a shard that is down at start only fails the
transactions that need it.

Signals: SIGHUP reloads the config file and the shard map (RELOAD on the
admin console does the same); SIGTERM or SIGINT shuts down gracefully (stop
accepting, serve the connected sessions until they leave, at most
proxy.shutdown_timeout); a second one stops at once. With
proxy.handover_socket set, a new proxy process started with the same config
takes the listening socket over from the running one, which then drains: a
restart without refused or dropped connections.

With proxy.catalog the map is the catalog's, followed as it changes, and
the proxy holds a lease there: it accepts clients (and writes --ready-file)
only once it holds its first lease, and fails after 20 s without one; while
the lease is not live later on, statements routed by a key are refused
(57P03).`,
		Args: cobra.NoArgs,
	}
	cfgPath := addConfigFlag(cmd)
	cmd.Flags().StringVar(&listen, "listen", "", "address to listen on (default proxy.listen, 127.0.0.1:6543); port 0 picks a free port")
	cmd.Flags().StringVar(&poolMode, "pool-mode", "", "transaction or session (default proxy.pool_mode, transaction)")
	cmd.Flags().StringArrayVar(&trustUsers, "trust-user", nil, "also admit USER without a password (local development; repeatable)")
	cmd.Flags().StringVar(&readyFile, "ready-file", "", "write {\"pid\":...,\"addr\":...} to this file once ready (listening; with proxy.catalog, holding its first lease)")
	cmd.Flags().StringVar(&handover, "handover-socket", "", "unix socket for zero-downtime restarts (proxy.handover_socket): take the listening socket over from the proxy serving there, and offer it to the next one")
	cmd.Flags().StringVar(&logLevel, "log-level", "info", "log level: debug, info, warn or error")
	cmd.Flags().StringVar(&cpuProfile, "cpuprofile", "", "write a CPU profile of the whole run to this file")
	_ = cmd.Flags().MarkHidden("cpuprofile")
	cmd.Flags().StringVar(&memProfile, "memprofile", "", "write an allocation profile of the whole run to this file at exit")
	_ = cmd.Flags().MarkHidden("memprofile")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		load := func() (*config.Config, error) {
			return config.Load(config.Options{Path: *cfgPath, Flags: cmd.Flags(), Bind: map[string]string{"proxy.listen": "listen", "proxy.handover_socket": "handover-socket", "proxy.pool_mode": "pool-mode"}, RequireMap: true, CatalogMap: true})
		}
		cfg, err := load()
		if err != nil {
			return err
		}
		var level slog.Level
		if err := level.UnmarshalText([]byte(logLevel)); err != nil {
			return usagef("--log-level: %v", err)
		}
		log := slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), &slog.HandlerOptions{Level: level}))
		cat, err := openProxyCatalog(cmd.Context(), cfg, log)
		if err != nil {
			return err
		}
		defer cat.close()
		pc, err := proxyConfig(cfg, trustUsers, log)
		if err != nil {
			return err
		}
		if cat != nil {
			cat.apply(&pc)
		}
		pc.Reload = func(ctx context.Context) (proxy.Config, error) {
			next, err := load()
			if err != nil {
				return proxy.Config{}, err
			}
			if (next.Proxy.Catalog == "") != (cat == nil) {
				return proxy.Config{}, fmt.Errorf("config: proxy.catalog changed between a map file and a catalog: restart the proxy to change its map source")
			}
			if cat != nil {
				if err := cat.loadInto(ctx, next); err != nil {
					return proxy.Config{}, err
				}
			}
			pc, err := proxyConfig(next, trustUsers, log)
			if err == nil && cat != nil {
				cat.apply(&pc)
			}
			return pc, err
		}
		if cpuProfile != "" {
			f, err := os.Create(cpuProfile)
			if err != nil {
				return err
			}
			defer f.Close()
			if err := pprof.StartCPUProfile(f); err != nil {
				return err
			}
			defer pprof.StopCPUProfile()
		}
		if memProfile != "" {
			defer writeAllocProfile(memProfile, log)
		}
		setProcs(pc.Procs, log)
		return runProxy(cmd.Context(), pc, cfg.Proxy.VerifyIdentity, readyFile, log)
	}
	return cmd
}

// setProcs applies proxy.procs once, at start (config.DefaultProxyProcs
// says why 1 is the default); 0 keeps Go's own GOMAXPROCS. A reload never
// changes it (the proxy reports that a restart is needed).
func setProcs(n int, log *slog.Logger) {
	if n <= 0 {
		return
	}
	if env := os.Getenv("GOMAXPROCS"); env != "" && env != strconv.Itoa(n) {
		log.Info("proxy.procs overrides the GOMAXPROCS environment variable (set proxy.procs: 0 to use it)", "procs", n, "GOMAXPROCS", env)
	}
	runtime.GOMAXPROCS(n)
}

// writeAllocProfile writes the allocation profile (pprof's "allocs": every
// allocation sampled since the start) to path (--memprofile).
func writeAllocProfile(path string, log *slog.Logger) {
	f, err := os.Create(path)
	if err == nil {
		err = pprof.Lookup("allocs").WriteTo(f, 0)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		log.Error("memprofile", "err", err)
	}
}

// proxyConfig builds the proxy's configuration from the loaded config.
func proxyConfig(cfg *config.Config, trustUsers []string, log *slog.Logger) (proxy.Config, error) {
	x := cfg.Proxy
	schema, err := x.Schema.Route()
	if err != nil {
		return proxy.Config{}, fmt.Errorf("config: proxy.schema: %w", err)
	}
	an, err := route.New(cfg.Map, schema, route.Options{DefaultShard: x.DefaultShard})
	if err != nil {
		return proxy.Config{}, fmt.Errorf("proxy: %w", err)
	}
	pc := proxy.Config{
		Map:                      cfg.Map,
		Analyzer:                 an,
		HintKeyType:              schema.HintType,
		Listen:                   x.Listen,
		UsePooler:                x.UsePooler,
		PoolSize:                 x.PoolSize,
		MaxClients:               x.MaxClients,
		MaxMessageSize:           x.MaxMessageSize,
		MaxPipelineBytes:         x.MaxPipelineBytes,
		ConnectTimeout:           x.ConnectTimeout,
		PoolTimeout:              x.PoolTimeout,
		IdleTimeout:              x.IdleTimeout,
		IdleInTransactionTimeout: x.IdleInTransactionTimeout,
		DefaultShard:             x.DefaultShard,
		StatementCacheSize:       x.StatementCacheSize,
		UnnamedStatements:        unnamedMode(x.CacheUnnamedStatements),
		MergeGroupLimit:          x.MergeGroupLimit,
		CursorBufferBytes:        x.CursorBufferBytes,
		VerifyIdentity:           x.VerifyIdentity,
		MetricsListen:            x.MetricsListen,
		MaxPinned:                x.MaxPinned,
		Logger:                   log,
		HealthInterval:           x.HealthInterval,
		AdminUsers:               x.AdminUsers,
		AdminDatabase:            x.AdminDatabase,
		ShutdownTimeout:          x.ShutdownTimeout,
		PauseTimeout:             x.PauseTimeout,
		Procs:                    x.Procs,
		ReusePort:                x.ReusePort,
		HandoverSocket:           relToConfig(cfg.Path, x.HandoverSocket),
		PgBouncer: proxy.BouncerConfig{
			AdminUser:     x.PgBouncer.AdminUser,
			AdminPassword: x.PgBouncer.AdminPassword,
			PollInterval:  x.PgBouncer.PollInterval,
			MaxWaiting:    x.PgBouncer.MaxWaiting,
			MaxWait:       x.PgBouncer.MaxWait,
		},
	}
	mode, err := proxy.ParseTLSMode(x.TLS.Mode)
	if err != nil {
		return proxy.Config{}, fmt.Errorf("config%s: proxy.tls.mode: %w", inConfigFile(cfg.Path), err)
	}
	pc.TLS = proxy.TLSConfig{Mode: mode, CertFile: relToConfig(cfg.Path, x.TLS.CertFile), KeyFile: relToConfig(cfg.Path, x.TLS.KeyFile)}
	if pc.PoolMode, err = proxy.ParsePoolMode(x.PoolMode); err != nil {
		return proxy.Config{}, fmt.Errorf("config: proxy.pool_mode: %w", err)
	}
	if pc.Fence, err = proxy.ParseFenceMode(x.Fence); err != nil {
		return proxy.Config{}, fmt.Errorf("config: proxy.fence: %w", err)
	}
	if err := addDatabases(&pc, cfg, schema); err != nil {
		return proxy.Config{}, err
	}
	for _, u := range x.Users {
		pm, err := proxy.ParsePoolMode(u.PoolMode)
		if err != nil {
			return proxy.Config{}, fmt.Errorf("config: proxy.users: %s: %w", u.Name, err)
		}
		pc.Users = append(pc.Users, proxy.User{Name: u.Name, Password: u.Password, Trust: u.Trust, PoolMode: pm})
	}
	for _, u := range trustUsers {
		if u == "" {
			return proxy.Config{}, usagef("--trust-user: empty user name")
		}
		dup := false
		for _, have := range pc.Users {
			dup = dup || have.Name == u
		}
		if !dup {
			pc.Users = append(pc.Users, proxy.User{Name: u, Trust: true})
		}
	}
	if len(pc.Users) == 0 {
		return proxy.Config{}, fmt.Errorf("config%s: proxy.users is empty: nobody could log in (add users, or --trust-user NAME for local development)", inConfigFile(cfg.Path))
	}
	return pc, nil
}

// relToConfig resolves a path given in the config file relative to it.
func relToConfig(cfgPath, p string) string {
	if p == "" || filepath.IsAbs(p) || cfgPath == "" {
		return p
	}
	return filepath.Join(filepath.Dir(cfgPath), p)
}

func inConfigFile(path string) string {
	if path == "" {
		return ""
	}
	return " " + path
}

// runProxy verifies the shards, listens (or takes the listening socket
// over from a running proxy), announces readiness and serves until ctx
// ends or a graceful shutdown (SIGTERM, SIGINT, SHUTDOWN, a successor
// taking over) drained. SIGHUP reloads.
func runProxy(ctx context.Context, pc proxy.Config, verify bool, readyFile string, log *slog.Logger) error {
	if Version != "dev" {
		proxy.BuildVersion = Version // SHOW VERSION, pgshard_build_info
	}
	srv, err := proxy.New(pc)
	if err != nil {
		return err
	}
	if verify {
		down, err := srv.Verify(ctx)
		if err != nil {
			return fmt.Errorf("proxy: the shard map and the shards disagree: %w", err)
		}
		if len(down) > 0 {
			log.Warn("starting with shards down", "shards", strings.Join(down, ","))
		}
	}
	// Signals: the command's context ends at the first SIGINT/SIGTERM (the
	// main's handler); this proxy takes them as a graceful shutdown, and
	// serves on a context only a second signal, or a cancellation that is
	// not a signal (a caller's), ends at once.
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGHUP, syscall.SIGTERM, os.Interrupt)
	defer signal.Stop(sigs)
	serveCtx, hardStop := context.WithCancel(context.WithoutCancel(ctx))
	defer hardStop()

	var h *proxy.Handover
	if pc.HandoverSocket != "" {
		if h, err = proxy.TakeOver(ctx, pc.HandoverSocket); err != nil {
			log.Warn("hand-over failed; listening anew", "err", err)
			h = nil
		}
	}
	if h != nil && !sameListenAddr(pc.Listen, h.Listener.Addr().String()) {
		// Another proxy's socket: never take over what this one was not
		// configured to serve (the predecessor keeps serving).
		h.Abort()
		return fmt.Errorf("proxy: the proxy on the hand-over socket %s listens on %s, this one is configured for %s", pc.HandoverSocket, h.Listener.Addr(), pc.Listen)
	}
	var ln, mln net.Listener
	if h != nil {
		ln, mln = h.Listener, h.Metrics
		log.Info("took the listening socket over from the running proxy", "pid", h.FromPID, "addr", ln.Addr().String())
	} else if ln, err = proxy.Listen(ctx, pc.Listen, pc.ReusePort); err != nil {
		return fmt.Errorf("proxy: %w", err)
	}
	if mln == nil && pc.MetricsListen != "" {
		if mln, err = proxy.Listen(ctx, pc.MetricsListen, pc.ReusePort); err != nil {
			_ = ln.Close()
			return fmt.Errorf("proxy: metrics: %w", err)
		}
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	var readyErr error
	stopReady := func() {}
	if readyFile != "" {
		r := proxyReady{PID: os.Getpid(), Addr: ln.Addr().String(), TLS: pc.TLS.Mode.String()}
		if mln != nil {
			r.MetricsAddr = mln.Addr().String()
		}
		if len(pc.AdminUsers) > 0 {
			r.AdminDatabase = pc.AdminDatabase
			if r.AdminDatabase == "" {
				r.AdminDatabase = proxy.DefaultAdminDatabase
			}
		}
		defer removeReadyFileIfOurs(readyFile)
		// Written once the server is ready: it accepts clients (with
		// proxy.catalog, once it holds its first lease).
		var readyCtx context.Context
		readyCtx, stopReady = context.WithCancel(serveCtx)
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := srv.Addr(readyCtx); err != nil {
				return // Serve ended first
			}
			if err := writeReadyFile(readyFile, r); err != nil {
				readyErr = err
				hardStop()
			}
		}()
	}
	wg.Add(1)
	go func() { // signals
		defer wg.Done()
		ctxDone := ctx.Done()
		terms := 0
		for {
			select {
			case <-done:
				return
			case <-ctxDone:
				ctxDone = nil
				if !isSignalCause(ctx) {
					hardStop() // the caller cancelled: stop at once
				}
			case sig := <-sigs:
				if sig == syscall.SIGHUP {
					if res, err := srv.ReloadFromSource(serveCtx, "SIGHUP"); err == nil {
						log.Info("SIGHUP: " + res.String())
					}
					continue
				}
				terms++
				if terms == 1 {
					log.Info("graceful shutdown (" + sig.String() + "; another signal stops at once)")
					srv.Shutdown()
				} else {
					log.Warn("stopping at once (" + sig.String() + ")")
					hardStop()
				}
			}
		}
	}()
	if h != nil {
		err = srv.ServeHandover(serveCtx, h)
	} else {
		err = srv.ServeListeners(serveCtx, ln, mln)
	}
	stopReady() // Serve ended: so does the wait for its readiness
	close(done)
	wg.Wait()
	if err == nil && readyErr != nil {
		err = readyErr
	}
	return err
}

// sameListenAddr reports whether a configured listen address (port 0: any)
// names the address a predecessor listens on.
func sameListenAddr(configured, actual string) bool {
	ch, cp, err1 := net.SplitHostPort(configured)
	ah, ap, err2 := net.SplitHostPort(actual)
	if err1 != nil || err2 != nil {
		return false
	}
	if cp != "0" && cp != ap {
		return false
	}
	if ch == "" || ch == ah {
		return true
	}
	ips, err := net.LookupIP(ch)
	if err != nil {
		return false
	}
	for _, ip := range ips {
		if ip.String() == ah {
			return true
		}
	}
	return false
}

// isSignalCause reports whether ctx ended because the process got a signal
// (signal.NotifyContext's cause says "... signal received").
func isSignalCause(ctx context.Context) bool {
	c := context.Cause(ctx)
	return c != nil && strings.HasSuffix(c.Error(), "signal received")
}

// writeReadyFile writes r to path atomically.
func writeReadyFile(path string, r proxyReady) error {
	b, _ := json.Marshal(r)
	tmp := fmt.Sprintf("%s.%d.tmp", path, os.Getpid())
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// removeReadyFileIfOurs removes the ready file unless a successor (a
// hand-over) has replaced it with its own.
func removeReadyFileIfOurs(path string) {
	b, err := os.ReadFile(path)
	if err != nil {
		return
	}
	var r proxyReady
	if json.Unmarshal(b, &r) == nil && r.PID != os.Getpid() {
		return
	}
	_ = os.Remove(path)
}

// Local development: `pgshard dev up --proxy` runs a proxy for the dev
// cluster as a detached process, recorded in DIR/proxy.json (PID and
// address); `dev status` reports it and `dev down` stops it first.

// devProxyFile is where the dev proxy announces itself.
func devProxyFile(dir string) string { return filepath.Join(dir, "proxy.json") }

// devProxyAddrFile keeps the address the dev proxy last listened on, so a
// restarted proxy (dev down, dev up) keeps its DSN.
func devProxyAddrFile(dir string) string { return filepath.Join(dir, "proxy.addr") }

// devProxyListen is the address a new dev proxy listens on: 127.0.0.1:port
// when port is set (it must be free), else the one it had last while it
// is free, else any free port.
func devProxyListen(dir string, port int) (string, error) {
	if port > 0 {
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		if err := portFree(addr); err != nil {
			return "", fmt.Errorf("--proxy-port %d: %w", port, err)
		}
		return addr, nil
	}
	if b, err := os.ReadFile(devProxyAddrFile(dir)); err == nil {
		if addr := strings.TrimSpace(string(b)); portFree(addr) == nil {
			return addr, nil
		}
	}
	return "127.0.0.1:0", nil
}

// portFree reports why addr cannot be listened on (nil: it can).
func portFree(addr string) error {
	if _, port, err := net.SplitHostPort(addr); err != nil || port == "0" || port == "" {
		return fmt.Errorf("%q is not a host:port", addr)
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	return l.Close()
}

// devProxyLog is the dev proxy's log.
func devProxyLog(dir string) string { return filepath.Join(dir, "proxy.log") }

// readDevProxy returns the running dev proxy of dir, nil if none runs.
func readDevProxy(dir string) *proxyReady {
	b, err := os.ReadFile(devProxyFile(dir))
	if err != nil {
		return nil
	}
	var r proxyReady
	if json.Unmarshal(b, &r) != nil || r.PID <= 0 || !isDevProxy(r.PID, dir) {
		return nil
	}
	return &r
}

// isDevProxy reports whether pid is alive and is the proxy of dir (its
// command line names dir's ready file), so a recycled PID is never
// mistaken for it.
func isDevProxy(pid int, dir string) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return false
	}
	if st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err == nil {
		if i := strings.LastIndexByte(string(st), ')'); i > 0 && len(st) > i+2 && st[i+2] == 'Z' {
			return false // exited, not yet reaped
		}
	}
	args := strings.Split(string(b), "\x00")
	want, _ := filepath.Abs(devProxyFile(dir))
	for i, a := range args {
		if a == "--ready-file" && i+1 < len(args) && args[i+1] == want {
			return true
		}
	}
	return false
}

// devProxyDSN is the DSN clients use for the dev proxy.
func devProxyDSN(r *proxyReady, user, database string) string {
	return fmt.Sprintf("postgres://%s@%s/%s?sslmode=disable", user, r.Addr, database)
}

// startDevProxy starts (or reuses) the dev cluster's proxy and waits until
// it accepts connections.
func startDevProxy(ctx context.Context, dir, bin, user, poolMode string, port int) (*proxyReady, bool, error) {
	if r := readDevProxy(dir); r != nil {
		if _, p, _ := net.SplitHostPort(r.Addr); port > 0 && p != strconv.Itoa(port) {
			return nil, false, fmt.Errorf("the dev proxy already runs on %s, not port %d: `pgshard dev down --dir %s` first to move it", r.Addr, port, dir)
		}
		return r, true, nil
	}
	_ = os.Remove(devProxyFile(dir))
	listen, err := devProxyListen(dir, port)
	if err != nil {
		return nil, false, err
	}
	if bin == "" {
		var err error
		if bin, err = os.Executable(); err != nil {
			return nil, false, fmt.Errorf("start the dev proxy: %w", err)
		}
	}
	ready, err := filepath.Abs(devProxyFile(dir))
	if err != nil {
		return nil, false, err
	}
	logf, err := os.OpenFile(devProxyLog(dir), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, false, err
	}
	defer logf.Close()
	cfgPath, err := filepath.Abs(devConfigPath(dir))
	if err != nil {
		return nil, false, err
	}
	args := []string{"proxy", "--config", cfgPath, "--listen", listen, "--trust-user", user, "--ready-file", ready}
	if poolMode != "" {
		args = append(args, "--pool-mode", poolMode)
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Env = cleanProxyEnv(os.Environ())
	// Its own session: the proxy outlives `dev up` and ignores its Ctrl-C.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return nil, false, fmt.Errorf("start the dev proxy (%s): %w", bin, err)
	}
	pid := cmd.Process.Pid
	_ = cmd.Process.Release()
	deadline := time.Now().Add(60 * time.Second)
	for {
		if r := readDevProxy(dir); r != nil {
			conn, err := net.DialTimeout("tcp", r.Addr, time.Second)
			if err == nil {
				_ = conn.Close()
				_ = os.WriteFile(devProxyAddrFile(dir), []byte(r.Addr+"\n"), 0o644) // the next start's address
				return r, false, nil
			}
		}
		var ws syscall.WaitStatus
		if wpid, _ := syscall.Wait4(pid, &ws, syscall.WNOHANG, nil); wpid == pid || syscall.Kill(pid, 0) != nil {
			return nil, false, fmt.Errorf("the dev proxy exited during startup; see %s:\n%s", devProxyLog(dir), tailFile(devProxyLog(dir), 10))
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			_, _ = syscall.Wait4(pid, nil, 0, nil)
			if ctx.Err() != nil {
				return nil, false, ctx.Err()
			}
			return nil, false, fmt.Errorf("the dev proxy did not start within 60s; see %s", devProxyLog(dir))
		}
		t := time.NewTimer(50 * time.Millisecond)
		select {
		case <-ctx.Done():
		case <-t.C:
		}
		t.Stop()
	}
}

// cleanProxyEnv drops PGSHARD_* settings of the caller: the dev proxy runs
// on the dev config alone.
func cleanProxyEnv(env []string) []string {
	var out []string
	for _, kv := range env {
		if strings.HasPrefix(kv, config.EnvPrefix+"_") && !strings.HasPrefix(kv, config.EnvPrefix+"_TEST_") {
			continue
		}
		out = append(out, kv)
	}
	return out
}

// stopDevProxy stops the dev proxy of dir (by its verified PID): SIGTERM,
// then SIGKILL after 15s. It reports whether one was running.
func stopDevProxy(ctx context.Context, dir string) (bool, error) {
	r := readDevProxy(dir)
	if r == nil {
		_ = os.Remove(devProxyFile(dir))
		return false, nil
	}
	if err := syscall.Kill(r.PID, syscall.SIGTERM); err != nil && err != syscall.ESRCH {
		return true, fmt.Errorf("stop the dev proxy (pid %d): %w", r.PID, err)
	}
	deadline := time.Now().Add(15 * time.Second)
	for isDevProxy(r.PID, dir) {
		_, _ = syscall.Wait4(r.PID, nil, syscall.WNOHANG, nil) // reap it if it is our child
		if time.Now().After(deadline) || ctx.Err() != nil {
			_ = syscall.Kill(r.PID, syscall.SIGKILL)
			deadline = time.Now().Add(5 * time.Second)
		}
		t := time.NewTimer(20 * time.Millisecond)
		select {
		case <-ctx.Done():
		case <-t.C:
		}
		t.Stop()
	}
	_, _ = syscall.Wait4(r.PID, nil, syscall.WNOHANG, nil)
	_ = os.Remove(devProxyFile(dir))
	return true, nil
}

// tailFile returns the last n lines of a file.
func tailFile(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

func unnamedMode(cache bool) proxy.UnnamedMode {
	if cache {
		return proxy.UnnamedCached
	}
	return proxy.UnnamedPassThrough
}

// addDatabases turns proxy.databases into the proxy's allow-list (names of
// the config's own sharded database) and its extra databases: an
// unsharded passthrough (dsn: a map of one shard, where every statement
// is routable) or a sharded database with a map file of its own.
func addDatabases(pc *proxy.Config, cfg *config.Config, schema route.Schema) error {
	names := make([]string, 0, len(cfg.Proxy.Databases))
	for name := range cfg.Proxy.Databases {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		d := cfg.Proxy.Databases[name]
		if d.DSN == "" && d.Map == "" {
			pc.Databases = append(pc.Databases, name)
			continue
		}
		var m *shardmap.Map
		if d.DSN != "" {
			m = &shardmap.Map{Epoch: 1, Buckets: cfg.Map.Buckets,
				Shards: []shardmap.Shard{{Name: "db", Ordinal: 0, DSN: d.DSN, PoolerDSN: d.PoolerDSN}},
				Ranges: []shardmap.Range{{Lo: 0, Hi: cfg.Map.Buckets - 1, Shard: "db"}}}
			if err := m.Validate(); err != nil {
				return fmt.Errorf("config: proxy.databases.%s: %w", name, err)
			}
		} else {
			p := d.Map
			if !filepath.IsAbs(p) && cfg.Path != "" {
				p = filepath.Join(filepath.Dir(cfg.Path), p)
			}
			b, err := os.ReadFile(p)
			if err != nil {
				return fmt.Errorf("config: proxy.databases.%s.map: %w", name, err)
			}
			if m, err = shardmap.Parse(b); err != nil {
				return fmt.Errorf("config: proxy.databases.%s.map %s: %w", name, p, err)
			}
		}
		an, err := route.New(m, schema, route.Options{DefaultShard: d.DefaultShard})
		if err != nil {
			return fmt.Errorf("config: proxy.databases.%s: %w", name, err)
		}
		sub := *pc
		sub.Map, sub.Analyzer, sub.Databases, sub.ExtraDatabases = m, an, nil, nil
		sub.DefaultShard = d.DefaultShard
		// A passthrough database has no pgshard identity record.
		sub.VerifyIdentity = pc.VerifyIdentity && d.DSN == ""
		if d.PoolMode != "" {
			pm, err := proxy.ParsePoolMode(d.PoolMode)
			if err != nil {
				return fmt.Errorf("config: proxy.databases.%s.pool_mode: %w", name, err)
			}
			sub.PoolMode = pm
		}
		pc.ExtraDatabases = append(pc.ExtraDatabases, proxy.Database{Name: name, Config: sub})
	}
	return nil
}
