package cluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"golang.org/x/sync/errgroup"

	"github.com/pgshard/pgshard/shardmap"
)

// Shard is one PostgreSQL server of a cluster, with its optional PgBouncer.
// The catalog server (Cluster.Catalog) is described by a Shard too: named
// CatalogServerName, ordinal -1, never with PgBouncer.
type Shard struct {
	// Name is "shard0", "shard1", ... (CatalogServerName for the catalog
	// server).
	Name string `json:"name"`
	// Ordinal is the shard's index, 0..N-1 (-1 for the catalog server).
	Ordinal int `json:"ordinal"`
	// Host is the address both servers listen on (127.0.0.1).
	Host string `json:"host"`
	// Port is PostgreSQL's port.
	Port int `json:"port"`
	// PoolerPort is PgBouncer's port, 0 without PgBouncer.
	PoolerPort int `json:"pooler_port,omitempty"`
	// Dir is the shard directory (data dir, logs, pgbouncer.ini); "" for
	// the testcontainers provider.
	Dir string `json:"dir,omitempty"`
	// PID is the postmaster's PID, 0 when stopped (or in a container).
	PID int `json:"pid"`
	// PoolerPID is PgBouncer's PID, 0 when stopped or absent.
	PoolerPID int `json:"pooler_pid,omitempty"`
}

// DSN returns a URL connecting directly to the shard's PostgreSQL:
// postgres://user@127.0.0.1:port/database?sslmode=disable.
func (s Shard) DSN(database, user string) string { return dsn(s.Host, s.Port, database, user) }

// PoolerDSN returns a URL connecting through the shard's PgBouncer, or ""
// without PgBouncer.
func (s Shard) PoolerDSN(database, user string) string {
	if s.PoolerPort == 0 {
		return ""
	}
	return dsn(s.Host, s.PoolerPort, database, user)
}

// LogPath is the file the shard's PostgreSQL logs to (DIR/shardN/postgres.log),
// "" when the shard has no directory (the testcontainers provider). The
// file only grows while the cluster exists: a reader may remember its size
// and read what a later event appended.
func (s Shard) LogPath() string {
	if s.Dir == "" {
		return ""
	}
	return pgLog(s.Dir)
}

// PoolerLogPath is the file the shard's PgBouncer logs to, "" without
// PgBouncer or without a directory.
func (s Shard) PoolerLogPath() string {
	if s.Dir == "" || s.PoolerPort == 0 {
		return ""
	}
	return bouncerLog(s.Dir)
}

func dsn(host string, port int, database, user string) string {
	u := url.URL{
		Scheme:   "postgres",
		User:     url.User(user),
		Host:     net.JoinHostPort(host, strconv.Itoa(port)),
		Path:     "/" + database,
		RawQuery: "sslmode=disable",
	}
	return u.String()
}

// StopMode says how a server is stopped.
type StopMode int

const (
	// Fast is PostgreSQL's fast shutdown (SIGINT: roll back open
	// transactions, checkpoint, exit) and PgBouncer's safe shutdown
	// (SIGINT: wait for in-flight transactions, then exit).
	Fast StopMode = iota
	// Immediate is PostgreSQL's immediate shutdown (SIGQUIT, like pg_ctl -m
	// immediate: no checkpoint, crash recovery on the next start) and
	// PgBouncer's immediate shutdown (SIGTERM: drop every connection).
	Immediate
	// Kill SIGKILLs the postmaster (its backends exit on their own once
	// they notice) or PgBouncer.
	Kill
)

// String returns "fast", "immediate" or "kill".
func (m StopMode) String() string {
	switch m {
	case Fast:
		return "fast"
	case Immediate:
		return "immediate"
	case Kill:
		return "kill"
	}
	return "StopMode(" + strconv.Itoa(int(m)) + ")"
}

// ParseStopMode parses "fast", "immediate" or "kill".
func ParseStopMode(s string) (StopMode, error) {
	for _, m := range []StopMode{Fast, Immediate, Kill} {
		if m.String() == s {
			return m, nil
		}
	}
	return 0, fmt.Errorf("stop mode %q: want fast, immediate or kill", s)
}

