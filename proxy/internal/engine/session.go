package engine

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgshard/pgshard/proxy/internal/backend"
	"github.com/pgshard/pgshard/proxy/internal/pgvalue"
	"github.com/pgshard/pgshard/proxy/internal/pgwire"
	"github.com/pgshard/pgshard/proxy/route"
)

// Session is one client connection: its settings, its virtual prepared
// statements and its transaction. One goroutine runs it (run); only
// cancelBackend and closeClient are called from others.
type Session struct {
	// gen is the configuration generation the session runs on (it moves
	// to a newer one between transactions, sessionenv.go); host is the
	// server that accepted the client. They are all the session sees of
	// the rest of the proxy.
	gen  *GenerationEnv
	host *HostEnv
	log  *slog.Logger
	// clientConn is the client socket: its reader, the output buffer
	// (s.out) and the write lock (clientconn.go).
	cc clientConn
	// descs is the last description another shard answered, told in the
	// default shard's OIDs (relabel.go).
	descs descMemo

	pid, secret uint32
	user, db    string

	// fenceBuckets are the buckets asserted in the backend's current
	// transaction (fence.go).
	fenceBuckets []int
	// fretry is the retry of the client message being run after a fence
	// refusal: its budget and deadline (fenceRetrier, fenceretry.go).
	fretry fenceRetrier

	// Settings: startup is what the client connected with, cur the
	// session's current settings (startup + session SETs).
	startup, cur *backend.Settings
	// paramStatus: what the client was told of the reported parameters
	// (paramstatus.go).
	ps paramStatus

	// stmts are the client's named prepared statements (virtual); unnamed
	// is the unnamed one.
	stmts   map[string]*vstmt
	unnamed *vstmt

	// transaction is where the client's transaction is (txnstate.go).
	txn transaction

	mu     sync.Mutex // guards bc, closed and fanning against cancelBackend
	bc     *backend.Conn
	closed bool
	// readers are the transaction's read-only backend transactions on
	// other shards (readtxns.go).
	readers readerSet
	// fanning are the connections a fan-out is reading (cancel reaches all).
	fanning []*backend.Conn
	// cursors are the reads of every shard the client fetches in parts
	// (cursor.go), until its transaction ends.
	cursors cursorSet

	// own, when set, keeps s.bc as the client's own backend across
	// transactions: the session is pinned (pin.go, ownbackend.go).
	// pinnedAs is its description for other goroutines
	// (Registry.Pinned, SHOW CLIENTS), nil while not pinned.
	own      *ownBackend
	pinnedAs atomic.Pointer[PinnedSession]
	// pinLost: a pinned backend went away; its session state is gone and
	// the session ends, as it would on a direct connection.
	pinLost bool
	// pinFatal: the pinned backend's FATAL error was forwarded as it is.
	pinFatal bool
	// terminateSelf: the client called pg_terminate_backend of its own
	// session's PID (terminate.go): it ends after that answer.
	terminateSelf bool
	// selfFatalSent: that FATAL was already sent, as the answer of a
	// pg_terminate_backend(pg_backend_pid()).
	selfFatalSent bool

	// Set during startup, read-only afterwards (SHOW CLIENTS reads them
	// from other goroutines after register): admin is an admin console
	// session (clientConn.tlsOn: the client uses TLS); connected when it
	// connected; app its application_name.
	admin     bool
	connected time.Time
	app       string
	// console is an admin console session's state (adminsession.go).
	console consoleSession

	// Scratch reused by every exchange (no allocation on the hot path);
	// plan is allocated at the first (an idle client holds none) and
	// holds its own buffers (planned); bv is the pinner's (pin.go).
	plan     *planner
	grp      []cmsg
	grpBytes int
	bv       pgwire.BindView
}

// vstmt is a client's prepared statement: the text and declared parameter
// types the client gave in Parse. Backends only ever see it as an unnamed
// statement (or a proxy-named one on a direct connection's cache).
type vstmt struct {
	name string
	st   *route.Statement
	oids []uint32
	// cacheKey identifies text + types in the statement cache.
	cacheKey string
	// cacheUnnamed: an unnamed statement a direct connection's statement
	// cache serves (Config.UnnamedStatements), decided at its Parse.
	cacheUnnamed bool
	// realOn is the pinned backend where the statement exists under the
	// client's own name (parsed there as it was sent: pin.go); nil when
	// it is virtual. Another backend (after the pin ended) re-parses it.
	realOn *backend.Conn
	// epoch is the Server.stmtEpoch when the client parsed it: a Bind
	// under a later epoch (a schema change since) may find its result
	// columns changed (fStale).
	epoch uint64
	// desc is the result shape (resultShape) of the client's last
	// Describe of it, nil if it never described it (staledesc.go).
	desc []pgvalue.Field
}

