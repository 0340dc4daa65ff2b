package cluster

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"golang.org/x/sync/errgroup"
)

// Local returns the provider that runs the installed PostgreSQL and PgBouncer
// binaries as detached processes (see the package documentation).
//
// Its Up starts a new cluster in dir or reuses the one recorded there: servers
// that run and answer are kept, dead ones are restarted (on their old ports if
// free, else on new ones), missing databases and roles are created, changed
// settings are written and reloaded. A spec with another shard count or
// PgBouncer choice than the recorded cluster is an error; one asking for a
// catalog server (Spec.CatalogServer) adds it to a cluster without, and a
// cluster with one keeps it whatever the spec says. If ctx is
// cancelled, or a server fails to start, everything this Up started is
// stopped again and the error returned (wrapping ctx.Err() on
// cancellation); the directory and its logs stay.
func Local() Provider { return localProvider{} }

type localProvider struct{}

const localName = "local"

func (localProvider) Name() string { return localName }

// Available checks for the PostgreSQL binaries (and, as root, a "postgres"
// OS user). It does not check for PgBouncer; AvailableFor does when the spec
// asks for it.
func (p localProvider) Available(ctx context.Context) error { return p.AvailableFor(ctx, Spec{}) }

// AvailableFor checks what spec needs: the binaries and the OS user.
func (localProvider) AvailableFor(ctx context.Context, spec Spec) error {
	if _, err := currentRunAs(); err != nil {
		return fmt.Errorf("%w: local: %w", ErrUnavailable, err)
	}
	if _, err := FindBinaries(ctx, spec.withDefaults()); err != nil {
		return fmt.Errorf("%w: local: %w", ErrUnavailable, err)
	}
	return nil
}

// Paths inside a shard directory.
func dataDir(shardDir string) string     { return filepath.Join(shardDir, "data") }
func pgLog(shardDir string) string       { return filepath.Join(shardDir, "postgres.log") }
func bouncerIni(shardDir string) string  { return filepath.Join(shardDir, "pgbouncer.ini") }
func bouncerLog(shardDir string) string  { return filepath.Join(shardDir, "pgbouncer.log") }
func bouncerPid(shardDir string) string  { return filepath.Join(shardDir, "pgbouncer.pid") }
func bouncerAuth(shardDir string) string { return filepath.Join(shardDir, "userlist.txt") }

// confFile is the settings file, in the data directory, that postgresql.conf
// includes.
const confFile = "pgshard.conf"