// ErrNotSupported is returned by operations a provider cannot perform.
var ErrNotSupported = errors.New("not supported")

// ErrUnavailable is wrapped by a provider's Available (and AvailableFor)
// when the provider cannot run on this machine; the error says why.
var ErrUnavailable = errors.New("cluster provider unavailable")

// Provider starts clusters one way (local processes, containers).
type Provider interface {
	// Name is "local" or "testcontainers".
	Name() string
	// Available returns nil if the provider can run here, else an error
	// saying why (binaries missing, no Docker engine, ...).
	Available(ctx context.Context) error
	// Up starts a cluster as spec says, with its state in dir.
	Up(ctx context.Context, dir string, spec Spec) (*Cluster, error)
}

// SpecChecker is implemented by providers whose availability depends on the
// spec (the local provider needs pgbouncer only if the spec asks for it).
type SpecChecker interface {
	// AvailableFor is like Available for one spec.
	AvailableFor(ctx context.Context, spec Spec) error
}

// backend is what a provider does for a running cluster.
type backend interface {
	stopShard(ctx context.Context, c *Cluster, i int, mode StopMode) error
	startShard(ctx context.Context, c *Cluster, i int) error
	stopPooler(ctx context.Context, c *Cluster, i int, mode StopMode) error
	startPooler(ctx context.Context, c *Cluster, i int) error
	// alive reports whether shard i's postgres and pooler processes run.
	alive(c *Cluster, i int) (pg, pooler bool)
	down(ctx context.Context, c *Cluster) error
}

// Cluster is a running (or stopped) cluster. Its methods are safe for
// concurrent use. Shards' names, ports and DSNs never change after Up
// returns, so any goroutine may read them; only the PID fields change, when
// the fault hooks stop or start a server (read those with Shard(i) while
// another goroutine may be injecting faults).
type Cluster struct {
	// Dir is the state directory.
	Dir string
	// Provider is "local" or "testcontainers".
	Provider string
	// Spec is the spec the cluster runs, defaults applied.
	Spec Spec
	// Shards are the servers, by ordinal.
	Shards []Shard
	// Catalog is the catalog server (Spec.CatalogServer): a PostgreSQL of
	// no shard, for a catalog of the shard map; nil without one. Like the
	// shards', its fields but PID never change after Up.
	Catalog *Shard

	mu      sync.Mutex // guards Shards' and Catalog's PID fields and serializes fault hooks
	backend backend
}

// CatalogServerName names the catalog server (Cluster.Catalog) and its
// directory, DIR/catalog.
const CatalogServerName = "catalog"

// catalogIndex stands for the catalog server where internal code takes a
// shard index.
const catalogIndex = -1

// server returns a copy of shard i, or of the catalog server for
// catalogIndex, under the cluster's lock.
func (c *Cluster) server(i int) Shard {
	if i == catalogIndex {
		c.mu.Lock()
		defer c.mu.Unlock()
		return *c.Catalog
	}
	return c.Shard(i)
}

func (c *Cluster) check(i int) error {
	if i < 0 || i >= len(c.Shards) {
		return fmt.Errorf("shard %d: the cluster has shards 0..%d", i, len(c.Shards)-1)
	}
	return nil
}

// Shard returns a copy of shard i, read under the cluster's lock (use it
// when another goroutine may be running fault hooks).
func (c *Cluster) Shard(i int) Shard {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.Shards[i]
}

// Map returns a shard map (epoch 1) that splits buckets evenly over the
// shards, with DSNs for Spec.Database and Spec.User (and pooler DSNs when
// the cluster has PgBouncer).
func (c *Cluster) Map(buckets int) (*shardmap.Map, error) {
	return c.MapFor(c.Spec.Database, buckets)
}

// MapFor is Map for another database, e.g. one made by CreateDatabase.
func (c *Cluster) MapFor(database string, buckets int) (*shardmap.Map, error) {
	shards := make([]shardmap.Shard, len(c.Shards))
	for i, s := range c.Shards {
		shards[i] = shardmap.Shard{
			Name:      s.Name,
			Ordinal:   s.Ordinal,
			DSN:       s.DSN(database, c.Spec.User),
			PoolerDSN: s.PoolerDSN(database, c.Spec.User),
		}
	}
	return shardmap.Even(buckets, shards)
}