func newVstmt(name string, st *route.Statement, oids []uint32) *vstmt {
	v := &vstmt{name: name, st: st, oids: slices.Clone(oids)}
	if len(oids) == 0 {
		v.cacheKey = st.SQL
	} else {
		var b strings.Builder
		b.WriteString(st.SQL)
		for _, o := range oids {
			fmt.Fprintf(&b, "\x00%d", o)
		}
		v.cacheKey = b.String()
	}
	return v
}

// cmsg is one buffered client message of a pipeline.
type cmsg struct {
	typ byte
	raw []byte
}

func NewSession(gen *GenerationEnv, host *HostEnv, conn net.Conn) *Session {
	s := &Session{
		gen:       gen,
		host:      host,
		connected: time.Now(),
		log:       gen.Log,
		txn:       transaction{hint: -1},
		stmts:     map[string]*vstmt{},
		ps:        paramStatus{seen: map[string]string{}},
		cursors:   cursorSet{metrics: host.Metrics},
	}
	s.cc.init(conn, s.messageLimit)
	return s
}

// messageLimit is the size limit of a client message by type.
func (s *Session) messageLimit(typ byte) int {
	switch typ {
	case 'Q', 'P', 'B', 'd', 'F', 'p':
		return s.gen.Config.MaxMessageSize
	}
	return pgwire.SmallMessageLimit
}

// closeClient closes the client connection (server shutdown), which ends
// the session's goroutine (the server interrupts its backend reads).
func (s *Session) closeClient() {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	_ = s.cc.conn.Close()
}

// Run serves the client until it disconnects, misbehaves or the server
// shuts down.
//
// An idle session waits for its client here, at the top of its
// goroutine's stack: the message loop returns errIdle when the next
// message must be read from the socket and nothing else is pending, Run
// waits for it (MsgReader.Wait) and enters the loop again, which finds
// the message buffered (or reports the wait's error as its read's). The Go runtime
// halves a goroutine's stack at a collection only while it uses less
// than a quarter of it (less 800 bytes); parked deep in the loop, an idle
// session kept the 8 KiB stack its first query grew, parked here it uses
// about 1 KiB and goes back to 4 KiB (`make bench-idle`, after one
// query). The startup and the ending are functions of their own, never
// inlined, to keep Run's own frame small.
func (s *Session) Run(ctx context.Context) {
	if !startSession(ctx, s) {
		return
	}
	defer s.host.Clients.unregister(s)
	defer s.releaseAll()
	if done, err := serveConsoleOrRelay(ctx, s); done {
		sessionEnded(s, err)
		return
	}
	waited, werr := false, error(nil)
	for {
		err := s.serve(ctx, waited, werr)
		if err != errIdle {
			sessionEnded(s, err)
			return
		}
		waited, werr = true, s.cc.rd.Wait()
	}
}

// errIdle is the message loop's return when the session must wait for
// its client (Run waits).
var errIdle = errors.New("pgshard: session idle")

// startSession runs the client's startup; false: the session ends.
//
//go:noinline
func startSession(ctx context.Context, s *Session) bool {
	u := startup{s: s}
	ok, err := u.run(ctx)
	if !ok && err != nil && !isDisconnect(err) {
		s.log.Debug("client startup failed", "remote", s.cc.conn.RemoteAddr().String(), "err", err)
	}
	return ok
}

// serveConsoleOrRelay serves a console session, or relays a session
// that needs no routing (pinner.canRelay), to its end (done); decided
// once, after the startup. Any other session is the engine's (serve).
//
//go:noinline
func serveConsoleOrRelay(ctx context.Context, s *Session) (done bool, err error) {
	switch {
	case s.admin:
		return true, s.console.serve(ctx, &s.cc, s.host, ConsoleCaller{User: s.user, Log: s.log})
	case pinning(s).canRelay():
		return true, s.cc.relay(s.bc)
	}
	return false, nil
}