func (p localProvider) Up(ctx context.Context, dir string, spec Spec) (*Cluster, error) {
	spec = spec.withDefaults()
	if err := spec.Validate(); err != nil {
		return nil, err
	}
	if dir == "" {
		return nil, errors.New("cluster up: no directory given")
	}
	dir, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	run, err := currentRunAs()
	if err != nil {
		return nil, err
	}
	bins, err := FindBinaries(ctx, spec)
	if err != nil {
		return nil, err
	}
	if err := prepareDir(dir); err != nil {
		return nil, err
	}
	if err := run.checkTraversable(dir); err != nil {
		return nil, err
	}
	lock, err := lockDir(ctx, dir)
	if err != nil {
		return nil, err
	}
	defer lock.unlock()

	st, err := readState(dir)
	switch {
	case notExist(err):
		st = &state{Provider: localName, Spec: spec, Binaries: bins, RunAs: run.Name}
		for i := range spec.Shards {
			name := "shard" + strconv.Itoa(i)
			st.Shards = append(st.Shards, shardState{Shard: Shard{
				Name: name, Ordinal: i, Host: "127.0.0.1", Dir: filepath.Join(dir, name),
			}})
		}
	case err != nil:
		return nil, err
	default:
		if st.Provider != localName {
			return nil, fmt.Errorf("%s holds a %s cluster, not a local one; run `pgshard dev down --purge --dir %s` or use another --dir",
				dir, st.Provider, dir)
		}
		if d := sameShape(st.Spec, spec); d != "" {
			return nil, fmt.Errorf("%s already holds a cluster of %s; run `pgshard dev down --purge --dir %s` first, or use another --dir",
				dir, d, dir)
		}
		if st.Binaries.Major != 0 && st.Binaries.Major != bins.Major {
			return nil, fmt.Errorf("%s holds a PostgreSQL %d cluster but the binaries found are PostgreSQL %d (%s); set the bin dir, or run `pgshard dev down --purge --dir %s`",
				dir, st.Binaries.Major, bins.Major, bins.BinDir, dir)
		}
		// Roles only accumulate: other users of the directory may rely on
		// the ones already there.
		spec.Roles = slices.Compact(slices.Sorted(slices.Values(append(spec.Roles, st.Spec.Roles...))))
		st.Spec, st.Binaries, st.RunAs = spec, bins, run.Name
	}
	if spec.CatalogServer && st.Catalog == nil {
		if slices.ContainsFunc(st.Shards, func(s shardState) bool { return s.Name == CatalogServerName }) {
			return nil, fmt.Errorf("%s: a shard is called %q, the name of the catalog server's directory; use another --dir", dir, CatalogServerName)
		}
		st.Catalog = &shardState{Shard: Shard{
			Name: CatalogServerName, Ordinal: -1, Host: "127.0.0.1", Dir: filepath.Join(dir, CatalogServerName),
		}}
	}
	// A reused cluster keeps its catalog server.
	spec.CatalogServer = st.Catalog != nil
	st.Spec.CatalogServer = spec.CatalogServer
	st.Spec.Log = nil

	u := newUpper(dir, spec, bins, run, st)
	if err := u.up(ctx); err != nil {
		return nil, err
	}
	c := u.cluster()
	c.Spec.Log = spec.Log
	return c, nil
}

// prepareDir creates dir, or opens up an existing one made for us (empty,
// e.g. by os.MkdirTemp with mode 0700, or holding our state file) so the
// servers' OS user can traverse it. Other existing directories keep their
// mode: checkTraversable then says what is wrong.
func prepareDir(dir string) error {
	ents, err := os.ReadDir(dir)
	switch {
	case notExist(err):
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
	case err != nil:
		return err
	case len(ents) > 0 && !slices.ContainsFunc(ents, func(e os.DirEntry) bool { return e.Name() == StateFile }):
		return nil
	}
	return os.Chmod(dir, 0o755)
}

// upper brings one cluster directory up.
type upper struct {
	dir  string
	spec Spec
	bins Binaries
	run  runAs

	mu       sync.Mutex // guards st, reserved, started
	st       *state
	reserved map[int]bool // ports in use by this cluster
	started  []proc       // processes this Up started, to stop on failure
}

func newUpper(dir string, spec Spec, bins Binaries, run runAs, st *state) *upper {
	u := &upper{dir: dir, spec: spec, bins: bins, run: run, st: st, reserved: map[int]bool{}}
	for _, s := range st.Shards {
		u.reserved[s.Port], u.reserved[s.PoolerPort] = true, true
	}
	if st.Catalog != nil {
		u.reserved[st.Catalog.Port] = true
	}
	return u
}

func (u *upper) cluster() *Cluster {
	return newLocalCluster(u.dir, u.st, u.bins, u.run)
}

func newLocalCluster(dir string, st *state, bins Binaries, run runAs) *Cluster {
	c := &Cluster{Dir: dir, Provider: localName, Spec: st.Spec, backend: &localBackend{bins: bins, run: run}}
	for _, s := range st.Shards {
		c.Shards = append(c.Shards, s.Shard)
	}
	if st.Catalog != nil {
		cat := st.Catalog.Shard
		c.Catalog = &cat
	}
	return c
}

