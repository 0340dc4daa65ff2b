package proxy

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/pgshard/pgshard/proxy/internal/auth"
	"github.com/pgshard/pgshard/proxy/internal/engine"
	"github.com/pgshard/pgshard/proxy/route"
	"github.com/pgshard/pgshard/shardmap"
)

// Defaults for zero Config fields.
const (
	DefaultListen             = "127.0.0.1:6543"
	DefaultPoolSize           = 20
	DefaultMaxClients         = 1000
	DefaultMaxMessageSize     = 64 << 20 // 64 MiB
	DefaultConnectTimeout     = 5 * time.Second
	DefaultPoolTimeout        = 10 * time.Second
	DefaultIdleTimeout        = 5 * time.Minute
	DefaultStatementCacheSize = 256
	DefaultStartupTimeout     = 30 * time.Second
	DefaultShutdownTimeout    = 10 * time.Second
	DefaultPauseTimeout       = 2 * time.Minute
	DefaultAdminDatabase      = "pgshard"
	DefaultBouncerPoll        = time.Second
	DefaultMergeGroupLimit    = 100000
	DefaultCursorBufferBytes  = 64 << 20
)

// Config configures a Server. Map and Analyzer are required; zero values of
// the other fields take the defaults above.
type Config struct {
	// Map is the validated shard map the proxy routes by.
	Map *shardmap.Map
	// Analyzer parses and routes statements (route.New for Map).
	Analyzer route.Analyzer
	// HintKeyType is the type of keys given by SET LOCAL pgshard.key
	// (the sharding schema's hint_type; KeyText by default).
	HintKeyType route.KeyType
	// Listen is the TCP address clients connect to.
	Listen string
	// Users may log in; a client naming another user is refused.
	Users []User
	// UsePooler connects to each shard through its PgBouncer (PoolerDSN)
	// when the map has one, else directly (DSN).
	UsePooler bool
	// PoolSize bounds the backend connections per shard.
	PoolSize int
	// MaxClients bounds concurrent client connections.
	MaxClients int
	// MaxMessageSize bounds one client message (header included). Larger
	// messages get a protocol error (08P01) and the connection is closed.
	MaxMessageSize int
	// MaxPipelineBytes bounds the extended-protocol messages buffered
	// before a Sync or Flush (default 4 × MaxMessageSize).
	MaxPipelineBytes int
	// ConnectTimeout bounds connecting to a shard.
	ConnectTimeout time.Duration
	// PoolTimeout bounds the wait for a free backend connection.
	PoolTimeout time.Duration
	// IdleTimeout closes backend connections idle for longer.
	IdleTimeout time.Duration
	// IdleInTransactionTimeout, when set, closes a client that holds a
	// backend transaction open without sending anything for that long
	// (like Postgres's idle_in_transaction_session_timeout).
	IdleInTransactionTimeout time.Duration
	// HealthInterval is how often each shard's Postgres is probed (a TCP
	// connect); a shard that does not answer fails its transactions at
	// once. Negative disables probing (default 1s).
	HealthInterval time.Duration
	// StartupTimeout bounds a client's startup and authentication.
	StartupTimeout time.Duration
	// DefaultShard names the shard for statements that need a fixed shard
	// but carry no key (sequence or advisory-lock calls and other writes
	// that touch no sharded table); "" = the map's first shard.
	DefaultShard string
	// Databases lists the database names clients may connect to; empty
	// accepts the database names of the map's shards (each DSN's dbname,
	// else its user, as Postgres defaults it), and "*" any name (the
	// proxy is one database). The names of ExtraDatabases are accepted
	// too. Any other name is refused as Postgres refuses it (3D000).
	Databases []string
	// ExtraDatabases are further logical databases served on the same
	// listener (databases.go): a client whose dbname is one of them is
	// served by a server of its own (its map, pools, routing).
	ExtraDatabases []Database
	// StatementCacheSize is how many server-side prepared statements each
	// direct backend connection keeps for client-named statements (0 =
	// DefaultStatementCacheSize, negative = none). Never used through a
	// pooler.
	StatementCacheSize int
	// UnnamedStatements decides whether a direct connection's statement
	// cache also serves clients' unnamed statements (default: yes, from a
	// text's second use; see doc.go, "Prepared statements").
	UnnamedStatements UnnamedMode
	// VerifyIdentity checks every shard's identity record against Map:
	// at start for the shards that are up (a mismatch fails New's caller
	// via Verify), and on the first connection to a shard that was down.
	VerifyIdentity bool
	// MergeGroupLimit bounds the merged groups a fan-out read buffers to
	// sort them (GROUP BY ordered by an aggregate, across shards); more
	// fail the statement with 54000 instead of using memory without bound.
	// Groups ordered by their GROUP BY columns stream and need no bound.
	MergeGroupLimit int
	// CursorBufferBytes bounds the rows a read of every shard fetched in
	// parts (an Execute with a row limit: JDBC's fetch size, a cursor)
	// keeps in the proxy between the client's fetches; more fail the
	// read with 54000. A read fetched whole streams and needs no bound.
	CursorBufferBytes int
	// MetricsListen, when set, serves Prometheus metrics at /metrics.
	MetricsListen string
	// PoolMode is how clients use backends (internal/engine/pin.go): PoolTransaction (the
	// default) or PoolSession; a User may override it.
	PoolMode PoolMode
	// MaxPinned bounds the sessions pinned in transaction pooling
	// (session state the pooler cannot keep); beyond it such statements
	// are refused with 53300. 0 = DefaultMaxPinned, negative = no bound.
	MaxPinned int
	// Logger receives structured logs (nil = slog.Default()).
	Logger *slog.Logger

	// AdminUsers may use the admin console: the virtual database
	// AdminDatabase, PgBouncer-style SHOW/RELOAD/PAUSE/... commands
	// (admin.go). They log in as any user (Users). Empty: no console.
	AdminUsers []string
	// AdminDatabase is the console's database name (default "pgshard").
	AdminDatabase string
	// TLS is TLS towards clients (internal/engine/tls.go).
	TLS TLSConfig
	// PgBouncer configures reading each shard's PgBouncer admin console
	// and failing transactions fast when it is overloaded (internal/backend/bouncer.go).
	PgBouncer BouncerConfig
	// ShutdownTimeout bounds a graceful shutdown: sessions are served
	// until their clients leave, at most this long (default 10s).
	ShutdownTimeout time.Duration
	// PauseTimeout bounds how long PAUSE holds a new transaction before
	// failing it with 57P03 (default 2m).
	PauseTimeout time.Duration
	// ReusePort sets SO_REUSEPORT on the listeners (ListenAndServe and
	// the metrics endpoint): another process may listen on the same
	// address at the same time.
	ReusePort bool
	// HandoverSocket, when set, is a unix socket path on which the running
	// proxy hands its listening sockets to a successor (handover.go).
	HandoverSocket string
	// Reload, when set, returns the configuration to apply on RELOAD (the
	// admin console; the command also calls it on SIGHUP): a fresh read
	// of the config file and shard map. Nil: RELOAD is refused.
	Reload func(ctx context.Context) (Config, error)

	// Follow, when set, keeps Map current from the shard-map catalog and
	// holds the proxy's lease there (catalog.go): each newer map becomes
	// a new generation, and while the lease is not live statements routed
	// by a key are refused (57P03). Started by Serve, stopped at its end;
	// a reload keeps the running one.
	Follow MapFollower
	// Remap builds the configuration for a newer map from the catalog
	// (nil: the running one with the map and a route.Table for it).
	Remap func(ctx context.Context, running Config, m *shardmap.Map) (Config, error)
	// CatalogName names the catalog in messages (a redacted DSN).
	CatalogName string
	// LeaseWait bounds how long Serve waits, with Follow set, for the
	// first live lease before it accepts clients (catalog.go; default
	// DefaultLeaseWait): Serve fails, naming the catalog and the last
	// catalog error, when none came within it.
	LeaseWait time.Duration
	// Fence says whether keyed transactions assert their key against the
	// shard's fence (internal/engine/fence.go; default FenceAuto).
	Fence FenceMode
	// Procs is the GOMAXPROCS the proxy process runs with (proxy.procs;
	// 0 = Go's default). `pgshard proxy` applies it once at start, before
	// New; Serve never changes it (a library user's process is its own),
	// and a reload with another value is reported as needing a restart.
	// SHOW CONFIG shows it.
	Procs int
	// FenceRetryWait bounds, per client message, the time a statement
	// refused by the fence before anything reached its client waits for
	// a newer map (or a frozen range) before it is run again
	// (internal/engine/fenceretry.go; default DefaultFenceRetryWait).
	FenceRetryWait time.Duration
}

