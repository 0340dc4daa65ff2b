package admin

import (
	"context"
	"time"
)

// Host is what the console shows and acts on: the proxy implements it
// (proxy/admin.go). Each method returns a snapshot the console owns (plain
// values, copied under the host's locks); the console never holds a lock
// of the host's nor sees a session, a pool or a connection.
//
// The actions take the shards named by the command; nil is every shard
// (KILL and WAIT_CLOSE without a shard also act on what belongs to no
// shard: every non-admin session, the retired generations' pools). Their
// errors are the client's (a *pgwire.Error keeps its SQLSTATE).
type Host interface {
	// Version is the build's version (SHOW VERSION prefixes "pgshard ").
	Version() string
	// Config is SHOW CONFIG's rows, values already redacted.
	Config() []ConfigRow
	// Pools is every shard's pool with the pooling settings.
	Pools() Pools
	// Map is the shard map.
	Map() Map
	// Clients is every client session (in no particular order).
	Clients() []Client
	// Servers is every backend connection: the shards' pools in map
	// order, then the direct pools of pinned sessions, each pool's
	// connections oldest first.
	Servers() []Server
	// Lists is SHOW LISTS's counts.
	Lists() Lists
	// Users is the users that may log in, in the config's order.
	Users() []User
	// Routes is the recent routing decisions, newest first.
	Routes() []Route
	// ShardNames is the map's shards (for the commands that name one).
	ShardNames() []string

	// Reload re-reads the configuration; it returns the summary of what
	// changed, or why nothing did.
	Reload(ctx context.Context) (string, error)
	// Pause holds the shards' new transactions and waits for the running
	// ones (bounded by the proxy's pause timeout).
	Pause(ctx context.Context, shards []string) error
	// Resume ends a pause.
	Resume(shards []string)
	// Reconnect retires the shards' backend connections as they free up.
	Reconnect(shards []string)
	// Kill closes the sessions using the shards and their connections.
	Kill(shards []string)
	// WaitClose waits until the connections RECONNECT, KILL or a reload
	// retired are closed (bounded by the proxy's pause timeout).
	WaitClose(ctx context.Context, shards []string) error
	// DisableLogins refuses (true) or accepts (false) new client logins.
	DisableLogins(disabled bool)
	// Shutdown asks for the graceful shutdown; it begins once the console
	// that asked has its answer.
	Shutdown()
}

// ConfigRow is one SHOW CONFIG row: a setting as the config file names
// it, its value and default, and whether RELOAD applies a change
// (changeable) or only a restart does.
type ConfigRow struct {
	Key, Value, Default string
	Changeable          bool
}

// Pools is every shard's pool (map order) and the pooling settings.
type Pools struct {
	Mode           string // "transaction" or "session"
	Size           int    // pool_size
	LoginsDisabled bool   // DISABLE
	Shards         []Shard
}

// Shard is one shard's pool: its place in the map, state, figures,
// statistics and last PgBouncer reading.
type Shard struct {
	Name    string
	Ordinal int
	State   string // up, down, paused, overloaded, removed
	Reason  string // why down or refused ("" if neither)
	Ranges  []Range
	// ViaPooler: reached through its PgBouncer; Addr is the address
	// connections go to; DSN and PoolerDSN are redacted.
	ViaPooler      bool
	Addr           string
	DSN, PoolerDSN string
	Verified       bool
	User, Database string // of the backend connections
	Paused         bool

	// Figures: connections held by a session (Active), in the pool
	// (Idle), being opened (Login), open (Open); sessions waiting
	// (Waiting) and the oldest's wait.
	Active, Idle, Login, Waiting, Open int
	MaxWait                            time.Duration
	// Pinned is the main database's sessions pinned to the shard.
	Pinned int

	// Totals since start (times in nanoseconds).
	Xacts, XactNanos, Queries, BytesIn, BytesOut, WaitNanos uint64
	// AvgXactMicros is XactNanos/Xacts in µs; P99XactMicros the 99th
	// percentile of transaction times.
	AvgXactMicros, P99XactMicros uint64
	// Averages of the last complete period (per second; times in µs).
	XactsPerSec, QueriesPerSec, RecvPerSec, SentPerSec uint64
	XactMicros, WaitMicros                             uint64
	// Routing decisions by kind.
	Keyed, Hinted, Any, Fanout, Refused uint64
	// Errors is the backend errors by SQLSTATE class.
	Errors string
	// Bouncer is the last reading of its PgBouncer (nil: none).
	Bouncer *Bouncer
}

// Range is a range of buckets, both ends included.
type Range struct{ Lo, Hi int }

// Bouncer is one reading of a shard's PgBouncer (Err: it failed).
type Bouncer struct {
	At                                    time.Time
	Err                                   string
	ClActive, ClWaiting, SvActive, SvIdle int
	MaxWait                               time.Duration
}

// Map is the shard map: its epoch, bucket count and ranges.
type Map struct {
	Epoch   uint64
	Buckets int
	Ranges  []MapRange
}

// MapRange is a range of buckets and its shard.
type MapRange struct {
	Lo, Hi  int
	Shard   string
	Ordinal int
}

// Client is one client session.
type Client struct {
	User, Database, App string
	// Remote, Local are the connection's addresses (host:port; "":
	// unknown).
	Remote, Local string
	Connected     time.Time
	// Request is when the current transaction's backend was taken
	// (Connected when none is).
	Request time.Time
	PID     uint32
	TLS     bool
	Admin   bool
	// Shard, BackendPID: the backend connection held (Shard "": none).
	Shard      string
	BackendPID uint32
	// Pinned is why the session is pinned to a backend of its own ("":
	// it is not); RemotePID is then that backend's PID (0 otherwise).
	Pinned    string
	RemotePID uint32
}

// Server is one backend connection.
type Server struct {
	User, Database, Shard string
	Remote, Local         string
	Opened                time.Time
	Request               time.Time // when its current use began (Opened if idle)
	Idle, TLS             bool
	// CloseNeeded: retired (RECONNECT, KILL, a reload); closed when free.
	CloseNeeded bool
	PID         uint32
}

// Lists is SHOW LISTS's counts.
type Lists struct {
	Shards, Users             int
	MaxClients, UsedClients   int
	Pinned                    int
	PoolSize, OpenConnections int
}

// User is a user that may log in.
type User struct {
	Name string
	// Trust: no password; Verifier: the config holds a SCRAM verifier
	// (else a plain-text password).
	Trust, Verifier, Admin bool
}

// Route is one recorded routing decision.
type Route struct {
	At                       time.Time
	Kind, Shard, SQL, Reason string
}
