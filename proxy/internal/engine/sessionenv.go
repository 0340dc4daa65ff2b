package engine

import (
	"context"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/pgshard/pgshard/proxy/internal/auth"
	"github.com/pgshard/pgshard/proxy/internal/backend"
	"github.com/pgshard/pgshard/proxy/internal/obs"
	"github.com/pgshard/pgshard/proxy/internal/pgwire"
	"github.com/pgshard/pgshard/proxy/route"
	"github.com/pgshard/pgshard/shardmap"
)

// The engine boundary: a client session and its planner reach the rest
// of the proxy only through the two values below; package proxy makes
// them (proxy/sessionhost.go) and the engine never imports it (the
// import rule of internal/layering, ARCHITECTURE.md §3).
//
//	Session ──gen──▶ GenerationEnv  one configuration generation of one
//	   │                 │          database: what a session reads of its
//	   │                 │          Config (SessionConfig), shard pools,
//	   │                 │          metrics; pickAny, textBytewise and the
//	   │                 │          preamble check (genshards.go)
//	   │                 ▼
//	   │             GenerationOps  what needs the generation itself (a
//	   │                            proxy.Server): routing log, catalog
//	   │                            lease, direct pools, the generation of
//	   │                            another database
//	   │
//	   └──host─▶ HostEnv            the server process that accepted the
//	                 │              client, for the session's whole life:
//	                 │              TLS, logins disabled, pin count, fences
//	                 │              and their stand-in texts, the session
//	                 │              Registry (sessionreg.go)
//	                 ▼
//	             HostOps            the current generation, the admin
//	                                console (the proxy's server)
//
// Names: in package proxy the Server is the server itself, and a
// generation one of its configurations (a reload makes a new one; the
// session moves to it between transactions, so s.gen never changes under
// a transaction). An extra
// database (Config.ExtraDatabases) is a server of its own: a session on
// it has the generation of that database's server in gen and the
// accepting server in host.

// GenerationEnv is what one configuration generation gives the sessions
// that run on it. It is made once with its generation (proxy.Server.env) and
// never changes.
type GenerationEnv struct {
	// Config is what the session reads of the generation's Config.
	Config *SessionConfig
	// Pools are the shards' backend pools, by shard index of Config.Map.
	Pools []*backend.Pool
	// DefaultShard is the index of cfg.DefaultShard.
	DefaultShard int
	// Users are the logins by user name ("*": anyone).
	Users map[string]Login
	// Metrics and log are the database's server's (the accepting server's
	// unless the session runs on an extra database).
	Metrics *obs.Metrics
	Log     *slog.Logger
	// StmtEpoch moves on at every schema change (see proxy.Server.stmtEpoch).
	StmtEpoch *atomic.Uint64
	// Collation caches whether the shards order text by bytes; a DDL
	// statement resets it (collationUnknown).
	Collation *atomic.Int32
	// RR spreads key-less read-only statements over the shards (pickAny).
	RR *atomic.Uint32
	// OIDs tells other shards' descriptions in the default shard's OIDs
	// (relabel.go; nil: they go out as the shards wrote them).
	OIDs *OIDMaps
	// Home is the host environment of the server the generation belongs
	// to: the accepting server's, or an extra database's.
	Home *HostEnv
	// Ops runs what needs the generation itself.
	Ops GenerationOps
}

// GenerationOps are the operations of a generation a session uses (a
// *Server implements them).
type GenerationOps interface {
	// NoteDecision records a routing decision (SHOW ROUTES, metrics).
	NoteDecision(sql string, d route.Dest, shard int, fan bool, e *pgwire.Error, setLocalHint bool)
	// LeaseError is the error of a statement refused while the catalog's
	// lease is lost (nil: none).
	LeaseError() *pgwire.Error
	// DirectPool is shard i's pool of direct connections (pinning).
	DirectPool(i int) *backend.Pool
	// DatabaseEnv returns the generation of database name (an extra
	// database's, or this one).
	DatabaseEnv(name string) *GenerationEnv
}