// DefaultFenceRetryWait is Config.FenceRetryWait's default: ten times a
// move's freeze budget (100 ms). A refusal naming a newer epoch asks the
// follower to poll the catalog now (MapFollower.Nudge), so the new map
// arrives within one poll's round trip, whatever the follower's interval.
const DefaultFenceRetryWait = time.Second

// DefaultLeaseWait is Config.LeaseWait's default: below the hand-over's
// step timeout (30 s), so that a successor that gets no lease gives up
// while its predecessor still serves.
const DefaultLeaseWait = 20 * time.Second

// TLSMode says whether clients may or must use TLS (internal/auth's).
type TLSMode = auth.TLSMode

// The TLS modes.
const (
	// TLSDisable answers SSLRequest with 'N': no TLS (the default).
	TLSDisable = auth.TLSDisable
	// TLSAllow accepts TLS and plain-text clients.
	TLSAllow = auth.TLSAllow
	// TLSRequire refuses plain-text clients (28000).
	TLSRequire = auth.TLSRequire
)

// ParseTLSMode parses disable, allow or require.
func ParseTLSMode(s string) (TLSMode, error) { return auth.ParseTLSMode(s) }

// TLSConfig is TLS towards clients: TLS 1.2 or newer with the certificate
// and key in CertFile and KeyFile (PEM), read at New and at each reload.
type TLSConfig struct {
	Mode              TLSMode
	CertFile, KeyFile string
}

