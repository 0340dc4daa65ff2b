package backend

import (
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/pgshard/pgshard/shardmap"
)

// Env is a pool's environment: what the configuration generation that
// uses the pool hands it — its settings, the metric and the logger it
// reports to, the statement-cache epoch and the register of the shards'
// database identities. A reload that keeps a pool hands it the new
// generation's environment (SetEnv); the pool never reaches back into the
// server that owns it.
type Env struct {
	// PoolSize bounds the pool's connections (open or being opened).
	PoolSize int
	// PoolTimeout bounds a wait for a connection of a full pool.
	PoolTimeout time.Duration
	// ConnectTimeout bounds opening a connection and the health probe.
	ConnectTimeout time.Duration
	// IdleTimeout: idle connections older than this are closed (reapIdle).
	IdleTimeout time.Duration
	// HealthInterval is how often the monitor probes the shard (0: never).
	HealthInterval time.Duration
	// PauseTimeout bounds a wait for the end of a PAUSE.
	PauseTimeout time.Duration
	// StatementCacheSize bounds each direct connection's statement cache
	// (0: no cache).
	StatementCacheSize int
	// VerifyIdentity: check the shard's identity record against Map on
	// the pool's first connection.
	VerifyIdentity bool
	// Map is the shard map the identity check compares against.
	Map *shardmap.Map
	// PgBouncer is how the monitor reads the shard's PgBouncer.
	PgBouncer BouncerConfig
	// BackendErrors counts backend failures by shard and kind.
	BackendErrors *prometheus.CounterVec
	// Log receives the pool's warnings (shard down, overloaded).
	Log *slog.Logger
	// StmtEpoch moves on at every schema change: a new connection's
	// statement cache starts at its value.
	StmtEpoch *atomic.Uint64
	// RegisterDatabaseID records the database identity a shard reported
	// and fails when another shard already reported it.
	RegisterDatabaseID func(shard, databaseID string) error
}

// BouncerConfig is how a pool reads its shard's PgBouncer: the proxy's
// Config.PgBouncer, field for field.
type BouncerConfig struct {
	// AdminUser logs in to PgBouncer's admin database "pgbouncer"; ""
	// turns the readings (and the back-pressure) off.
	AdminUser string
	// AdminPassword is AdminUser's password ("" for trust).
	AdminPassword string
	// PollInterval is how often each PgBouncer is read.
	PollInterval time.Duration
	// MaxWaiting: fail fast while cl_waiting ≥ MaxWaiting (0 = never).
	MaxWaiting int
	// MaxWait: fail fast while maxwait ≥ MaxWait (0 = never).
	MaxWait time.Duration
}

// env returns the environment the pool follows.
func (p *Pool) Env() *Env { return p.envp.Load() }

// SetEnv hands the pool the environment of the generation that now uses it.
func (p *Pool) SetEnv(env *Env) { p.envp.Store(env) }
