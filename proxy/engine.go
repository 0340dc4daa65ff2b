package proxy

import (
	"syscall"

	"github.com/pgshard/pgshard/proxy/internal/engine"
)

// The engine's public names: the client session and its planner live in
// internal/engine (ARCHITECTURE.md §3); the modes and snapshots of theirs
// that Config and Server expose keep their names here, as aliases, so the
// proxy's API does not change with the move.

// PoolMode is how a client's statements use backend connections.
type PoolMode = engine.PoolMode

// The pool modes.
const (
	// PoolModeDefault (the zero value) inherits: a User's mode is the
	// server's, the server's is PoolTransaction.
	PoolModeDefault = engine.PoolModeDefault
	// PoolTransaction: each transaction runs on a pooled backend; session
	// state the proxy cannot keep pins the client.
	PoolTransaction = engine.PoolTransaction
	// PoolSession: every client has a backend of its own for its session.
	PoolSession = engine.PoolSession
)

// ParsePoolMode parses "transaction" or "session" ("" is PoolModeDefault).
func ParsePoolMode(s string) (PoolMode, error) { return engine.ParsePoolMode(s) }

// DefaultMaxPinned is the default of Config.MaxPinned.
const DefaultMaxPinned = engine.DefaultMaxPinned

// PinnedSession is a client session pinned to a backend of its own
// (Server.PinnedSessions).
type PinnedSession = engine.PinnedSession

// FenceMode says whether the proxy asserts keys against the shards'
// fence (Config.Fence).
type FenceMode = engine.FenceMode

// The fence modes.
const (
	// FenceAuto asserts while the proxy follows a catalog on shards whose
	// database has the fence's functions; the default.
	FenceAuto = engine.FenceAuto
	// FenceOn asserts on every shard.
	FenceOn = engine.FenceOn
	// FenceOff never asserts.
	FenceOff = engine.FenceOff
)

// ParseFenceMode parses auto, on or off ("" is auto).
func ParseFenceMode(s string) (FenceMode, error) { return engine.ParseFenceMode(s) }

// CodeFenceRefused is the SQLSTATE of a shard's fence refusing a key
// whose range it does not own (now, or no longer).
const CodeFenceRefused = engine.CodeFenceRefused

// UnnamedMode is what a direct backend connection receives for a client's
// unnamed Parse (Config.UnnamedStatements).
type UnnamedMode = engine.UnnamedMode

// The unnamed statement modes.
const (
	// UnnamedCached: from a text's second use, the connection's statement
	// cache serves it. The default.
	UnnamedCached = engine.UnnamedCached
	// UnnamedPassThrough: the client's unnamed Parse goes to the backend
	// as it is, every time.
	UnnamedPassThrough = engine.UnnamedPassThrough
)

// syscallEMFILE is the error of an accept with no descriptors left.
var syscallEMFILE = syscall.EMFILE