// BouncerConfig configures the PgBouncer-aware back-pressure: for each
// shard reached through its PgBouncer, the proxy reads that PgBouncer's
// SHOW POOLS and SHOW STATS (as AdminUser, a user in its admin_users or
// stats_users) every PollInterval, and fails new transactions for the
// shard at once with 53300 naming it while PgBouncer's cl_waiting is at
// least MaxWaiting or its maxwait at least MaxWait.
type BouncerConfig struct {
	// AdminUser logs in to PgBouncer's admin database "pgbouncer"; ""
	// turns the readings (and the back-pressure) off.
	AdminUser string
	// AdminPassword is AdminUser's password ("" for trust).
	AdminPassword string
	// PollInterval is how often each PgBouncer is read (default 1s).
	PollInterval time.Duration
	// MaxWaiting: fail fast while cl_waiting ≥ MaxWaiting (0 = never).
	MaxWaiting int
	// MaxWait: fail fast while maxwait ≥ MaxWait (0 = never).
	MaxWait time.Duration
}

// User is a client login.
type User struct {
	// Name is the user name clients send in the startup packet; "*"
	// stands for every user not listed by name, and such a client reaches
	// the shards as itself (its backend connections log in as its user,
	// so privileges and current_user are its own; listed users share the
	// shard DSN's user).
	Name string
	// Password is the user's password in plain text, or a SCRAM-SHA-256
	// verifier in Postgres's format ("SCRAM-SHA-256$4096:salt$StoredKey:ServerKey").
	// Clients authenticate with SCRAM-SHA-256.
	Password string
	// Trust lets the user in without a password (development only).
	Trust bool
	// PoolMode overrides Config.PoolMode for this user (PoolModeDefault:
	// the server's).
	PoolMode PoolMode
}