func (u *upper) up(ctx context.Context) (err error) {
	start := time.Now()
	if err := u.save(); err != nil {
		return err
	}
	var template string
	if slices.ContainsFunc(u.st.Shards, func(s shardState) bool { return !s.Initialized }) || (u.st.Catalog != nil && !u.st.Catalog.Initialized) {
		if template, err = ensureTemplate(ctx, u.bins, u.run, u.spec); err != nil {
			return err
		}
	}
	g, gctx := errgroup.WithContext(ctx)
	for i := range u.st.Shards {
		g.Go(func() error { return u.upShard(gctx, i, template) })
	}
	if u.st.Catalog != nil {
		g.Go(func() error { return u.upShard(gctx, catalogIndex, template) })
	}
	err = g.Wait()
	if err == nil && ctx.Err() != nil {
		err = ctx.Err()
	}
	if err != nil {
		if ctx.Err() != nil {
			err = fmt.Errorf("cluster up in %s interrupted: %w", u.dir, ctx.Err())
		}
		u.abort(ctx)
		return err
	}
	with := ""
	if u.st.Catalog != nil {
		with = fmt.Sprintf(" and a catalog server (127.0.0.1:%d)", u.st.Catalog.Port)
	}
	u.spec.logf("cluster of %d shards%s up in %s (%v)", len(u.st.Shards), with, u.dir, time.Since(start).Round(time.Millisecond))
	return nil
}

// abort stops every process this Up started and records that.
func (u *upper) abort(ctx context.Context) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), postgresStopGrace)
	defer cancel()
	u.mu.Lock()
	started := slices.Clone(u.started)
	u.mu.Unlock()
	// PgBouncers first (they were started after their postgres).
	slices.Reverse(started)
	for _, p := range started {
		isPG := p.bin == u.bins.Postgres
		sig := syscall.SIGINT
		grace := pgbouncerStopGrace
		if isPG {
			grace = postgresStopGrace
		}
		_ = p.stop(ctx, sig, grace, isPG)
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	if s := u.st.Catalog; s != nil && slices.ContainsFunc(started, func(p proc) bool { return p.pid == s.PID }) {
		s.PID = 0
	}
	for i := range u.st.Shards {
		s := &u.st.Shards[i]
		if slices.ContainsFunc(started, func(p proc) bool { return p.pid == s.PID }) {
			s.PID = 0
		}
		if slices.ContainsFunc(started, func(p proc) bool { return p.pid == s.PoolerPID }) {
			s.PoolerPID = 0
		}
	}
	_ = u.st.write(u.dir)
}

func (u *upper) save() error {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.st.write(u.dir)
}

// entry returns shard i's state entry, or the catalog server's for
// catalogIndex; u.mu must be held.
func (u *upper) entry(i int) *shardState {
	if i == catalogIndex {
		return u.st.Catalog
	}
	return &u.st.Shards[i]
}

// shard returns a copy of shard i's state (the catalog server's for
// catalogIndex).
func (u *upper) shard(i int) shardState {
	u.mu.Lock()
	defer u.mu.Unlock()
	return *u.entry(i)
}

// update changes shard i's state (the catalog server's for catalogIndex)
// and saves the state file.
func (u *upper) update(i int, f func(s *shardState)) error {
	u.mu.Lock()
	defer u.mu.Unlock()
	f(u.entry(i))
	return u.st.write(u.dir)
}

func (u *upper) upShard(ctx context.Context, i int, template string) error {
	s := u.shard(i)
	if !s.Initialized {
		if err := initShard(ctx, s.Dir, template, u.run); err != nil {
			return fmt.Errorf("%s: %w", s.Name, err)
		}
		if err := u.update(i, func(s *shardState) { s.Initialized = true }); err != nil {
			return err
		}
	}
	if err := u.upPostgres(ctx, i); err != nil {
		return fmt.Errorf("%s: %w", s.Name, err)
	}
	// The catalog server gets the user and roles; its databases are made
	// by whoever puts a catalog there.
	database := u.spec.Database
	if i == catalogIndex {
		database = ""
	}
	if err := provision(ctx, u.shard(i).Shard, u.spec, database); err != nil {
		return fmt.Errorf("%s: %w", s.Name, err)
	}
	if u.spec.PgBouncer && i != catalogIndex {
		if err := u.upPooler(ctx, i); err != nil {
			return fmt.Errorf("%s: %w", s.Name, err)
		}
	}
	return nil
}