// adminDSN connects to the shard's maintenance database directly.
func (c *Cluster) adminDSN(i int) string {
	return c.Shards[i].DSN("postgres", c.Spec.User) + "&connect_timeout=10"
}

// eachShard runs f on every shard concurrently and joins the errors.
func (c *Cluster) eachShard(ctx context.Context, f func(ctx context.Context, i int) error) error {
	g, ctx := errgroup.WithContext(ctx)
	errs := make([]error, len(c.Shards))
	for i := range c.Shards {
		g.Go(func() error {
			if err := f(ctx, i); err != nil {
				errs[i] = fmt.Errorf("%s: %w", c.Shards[i].Name, err)
			}
			return nil
		})
	}
	_ = g.Wait()
	return errors.Join(errs...)
}

// CreateDatabase creates database name (owned by Spec.User) on every shard.
// Through PgBouncer it is reachable at once: the pooler's [databases]
// section is a wildcard.
func (c *Cluster) CreateDatabase(ctx context.Context, name string) error {
	if !identRe.MatchString(name) {
		return fmt.Errorf("create database %q: not a plain identifier", name)
	}
	return c.eachShard(ctx, func(ctx context.Context, i int) error {
		return execOn(ctx, c.adminDSN(i), "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()+
			" OWNER "+pgx.Identifier{c.Spec.User}.Sanitize())
	})
}

// DropDatabase drops database name on every shard, terminating its
// sessions (WITH (FORCE)); a missing database is not an error.
func (c *Cluster) DropDatabase(ctx context.Context, name string) error {
	return c.eachShard(ctx, func(ctx context.Context, i int) error {
		return execOn(ctx, c.adminDSN(i), "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)")
	})
}

func execOn(ctx context.Context, dsn string, sql string) error {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	_, err = conn.Exec(ctx, sql)
	return err
}

// StopShard stops shard i's PostgreSQL (see StopMode) and waits until it
// and its backends are gone. Its PgBouncer keeps running.
func (c *Cluster) StopShard(ctx context.Context, i int, mode StopMode) error {
	if err := c.check(i); err != nil {
		return err
	}
	return c.backend.stopShard(ctx, c, i, mode)
}

// StartShard starts shard i's PostgreSQL again on the same port and waits
// until it accepts connections (after crash recovery, if it crashed).
func (c *Cluster) StartShard(ctx context.Context, i int) error {
	if err := c.check(i); err != nil {
		return err
	}
	return c.backend.startShard(ctx, c, i)
}

// StopCatalog stops the catalog server's PostgreSQL (Cluster.Catalog) as
// StopShard stops a shard's; an error when the cluster has none.
func (c *Cluster) StopCatalog(ctx context.Context, mode StopMode) error {
	if c.Catalog == nil {
		return errors.New("stop the catalog server: the cluster has none")
	}
	return c.backend.stopShard(ctx, c, catalogIndex, mode)
}

// StartCatalog starts the catalog server's PostgreSQL again as StartShard
// starts a shard's.
func (c *Cluster) StartCatalog(ctx context.Context) error {
	if c.Catalog == nil {
		return errors.New("start the catalog server: the cluster has none")
	}
	return c.backend.startShard(ctx, c, catalogIndex)
}

// CatalogServer returns a copy of the catalog server (Cluster.Catalog),
// read under the cluster's lock; ok is false when the cluster has none.
func (c *Cluster) CatalogServer() (s Shard, ok bool) {
	if c.Catalog == nil {
		return Shard{}, false
	}
	return c.server(catalogIndex), true
}

// StopPooler stops shard i's PgBouncer: Fast is a safe shutdown (SIGINT),
// Immediate SIGTERM, Kill SIGKILL.
func (c *Cluster) StopPooler(ctx context.Context, i int, mode StopMode) error {
	if err := c.check(i); err != nil {
		return err
	}
	if !c.Spec.PgBouncer {
		return fmt.Errorf("stop pooler of shard %d: the cluster has no PgBouncer", i)
	}
	return c.backend.stopPooler(ctx, c, i, mode)
}