// withDefaults returns c with zero fields set to the defaults.
func (c Config) withDefaults() Config {
	if c.Listen == "" {
		c.Listen = DefaultListen
	}
	if c.PoolSize == 0 {
		c.PoolSize = DefaultPoolSize
	}
	if c.MaxClients == 0 {
		c.MaxClients = DefaultMaxClients
	}
	if c.MaxMessageSize == 0 {
		c.MaxMessageSize = DefaultMaxMessageSize
	}
	if c.MaxPipelineBytes == 0 {
		c.MaxPipelineBytes = 4 * c.MaxMessageSize
	}
	if c.ConnectTimeout == 0 {
		c.ConnectTimeout = DefaultConnectTimeout
	}
	if c.PoolTimeout == 0 {
		c.PoolTimeout = DefaultPoolTimeout
	}
	if c.FenceRetryWait == 0 {
		c.FenceRetryWait = DefaultFenceRetryWait
	}
	if c.LeaseWait == 0 {
		c.LeaseWait = DefaultLeaseWait
	}
	if c.IdleTimeout == 0 {
		c.IdleTimeout = DefaultIdleTimeout
	}
	if c.HealthInterval == 0 {
		c.HealthInterval = time.Second
	}
	if c.StartupTimeout == 0 {
		c.StartupTimeout = DefaultStartupTimeout
	}
	if c.StatementCacheSize == 0 {
		c.StatementCacheSize = DefaultStatementCacheSize
	}
	if c.MergeGroupLimit == 0 {
		c.MergeGroupLimit = DefaultMergeGroupLimit
	}
	if c.CursorBufferBytes == 0 {
		c.CursorBufferBytes = DefaultCursorBufferBytes
	}
	if c.MaxPinned == 0 {
		c.MaxPinned = DefaultMaxPinned
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.AdminDatabase == "" {
		c.AdminDatabase = DefaultAdminDatabase
	}
	if c.ShutdownTimeout == 0 {
		c.ShutdownTimeout = DefaultShutdownTimeout
	}
	if c.PauseTimeout == 0 {
		c.PauseTimeout = DefaultPauseTimeout
	}
	if c.PgBouncer.PollInterval == 0 {
		c.PgBouncer.PollInterval = DefaultBouncerPoll
	}
	return c
}

// validate reports every problem, naming the field.
func (c Config) validate() error {
	var p []string
	add := func(format string, args ...any) { p = append(p, fmt.Sprintf(format, args...)) }
	if c.Map == nil {
		add("Map: required")
	}
	if c.Analyzer == nil {
		add("Analyzer: required")
	}
	if c.PoolSize < 1 {
		add("PoolSize: must be at least 1 (got %d)", c.PoolSize)
	}
	if c.MaxClients < 1 {
		add("MaxClients: must be at least 1 (got %d)", c.MaxClients)
	}
	if c.MaxMessageSize < 1024 || c.MaxMessageSize > 1<<30 {
		add("MaxMessageSize: must be between 1 KiB and 1 GiB (got %d)", c.MaxMessageSize)
	}
	if c.MaxPipelineBytes < c.MaxMessageSize {
		add("MaxPipelineBytes: must be at least MaxMessageSize (got %d)", c.MaxPipelineBytes)
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"ConnectTimeout", c.ConnectTimeout}, {"PoolTimeout", c.PoolTimeout}, {"IdleTimeout", c.IdleTimeout},
		{"IdleInTransactionTimeout", c.IdleInTransactionTimeout}, {"StartupTimeout", c.StartupTimeout},
		{"ShutdownTimeout", c.ShutdownTimeout}, {"PauseTimeout", c.PauseTimeout},
		{"PgBouncer.PollInterval", c.PgBouncer.PollInterval}, {"PgBouncer.MaxWait", c.PgBouncer.MaxWait}} {
		if d.v < 0 {
			add("%s: must not be negative (got %s)", d.name, d.v)
		}
	}
	if c.Map != nil && c.DefaultShard != "" {
		if _, err := c.Map.ShardByName(c.DefaultShard); err != nil {
			add("DefaultShard: no shard named %q in the map", c.DefaultShard)
		}
	}
	seen := map[string]bool{}
	for i, u := range c.Users {
		switch {
		case u.Name == "":
			add("Users[%d]: name is empty", i)
		case seen[u.Name]:
			add("Users[%d]: duplicate user %q", i, u.Name)
		}
		seen[u.Name] = true
		if !u.Trust && u.Password == "" {
			add("Users[%d] %q: set a password or trust", i, u.Name)
		}
		if strings.HasPrefix(u.Password, auth.Mechanism+"$") {
			if _, err := auth.ParseVerifier(u.Password); err != nil {
				add("Users[%d] %q: password: %v", i, u.Name, err)
			}
		}
	}
	for i, a := range c.AdminUsers {
		if a == "" {
			add("AdminUsers[%d]: empty", i)
		} else if !seen[a] {
			add("AdminUsers[%d]: %q is not in Users (admins log in like every user)", i, a)
		}
	}
	if c.Databases != nil && slices.Contains(c.Databases, c.AdminDatabase) && len(c.AdminUsers) > 0 {
		add("AdminDatabase: %q is also in Databases; the console needs a name of its own", c.AdminDatabase)
	}
	if c.TLS.Mode != TLSDisable && (c.TLS.CertFile == "" || c.TLS.KeyFile == "") {
		add("TLS: mode %s needs CertFile and KeyFile", c.TLS.Mode)
	}
	if c.TLS.Mode < TLSDisable || c.TLS.Mode > TLSRequire {
		add("TLS.Mode: unknown mode %d", int(c.TLS.Mode))
	}
	if c.Fence < FenceAuto || c.Fence > FenceOff {
		add("Fence: unknown mode %d", int(c.Fence))
	}
	if c.FenceRetryWait < 0 {
		add("FenceRetryWait: must not be negative (got %v)", c.FenceRetryWait)
	}
	if c.LeaseWait < 0 {
		add("LeaseWait: must not be negative (got %v)", c.LeaseWait)
	}
	if c.PgBouncer.MaxWaiting < 0 {
		add("PgBouncer.MaxWaiting: must not be negative (got %d)", c.PgBouncer.MaxWaiting)
	}
	if len(p) > 0 {
		return errors.New("proxy config: " + strings.Join(p, "; "))
	}
	return nil
}

func prepareUsers(users []User) (map[string]engine.Login, error) {
	out := make(map[string]engine.Login, len(users))
	for _, u := range users {
		l := engine.Login{Trust: u.Trust}
		if !u.Trust {
			var err error
			if strings.HasPrefix(u.Password, auth.Mechanism+"$") {
				l.Verifier, err = auth.ParseVerifier(u.Password)
			} else {
				var s string
				if s, err = auth.NewSCRAMVerifier(u.Password); err == nil {
					l.Verifier, err = auth.ParseVerifier(s)
				}
			}
			if err != nil {
				return nil, fmt.Errorf("user %q: %w", u.Name, err)
			}
		}
		out[u.Name] = l
	}
	return out, nil
}

// NewSCRAMVerifier derives a SCRAM-SHA-256 verifier for password with a
// random salt, in Postgres's text format, for User.Password (pgshard
// passwd). Passwords are used as given (no SASLprep), which matches
// Postgres for ASCII passwords.
func NewSCRAMVerifier(password string) (string, error) { return auth.NewSCRAMVerifier(password) }