// initShard makes a shard directory with a copy of the template data dir.
func initShard(ctx context.Context, shardDir, template string, r runAs) error {
	if err := os.RemoveAll(dataDir(shardDir)); err != nil { // a partial copy
		return err
	}
	if err := os.MkdirAll(shardDir, 0o755); err != nil {
		return err
	}
	if err := r.chown(shardDir); err != nil {
		return err
	}
	if err := copyTree(ctx, template, dataDir(shardDir), r); err != nil {
		return fmt.Errorf("copy initdb template: %w", err)
	}
	f, err := os.OpenFile(filepath.Join(dataDir(shardDir), "postgresql.conf"), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(f, "\n# pgshard: cluster settings, rewritten on every start\ninclude '%s'\n", confFile)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// writeFile writes content to path, owned by r, and reports whether it
// changed.
func writeFile(path, content string, r runAs) (bool, error) {
	if old, err := os.ReadFile(path); err == nil && string(old) == content {
		return false, nil
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		return false, err
	}
	if err := r.chown(tmp); err != nil {
		return false, err
	}
	return true, os.Rename(tmp, path)
}

// upPostgres keeps shard i's running postgres or starts it.
func (u *upper) upPostgres(ctx context.Context, i int) error {
	s := u.shard(i)
	p := proc{s.PID, u.bins.Postgres, dataDir(s.Dir)}
	if p.running() {
		changed, err := writeFile(filepath.Join(dataDir(s.Dir), confFile), u.spec.postgresConf(s.Port), u.run)
		if err != nil {
			return err
		}
		u.spec.logf("%s: postgres already running on 127.0.0.1:%d (pid %d)", s.Name, s.Port, s.PID)
		if err := waitPostgres(ctx, p, s.Shard, u.spec.StartTimeout, -1); err != nil {
			return err
		}
		if changed {
			return reloadPostgres(ctx, s.Shard, u.spec)
		}
		return nil
	}
	for attempt := 0; ; attempt++ {
		port := s.Port
		if port == 0 || !u.portFree(port) {
			var err error
			if port, err = u.newPort(); err != nil {
				return err
			}
		}
		pid, err := startPostgres(ctx, u.bins, u.run, u.spec, s.Dir, port, func(pid int) error {
			u.mu.Lock()
			u.started = append(u.started, proc{pid, u.bins.Postgres, dataDir(s.Dir)})
			u.mu.Unlock()
			return u.update(i, func(s *shardState) { s.Port, s.PID = port, pid })
		})
		if errors.Is(err, errPortInUse) && attempt < 4 {
			u.spec.logf("%s: port %d was taken, trying another", s.Name, port)
			s.Port = 0
			continue
		}
		if err != nil {
			return err
		}
		u.spec.logf("%s: postgres ready on 127.0.0.1:%d (pid %d)", s.Name, port, pid)
		return nil
	}
}

// upPooler keeps shard i's running PgBouncer (if its config is current) or
// (re)starts it.
func (u *upper) upPooler(ctx context.Context, i int) error {
	s := u.shard(i)
	p := proc{s.PoolerPID, u.bins.PgBouncer, bouncerIni(s.Dir)}
	authChanged, err := writeFile(bouncerAuth(s.Dir), authFile(u.spec), u.run)
	if err != nil {
		return err
	}
	if p.running() {
		cur, _ := os.ReadFile(bouncerIni(s.Dir))
		if string(cur) == bouncerConf(s.Dir, s.Port, s.PoolerPort, u.spec) {
			if authChanged {
				_ = p.signal(syscall.SIGHUP) // reload auth_file
			}
			u.spec.logf("%s: pgbouncer already running on 127.0.0.1:%d (pid %d)", s.Name, s.PoolerPort, s.PoolerPID)
			return waitPooler(ctx, p, s.Shard, u.spec, u.spec.StartTimeout, -1, true)
		}
		u.spec.logf("%s: pgbouncer's config is outdated, restarting it", s.Name)
		if err := p.stop(ctx, syscall.SIGINT, pgbouncerStopGrace, false); err != nil {
			return err
		}
	}
	for attempt := 0; ; attempt++ {
		port := s.PoolerPort
		if port == 0 || !u.portFree(port) {
			if port, err = u.newPort(); err != nil {
				return err
			}
		}
		pid, err := startPooler(ctx, u.bins, u.run, u.spec, s.Shard, port, true, func(pid int) error {
			u.mu.Lock()
			u.started = append(u.started, proc{pid, u.bins.PgBouncer, bouncerIni(s.Dir)})
			u.mu.Unlock()
			return u.update(i, func(s *shardState) { s.PoolerPort, s.PoolerPID = port, pid })
		})
		if errors.Is(err, errPortInUse) && attempt < 4 {
			u.spec.logf("%s: port %d was taken, trying another", s.Name, port)
			s.PoolerPort = 0
			continue
		}
		if err != nil {
			return err
		}
		u.spec.logf("%s: pgbouncer ready on 127.0.0.1:%d (pid %d)", s.Name, port, pid)
		return nil
	}
}

// portFree reports whether port can be listened on at 127.0.0.1.
func (u *upper) portFree(port int) bool {
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return false
	}
	l.Close()
	return true
}

// newPort picks a free loopback port not yet used by this cluster.
func (u *upper) newPort() (int, error) {
	for range 20 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, fmt.Errorf("find a free port: %w", err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		u.mu.Lock()
		taken := u.reserved[port]
		u.reserved[port] = true
		u.mu.Unlock()
		if !taken {
			return port, nil
		}
	}
	return 0, errors.New("find a free port: no luck after 20 tries")
}

// beforeServerStart, when set (tests), is called with a server's kind and
// port just before the server is started.
var beforeServerStart func(kind string, port int)

// errPortInUse is wrapped when a server could not bind its port.
var errPortInUse = errors.New("port already in use")

// startError is a server that did not come up, with its log's last lines.
type startError struct {
	what string
	err  error
	log  string
}

func (e *startError) Error() string {
	msg := e.what + ": " + e.err.Error()
	if e.log != "" {
		msg += "\n--- last lines of the log ---\n" + e.log
	}
	return msg
}

func (e *startError) Unwrap() error { return e.err }

// startPostgres writes the shard's settings for port, starts its postmaster,
// calls started with the PID (to record it before anything can fail) and
// waits until it accepts connections.
func startPostgres(ctx context.Context, b Binaries, r runAs, spec Spec, shardDir string, port int, started func(pid int) error) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	if _, err := writeFile(filepath.Join(dataDir(shardDir), confFile), spec.postgresConf(port), r); err != nil {
		return 0, err
	}
	spec.logf("starting %s on 127.0.0.1:%d", filepath.Base(shardDir), port)
	if beforeServerStart != nil {
		beforeServerStart("postgres", port)
	}
	offset := fileSize(pgLog(shardDir))
	pid, err := startDetached(r, shardDir, pgLog(shardDir), b.Postgres, "-D", dataDir(shardDir))
	if err != nil {
		return 0, err
	}
	if err := started(pid); err != nil {
		return pid, err
	}
	sh := Shard{Name: filepath.Base(shardDir), Host: "127.0.0.1", Port: port, Dir: shardDir}
	return pid, waitPostgres(ctx, proc{pid, b.Postgres, dataDir(shardDir)}, sh, spec.StartTimeout, offset)
}