// sessionEnded tells the client why its session ended, if it can still hear it.
//
//go:noinline
func sessionEnded(s *Session, err error) {
	switch {
	case err == nil, isDisconnect(err):
	case errors.Is(err, pgwire.ErrProtocol):
		s.log.Info("closing client after a protocol error", "user", s.user, "remote", s.cc.conn.RemoteAddr().String(), "err", err)
		s.cc.out = pgwire.AppendError(s.cc.out[:0], &pgwire.Error{Severity: "FATAL", Code: pgwire.CodeProtocolViolation, Message: err.Error()})
		_ = s.cc.flush()
	default:
		var e *pgwire.Error
		if errors.As(err, &e) {
			s.cc.out = pgwire.AppendError(s.cc.out, e)
			_ = s.cc.flush()
		}
		s.log.Debug("client session ended", "user", s.user, "err", err)
	}
}

func isDisconnect(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) || errors.Is(err, os.ErrDeadlineExceeded)
}

// pgErrorToError converts a backend's PgError (met while connecting) into
// an Error with the same code and texts.
func pgErrorToError(pe *pgconn.PgError, severity string) *pgwire.Error {
	return &pgwire.Error{Severity: severity, Code: pe.Code, Message: pe.Message, Detail: pe.Detail, Hint: pe.Hint,
		Raw: pgwire.AppendPgError(nil, pe, severity)}
}

// releaseAll returns or discards what the session holds when it ends.
func (s *Session) releaseAll() {
	s.cursors.clear()
	s.readers.discard()
	s.mu.Lock()
	bc := s.bc
	s.bc = nil
	s.mu.Unlock()
	if bc == nil {
		return
	}
	if s.own != nil {
		// A pinned backend carries the client's session state.
		pinning(s).clearPin()
		bc.Pool.Discard(bc)
		return
	}
	if s.txn.tx == txBound || s.txn.pipelineHeld {
		// A transaction or pipeline is open: the connection is not clean.
		bc.Pool.Discard(bc)
		return
	}
	bc.Pool.Release(bc)
}

// cancelBackend forwards a cancel request to the backend serving the
// session, if it holds one. The backend connection is then never reused
// by another client, so a late cancel cannot hit someone else's query.
func (s *Session) cancelBackend(ctx context.Context) {
	if s.admin {
		s.console.cancelRunning()
		return
	}
	s.mu.Lock()
	var targets []*backend.Conn
	if len(s.fanning) > 0 {
		targets = append(targets, s.fanning...) // a fan-out: every shard's part
	} else if s.bc != nil {
		targets = append(targets, s.bc)
	}
	for _, bc := range targets {
		bc.Cancelled.Store(true)
	}
	s.mu.Unlock()
	if len(targets) == 0 {
		return
	}
	s.host.Metrics.Cancels.Inc()
	timeout := s.host.Ops.CurrentEnv().Config.ConnectTimeout
	for _, bc := range targets {
		if err := backend.SendCancel(ctx, bc.NetConn.RemoteAddr(), bc.PID, bc.Secret, timeout); err != nil {
			s.log.Warn("forwarding a cancel request failed", "shard", bc.Pool.Shard.Name, "err", err)
		}
	}
}

// setBackend records bc as the session's backend (under mu, for cancel).
func (s *Session) setBackend(bc *backend.Conn) {
	s.mu.Lock()
	s.bc = bc
	s.mu.Unlock()
	s.fenceBuckets = s.fenceBuckets[:0]
}

// dropBackend returns the session's backend to its pool (clean) or discards
// it (broken, or not clean).
func (s *Session) dropBackend(clean bool) {
	s.mu.Lock()
	bc := s.bc
	s.bc = nil
	s.mu.Unlock()
	s.fenceBuckets = s.fenceBuckets[:0]
	if bc == nil {
		return
	}
	if s.own != nil {
		// The pinned backend is gone: so is the session state it kept.
		pinning(s).clearPin()
		s.pinLost = true
		bc.Pool.Discard(bc)
		return
	}
	if clean && !bc.Broken {
		bc.Pool.Release(bc)
	} else {
		bc.Pool.Discard(bc)
	}
}