// SessionConfig is the part of a generation's Config a session reads,
// copied when the generation is made (a generation's Config never
// changes). The fields are Config's, with Config's meaning.
type SessionConfig struct {
	// Routing.
	Map         *shardmap.Map
	Analyzer    route.Analyzer
	HintKeyType route.KeyType
	// Follows: Config.Follow is set (the proxy follows a catalog).
	Follows bool
	// Fence and FenceRetryWait: the map fence (fence.go, fenceretry.go).
	Fence          FenceMode
	FenceRetryWait time.Duration
	// Pooling and pinning: PoolMode is the server's, userPoolModes the
	// users' own (those other than PoolModeDefault, in Config.Users's
	// order).
	PoolMode      PoolMode
	UserPoolModes []UserPoolMode
	MaxPinned     int
	MaxClients    int
	PoolTimeout   time.Duration
	// ConnectTimeout bounds a cancel request's connection to a backend.
	ConnectTimeout time.Duration
	// Clients: which databases they may name, the console's.
	Databases     []string
	AdminDatabase string
	AdminUsers    []string
	// Limits.
	StartupTimeout           time.Duration
	IdleInTransactionTimeout time.Duration
	MaxMessageSize           int
	MaxPipelineBytes         int
	MergeGroupLimit          int
	CursorBufferBytes        int
	// Statements: the backends' statement cache, the unnamed statement.
	StatementCacheSize int
	UnnamedStatements  UnnamedMode
}

// UserPoolMode is a user's own pool mode (Config.Users).
type UserPoolMode struct {
	Name string
	Mode PoolMode
}

// shardName returns the name of shard i.
func (g *GenerationEnv) shardName(i int) string { return g.Config.Map.Shards[i].Name }

// HostEnv is what the server that accepted a client gives its session
// for the session's whole life (the same for every generation).
type HostEnv struct {
	Metrics *obs.Metrics
	Log     *slog.Logger
	// TLS is the current TLS configuration towards clients (nil: off).
	TLS *atomic.Pointer[auth.TLSSetup]
	// LoginsDisabled: DISABLE on the console (admin logins still pass).
	LoginsDisabled *atomic.Bool
	// NPinned counts the pinned sessions (Config.MaxPinned bounds it);
	// pinsTotal counts pins by reason.
	NPinned   *atomic.Int64
	PinsTotal *prometheus.CounterVec
	// Fences holds each pool's fence state (fence.go); StandIns the
	// texts a fence assert names for a key's bucket.
	Fences   *PoolFences
	StandIns *StandInTexts
	// Clients is the register of the server's client sessions.
	Clients *Registry
	// ConsoleCanceled is the cause a cancel request gives the context
	// of a console command (admin.ErrCanceled).
	ConsoleCanceled error
	// Ops runs what needs the server itself.
	Ops HostOps
}

// HostOps are the server's operations a session uses (a *proxy.Server
// implements them).
type HostOps interface {
	// CurrentEnv is the current generation's environment.
	CurrentEnv() *GenerationEnv
	// NudgeCatalog asks the catalog follower, if any, to poll the
	// catalog now: a shard's fence named an epoch newer than the map's.
	// It never blocks.
	NudgeCatalog()
	// ConsoleQuery runs the admin console's commands of one query string
	// for session s and appends their answer to out. after, when not nil,
	// is what a command left for once the answer reached the client (a
	// SHUTDOWN starts the shutdown then, so the console that asked for it
	// gets its answer before the sessions close).
	ConsoleQuery(ctx context.Context, by ConsoleCaller, sql string, out []byte) (answer []byte, after func())
}

// ConsoleCaller is the admin session a console command runs for: its
// user and its logger (the console logs its actions as the user's).
type ConsoleCaller struct {
	User string
	Log  *slog.Logger
}

// Login is a User prepared for authentication.
type Login struct {
	Trust    bool
	Verifier auth.Verifier
}

// UnnamedMode is what a direct backend connection receives for a client's
// unnamed Parse (Config.UnnamedStatements).
type UnnamedMode int

const (
	// UnnamedCached: from the second time any client parses a text as an
	// unnamed statement, the connection's statement cache serves it (the
	// text is parsed once per connection, and Postgres's plan cache
	// applies, as for a client that names its statements). The default.
	UnnamedCached UnnamedMode = iota
	// UnnamedPassThrough: the client's unnamed Parse goes to the backend
	// as it is, every time.
	UnnamedPassThrough
)