// startPooler writes the shard's PgBouncer config for port, starts it, calls
// started with the PID and waits until it serves (through to the shard's
// database when pgUp).
func startPooler(ctx context.Context, b Binaries, r runAs, spec Spec, s Shard, port int, pgUp bool, started func(pid int) error) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	if _, err := writeFile(bouncerAuth(s.Dir), authFile(spec), r); err != nil {
		return 0, err
	}
	if _, err := writeFile(bouncerIni(s.Dir), bouncerConf(s.Dir, s.Port, port, spec), r); err != nil {
		return 0, err
	}
	// A pidfile left by a killed PgBouncer makes the next one refuse to
	// start if its PID was recycled; we know ours is not running.
	_ = os.Remove(bouncerPid(s.Dir))
	spec.logf("starting %s pgbouncer on 127.0.0.1:%d", s.Name, port)
	if beforeServerStart != nil {
		beforeServerStart("pgbouncer", port)
	}
	offset := fileSize(bouncerLog(s.Dir))
	pid, err := startDetached(r, s.Dir, bouncerLog(s.Dir), b.PgBouncer, "-q", bouncerIni(s.Dir))
	if err != nil {
		return 0, err
	}
	if err := started(pid); err != nil {
		return pid, err
	}
	s.PoolerPort = port
	return pid, waitPooler(ctx, proc{pid, b.PgBouncer, bouncerIni(s.Dir)}, s, spec, spec.StartTimeout, offset, pgUp)
}