// StartPooler starts shard i's PgBouncer again on the same port and waits
// until it accepts connections (and, if the shard's PostgreSQL runs, serves
// queries).
func (c *Cluster) StartPooler(ctx context.Context, i int) error {
	if err := c.check(i); err != nil {
		return err
	}
	if !c.Spec.PgBouncer {
		return fmt.Errorf("start pooler of shard %d: the cluster has no PgBouncer", i)
	}
	return c.backend.startPooler(ctx, c, i)
}

// PoolerRunning reports whether shard i's PgBouncer process runs (no
// query: see Status for that). False without PgBouncer.
func (c *Cluster) PoolerRunning(i int) bool {
	if c.check(i) != nil || !c.Spec.PgBouncer {
		return false
	}
	_, pooler := c.backend.alive(c, i)
	return pooler
}

// RestartPooler stops shard i's PgBouncer with mode and starts it again.
func (c *Cluster) RestartPooler(ctx context.Context, i int, mode StopMode) error {
	if err := c.StopPooler(ctx, i, mode); err != nil {
		return err
	}
	return c.StartPooler(ctx, i)
}

// Down stops every server of the cluster (PgBouncers first). The state
// directory stays; see the package-level Down to remove it.
func (c *Cluster) Down(ctx context.Context) error {
	return c.backend.down(ctx, c)
}

// ProcessStatus is the state of one server process.
type ProcessStatus struct {
	// PID is 0 for a stopped process or a container.
	PID int `json:"pid"`
	// Alive: the process (or container) runs.
	Alive bool `json:"alive"`
	// Ready: it answered a query.
	Ready bool `json:"ready"`
	// Err is why it is not ready, "" if it is.
	Err string `json:"error,omitempty"`
}

// ShardStatus is the state of one shard's servers.
type ShardStatus struct {
	Shard    Shard         `json:"shard"`
	Postgres ProcessStatus `json:"postgres"`
	// Pooler is the zero value without PgBouncer.
	Pooler ProcessStatus `json:"pooler"`
}

// Status probes every shard's PostgreSQL and PgBouncer: is the process
// alive, does it answer SELECT 1 (each probe bounded by 5 s).
func (c *Cluster) Status(ctx context.Context) []ShardStatus {
	out := make([]ShardStatus, len(c.Shards))
	_ = c.eachShard(ctx, func(ctx context.Context, i int) error {
		s := c.Shard(i)
		pgAlive, poolAlive := c.backend.alive(c, i)
		st := ShardStatus{Shard: s}
		st.Postgres = ProcessStatus{PID: s.PID, Alive: pgAlive}
		probe(ctx, &st.Postgres, s.DSN("postgres", c.Spec.User))
		if c.Spec.PgBouncer {
			st.Pooler = ProcessStatus{PID: s.PoolerPID, Alive: poolAlive}
			probe(ctx, &st.Pooler, s.PoolerDSN(c.Spec.Database, c.Spec.User))
		}
		out[i] = st
		return nil
	})
	return out
}

// CatalogStatus probes the catalog server's PostgreSQL like Status probes
// a shard's (its Pooler is the zero value); ok is false when the cluster
// has no catalog server.
func (c *Cluster) CatalogStatus(ctx context.Context) (st ShardStatus, ok bool) {
	if c.Catalog == nil {
		return ShardStatus{}, false
	}
	s := c.server(catalogIndex)
	pgAlive, _ := c.backend.alive(c, catalogIndex)
	st = ShardStatus{Shard: s, Postgres: ProcessStatus{PID: s.PID, Alive: pgAlive}}
	probe(ctx, &st.Postgres, s.DSN("postgres", c.Spec.User))
	return st, true
}

func probe(ctx context.Context, ps *ProcessStatus, dsn string) {
	if !ps.Alive {
		ps.Err = "not running"
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := execOn(ctx, dsn, "SELECT 1"); err != nil {
		ps.Err = err.Error()
		return
	}
	ps.Ready = true
}

// Up starts a local cluster in dir, or reuses the one already there (see
// Local).
func Up(ctx context.Context, dir string, spec Spec) (*Cluster, error) {
	return Local().Up(ctx, dir, spec)
}