// bouncerConfig is what differs between PgBouncer configs.
type bouncerConfig struct {
	pgHost     string
	pgPort     int
	listenAddr string
	listenPort int
	authFile   string
	adminUser  string
	logFile    string // "" = stderr only
	pidFile    string // "" = none
}

func (b bouncerConfig) render() string {
	var extra string
	if b.logFile != "" {
		extra += "logfile = " + b.logFile + "\n"
	}
	if b.pidFile != "" {
		extra += "pidfile = " + b.pidFile + "\n"
	}
	return fmt.Sprintf(`;; Written by pgshard's cluster package on every start; edits are lost.
[databases]
* = host=%s port=%d

[pgbouncer]
listen_addr = %s
listen_port = %d
unix_socket_dir =
auth_type = trust
auth_file = %s
admin_users = %s
pool_mode = transaction
max_client_conn = 2000
default_pool_size = 20
server_login_retry = 0.2
%s`, b.pgHost, b.pgPort, b.listenAddr, b.listenPort, b.authFile, b.adminUser, extra)
}

// bouncerConf is a local shard's pgbouncer.ini.
func bouncerConf(shardDir string, pgPort, port int, spec Spec) string {
	return bouncerConfig{
		pgHost: "127.0.0.1", pgPort: pgPort, listenAddr: "127.0.0.1", listenPort: port,
		authFile: bouncerAuth(shardDir), adminUser: spec.User,
		logFile: bouncerLog(shardDir), pidFile: bouncerPid(shardDir),
	}.render()
}

func authFile(spec Spec) string {
	var b strings.Builder
	users := append([]string{spec.User}, spec.Roles...)
	slices.Sort(users)
	for _, u := range slices.Compact(users) {
		fmt.Fprintf(&b, "%q \"\"\n", u)
	}
	return b.String()
}

func fileSize(path string) int64 {
	fi, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return fi.Size()
}

// logTail returns the last n lines of path from offset on (offset < 0: the
// whole file).
func logTail(path string, offset int64, n int) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	if offset > 0 {
		if _, err := f.Seek(offset, io.SeekStart); err != nil {
			return ""
		}
	}
	var lines []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if len(lines) > n {
			lines = lines[1:]
		}
	}
	return strings.Join(lines, "\n")
}

// waitFor polls ready until it succeeds, alive reports false, ctx is done or
// timeout passes. excerpt gives the log lines for the error.
func waitFor(ctx context.Context, what string, alive func() bool, timeout time.Duration, excerpt func() string, ready func(ctx context.Context) error) error {
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		if ctx.Err() != nil {
			// Checked first: a cancelled Up stops what it started, so the
			// server may be gone because of the cancellation itself.
			return ctx.Err()
		}
		if !alive() {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			tail := excerpt()
			err := errors.New("exited during startup")
			if strings.Contains(tail, "Address already in use") {
				err = fmt.Errorf("%w (%s)", errPortInUse, err)
			}
			return &startError{what: what, err: err, log: tail}
		}
		actx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := ready(actx)
		cancel()
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if time.Now().After(deadline) {
			return &startError{what: what, err: fmt.Errorf("not ready after %v: %w", timeout, err), log: excerpt()}
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// logExcerpt returns the last lines of a server log written since offset
// (offset < 0: the server was not started by this call, show the end),
// after how the process ended when it did (a server killed by a signal
// leaves no line of its own).
func logExcerpt(path string, offset int64, pid int) func() string {
	return func() string {
		how := howEnded(pid) // first: it waits for the process's last words
		tail := logTail(path, offset, 20)
		if how != "" {
			tail = strings.TrimSuffix("process "+strconv.Itoa(pid)+": "+how+"\n"+tail, "\n")
		}
		return tail
	}
}

// Readiness checks make sure that the server answering on the port is the
// one that was started: the ports are picked free, but another program
// can take one between the pick and the server's bind, and it may answer
// the same logins (another cluster's PostgreSQL or PgBouncer). The server
// started then fails to bind and exits ("Address already in use", a start
// retried on another port) — unless a check that only logs in took the
// other server for it first, and the cluster went on with a server that
// is not its own (seen as a start failing later, or worse, working).

// errNotOurs means another server answers on a server's port.
var errNotOurs = errors.New("another server answers on the port")

func waitPostgres(ctx context.Context, p proc, s Shard, timeout time.Duration, offset int64) error {
	dsn := s.DSN("postgres", DefaultUser)
	want := dataDir(s.Dir)
	return waitFor(ctx, fmt.Sprintf("%s postgres on 127.0.0.1:%d", s.Name, s.Port), p.running, timeout, logExcerpt(pgLog(s.Dir), offset, p.pid),
		func(ctx context.Context) error {
			got, err := queryValue(ctx, dsn, "SELECT current_setting('data_directory')")
			if err == nil && got != want {
				err = fmt.Errorf("%w (its data directory is %q, not %q)", errNotOurs, got, want)
			}
			return err
		})
}

func waitPooler(ctx context.Context, p proc, s Shard, spec Spec, timeout time.Duration, offset int64, pgUp bool) error {
	admin := s.PoolerDSN("pgbouncer", spec.User)
	db := s.PoolerDSN(spec.Database, spec.User)
	return waitFor(ctx, fmt.Sprintf("%s pgbouncer on 127.0.0.1:%d", s.Name, s.PoolerPort), p.running, timeout,
		logExcerpt(bouncerLog(s.Dir), offset, p.pid), poolerReady(admin, db, bouncerLog(s.Dir), pgUp))
}

// poolerReady probes a PgBouncer: its admin console answers and, unless
// logFile is "" (a container's, on a port Docker mapped), is the PgBouncer
// that writes logFile; and, when its PostgreSQL runs, a query through it
// to the database works.
func poolerReady(adminDSN, dbDSN, logFile string, pgUp bool) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		got, err := bouncerSetting(ctx, adminDSN, "logfile")
		if err != nil {
			return err
		}
		if logFile != "" && got != logFile {
			return fmt.Errorf("%w (its logfile is %q, not %q)", errNotOurs, got, logFile)
		}
		if pgUp {
			return pingConn(ctx, dbDSN, "SELECT 1")
		}
		return nil
	}
}

// pingConn connects and runs one simple-protocol query.
func pingConn(ctx context.Context, dsn, sql string) error {
	conn, err := pgconn.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	_, err = conn.Exec(ctx, sql).ReadAll()
	return err
}

// queryValue connects and returns the first column of the first row of a
// simple-protocol query.
func queryValue(ctx context.Context, dsn, sql string) (string, error) {
	conn, err := pgconn.Connect(ctx, dsn)
	if err != nil {
		return "", err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	rs, err := conn.Exec(ctx, sql).ReadAll()
	if err != nil {
		return "", err
	}
	if len(rs) == 0 || len(rs[0].Rows) == 0 || len(rs[0].Rows[0]) == 0 {
		return "", fmt.Errorf("%s: no value", sql)
	}
	return string(rs[0].Rows[0][0]), nil
}

// bouncerSetting returns a setting from a PgBouncer admin console's SHOW
// CONFIG (rows of key, value, ...); "" when it has no such row.
func bouncerSetting(ctx context.Context, adminDSN, key string) (string, error) {
	conn, err := pgconn.Connect(ctx, adminDSN)
	if err != nil {
		return "", err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	rs, err := conn.Exec(ctx, "SHOW CONFIG").ReadAll()
	if err != nil {
		return "", err
	}
	for _, r := range rs {
		for _, row := range r.Rows {
			if len(row) >= 2 && string(row[0]) == key {
				return string(row[1]), nil
			}
		}
	}
	return "", nil
}

// provision creates spec's user and roles, and database unless it is "",
// on a server if missing.
func provision(ctx context.Context, s Shard, spec Spec, database string) error {
	conn, err := pgx.Connect(ctx, s.DSN("postgres", DefaultUser)+"&connect_timeout=10")
	if err != nil {
		return fmt.Errorf("provision: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	ensureRole := func(name, attrs string) error {
		var exists bool
		if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT FROM pg_roles WHERE rolname = $1)", name).Scan(&exists); err != nil {
			return err
		}
		if exists {
			return nil
		}
		_, err := conn.Exec(ctx, "CREATE ROLE "+pgx.Identifier{name}.Sanitize()+" "+attrs)
		return err
	}
	if err := ensureRole(spec.User, "LOGIN SUPERUSER"); err != nil {
		return fmt.Errorf("provision user %s: %w", spec.User, err)
	}
	for _, r := range spec.Roles {
		if err := ensureRole(r, "LOGIN"); err != nil {
			return fmt.Errorf("provision role %s: %w", r, err)
		}
	}
	if database == "" {
		return nil
	}
	var exists bool
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT FROM pg_database WHERE datname = $1)", database).Scan(&exists); err != nil {
		return fmt.Errorf("provision database %s: %w", database, err)
	}
	if !exists {
		if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{database}.Sanitize()+
			" OWNER "+pgx.Identifier{spec.User}.Sanitize()); err != nil {
			return fmt.Errorf("provision database %s: %w", database, err)
		}
	}
	return nil
}

// reloadPostgres applies a rewritten settings file and logs the settings
// that need a restart to take effect.
func reloadPostgres(ctx context.Context, s Shard, spec Spec) error {
	conn, err := pgx.Connect(ctx, s.DSN("postgres", DefaultUser)+"&connect_timeout=10")
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, "SELECT pg_reload_conf()"); err != nil {
		return err
	}
	// The reload is asynchronous: poll briefly for pending_restart.
	deadline := time.Now().Add(2 * time.Second)
	for {
		rows, err := conn.Query(ctx, "SELECT name FROM pg_settings WHERE pending_restart ORDER BY name")
		if err != nil {
			return err
		}
		names, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return err
		}
		if len(names) > 0 {
			spec.logf("%s: settings %s change only after a restart (pgshard dev down, then up)", s.Name, strings.Join(names, ", "))
			return nil
		}
		if time.Now().After(deadline) {
			return nil
		}
		select {
		case <-time.After(100 * time.Millisecond):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
