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

	"github.com/pgshard/pgshard/proxy/internal/auth"
	"github.com/pgshard/pgshard/proxy/internal/backend"
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
	clientConn

	pid, secret uint32
	user, db    string

	// fenceBuckets are the buckets asserted in the backend's current
	// transaction (fence.go).
	fenceBuckets []int
	// fretry is the retry budget of the client message being run after
	// a fence refusal (fenceretry.go).
	fretry fenceRetryState

	// Settings: startup is what the client connected with, cur the
	// session's current settings (startup + session SETs).
	startup, cur *backend.Settings
	// paramStatus: what the client was told of the reported parameters
	// (paramstatus.go).
	paramStatus

	// stmts are the client's named prepared statements (virtual); unnamed
	// is the unnamed one.
	stmts   map[string]*vstmt
	unnamed *vstmt

	// transaction is where the client's transaction is (txnstate.go).
	transaction

	mu     sync.Mutex // guards bc, closed and fanning against cancelBackend
	bc     *backend.Conn
	closed bool
	// readers are the transaction's read-only backend transactions on
	// other shards (readtxns.go).
	readers readerSet
	// fanning are the connections a fan-out is reading (cancel reaches all).
	fanning []*backend.Conn

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
	// asSelf: admitted through the "*" login; its backends log in as its
	// own user (settings.user).
	asSelf bool
	// terminateSelf: the client called pg_terminate_backend of its own
	// session's PID (terminate.go): it ends after that answer.
	terminateSelf bool
	// selfFatalSent: that FATAL was already sent, as the answer of a
	// pg_terminate_backend(pg_backend_pid()).
	selfFatalSent bool
	// bwHold, when set, is where s.bw's bytes that must wait for a COPY
	// FROM STDIN to finish begin, and bwHoldItem the first item they
	// answer (exchange).
	bwHold, bwHoldItem int

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
	// plan is allocated at the first (an idle client holds none).
	plan     *planner
	grp      []cmsg
	grpBytes int
	items    []item
	lbuf     []byte
	bw       []byte
	pv       pgwire.ParseView
	bv       pgwire.BindView
	portals  []portalInfo
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
		gen:         gen,
		host:        host,
		connected:   time.Now(),
		log:         gen.Log,
		transaction: transaction{hint: -1},
		stmts:       map[string]*vstmt{},
		paramStatus: paramStatus{seen: map[string]string{}},
	}
	s.clientConn.init(conn, s.messageLimit)
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
	_ = s.conn.Close()
}

// Run serves the client until it disconnects, misbehaves or the server
// shuts down.
func (s *Session) Run(ctx context.Context) {
	ok, err := s.startupPhase(ctx)
	if !ok {
		if err != nil && !isDisconnect(err) {
			s.log.Debug("client startup failed", "remote", s.conn.RemoteAddr().String(), "err", err)
		}
		return
	}
	defer s.host.Clients.unregister(s)
	defer s.releaseAll()
	if s.admin {
		err = s.console.serve(ctx, &s.clientConn, s.host, ConsoleCaller{User: s.user, Log: s.log})
	} else if s.canRelay() {
		err = s.relay(s.bc)
	} else {
		err = s.serve(ctx)
	}
	switch {
	case err == nil, isDisconnect(err):
	case errors.Is(err, pgwire.ErrProtocol):
		s.log.Info("closing client after a protocol error", "user", s.user, "remote", s.conn.RemoteAddr().String(), "err", err)
		s.out = pgwire.AppendError(s.out[:0], &pgwire.Error{Severity: "FATAL", Code: pgwire.CodeProtocolViolation, Message: err.Error()})
		_ = s.flush()
	default:
		var e *pgwire.Error
		if errors.As(err, &e) {
			s.out = pgwire.AppendError(s.out, e)
			_ = s.flush()
		}
		s.log.Debug("client session ended", "user", s.user, "err", err)
	}
}

func isDisconnect(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) || errors.Is(err, os.ErrDeadlineExceeded)
}

// startupPhase negotiates, authenticates and sends the initial parameter
// statuses. It returns false when the connection is done (cancel request,
// refused or failed startup).
func (s *Session) startupPhase(ctx context.Context) (bool, error) {
	_ = s.conn.SetDeadline(time.Now().Add(s.gen.Config.StartupTimeout))
	defer s.conn.SetDeadline(time.Time{})
	pkt, ok, err := s.negotiate(ctx, s.host)
	if !ok {
		return false, err
	}
	if e := s.identify(pkt); e != nil {
		return s.fail(e)
	}
	if s.admin {
		return s.adminStartup(ctx, pkt)
	}
	if e := s.chooseDatabase(); e != nil {
		return s.fail(e)
	}
	kv, e := startupParams(pkt)
	if e != nil {
		return s.fail(e)
	}
	if ok, err := s.admit(); !ok {
		return false, err
	}
	if pkt.Minor > 0 || len(pkt.ProtocolOptions) > 0 {
		s.out = appendNegotiateProtocol(s.out, pkt.ProtocolOptions)
	}
	return s.greet(ctx, kv)
}

// negotiate reads startup packets up to the one that starts the session:
// SSLRequest gets TLS (or 'N'), GSSENCRequest 'N', a CancelRequest is
// carried out. ok is false when the connection is done (a cancel request,
// or a failure: err).
func (c *clientConn) negotiate(ctx context.Context, host *HostEnv) (pkt *pgwire.StartupPacket, ok bool, err error) {
	for tries := 0; ; tries++ {
		pkt, err = pgwire.ReadStartupPacket(c.conn)
		if err != nil {
			var e *pgwire.Error
			if errors.As(err, &e) {
				ok, err = c.fail(e)
				return nil, ok, err
			}
			if errors.Is(err, pgwire.ErrProtocol) {
				ok, err = c.fail(pgwire.NewFatal(pgwire.CodeProtocolViolation, err.Error()))
				return nil, ok, err
			}
			return nil, false, err
		}
		if tries >= 2 && (pkt.Kind == pgwire.StartupSSL || pkt.Kind == pgwire.StartupGSSEnc) {
			ok, err = c.fail(pgwire.NewFatal(pgwire.CodeProtocolViolation, "too many encryption requests"))
			return nil, ok, err
		}
		switch pkt.Kind {
		case pgwire.StartupSSL:
			if err := c.startTLS(host.TLS.Load()); err != nil { // 'S' and a handshake, or 'N'
				return nil, false, err
			}
			continue
		case pgwire.StartupGSSEnc:
			// Not supported: 'N' tells the client to go on without it.
			if _, err := c.conn.Write([]byte{'N'}); err != nil {
				return nil, false, err
			}
			continue
		case pgwire.StartupCancel:
			host.Clients.Cancel(ctx, pkt.CancelPID, pkt.CancelKey)
			return nil, false, nil
		}
		return pkt, true, nil
	}
}

// identify takes the session's user, database and application from the
// startup packet, and refuses a connection the proxy does not accept
// (without TLS where it is required, without a user, for replication, or
// while logins are disabled, but to the console).
func (s *Session) identify(pkt *pgwire.StartupPacket) *pgwire.Error {
	if ts := s.host.TLS.Load(); ts != nil && ts.Mode == auth.TLSRequire && !s.tlsOn {
		s.host.Metrics.ClientsRefused.WithLabelValues("tls_required").Inc()
		return &pgwire.Error{Severity: "FATAL", Code: pgwire.CodeInvalidAuthorization,
			Message: "pgshard accepts only TLS connections (proxy.tls.mode: require)",
			Hint:    "Connect with sslmode=require, verify-ca or verify-full."}
	}
	user, _ := pkt.Param("user")
	if user == "" {
		return pgwire.NewFatal(pgwire.CodeInvalidAuthorization, "no PostgreSQL user name specified in startup packet")
	}
	s.user = user
	s.db, _ = pkt.Param("database")
	if s.db == "" {
		s.db = user
	}
	if v, ok := pkt.Param("replication"); ok && v != "false" && v != "0" && v != "off" && v != "no" {
		return pgwire.NewFatal(pgwire.CodeFeatureNotSupported, "replication connections are not supported by pgshard")
	}
	s.app, _ = pkt.Param("application_name")
	s.admin = len(s.gen.Config.AdminUsers) > 0 && s.db == s.gen.Config.AdminDatabase
	if !s.admin && s.host.LoginsDisabled.Load() {
		s.host.Metrics.ClientsRefused.WithLabelValues("disabled").Inc()
		return &pgwire.Error{Severity: "FATAL", Code: pgwire.CodeCannotConnectNow,
			Message: "pgshard is not accepting new connections (DISABLE on the admin console)",
			Hint:    "Retry later; an operator re-enables logins with ENABLE."}
	}
	return nil
}

// chooseDatabase gives the session the server of its logical database
// (databases.go), or refuses a database the proxy does not serve.
func (s *Session) chooseDatabase() *pgwire.Error {
	if sub := s.gen.Ops.DatabaseEnv(s.db); sub != s.gen {
		// Another logical database: its server serves the session (its
		// pools and routing); the session stays with the accepting server (console,
		// cancel keys, shutdown).
		s.gen, s.log = sub, sub.Log
	} else if len(s.gen.Config.Databases) > 0 && !slices.Contains(s.gen.Config.Databases, s.db) {
		return pgwire.NewFatal(pgwire.CodeInvalidCatalogName, fmt.Sprintf("database %q does not exist", s.db))
	}
	return nil
}

// startupParams are the settings the startup packet gives the session:
// its parameters but those only startup takes, then those of its
// options; a pgshard hint among them is refused.
func startupParams(pkt *pgwire.StartupPacket) ([][2]string, *pgwire.Error) {
	var kv [][2]string
	for _, p := range pkt.Params {
		name := strings.ToLower(p[0])
		if backend.StartupOnly[name] {
			continue
		}
		kv = append(kv, [2]string{name, p[1]})
	}
	if opts, ok := pkt.Param("options"); ok {
		o, err := pgwire.ParseOptions(opts)
		if err != nil {
			return nil, pgwire.AsError(err, pgwire.NewFatal(pgwire.CodeProtocolViolation, err.Error()))
		}
		kv = append(kv, o...)
	}
	for _, p := range kv {
		if strings.HasPrefix(p[0], "pgshard.") {
			return nil, pgwire.NewFatal(pgwire.CodeFeatureNotSupported, fmt.Sprintf("%s cannot be a startup parameter: pgshard hints are transaction-local (SET LOCAL)", p[0]))
		}
	}
	return kv, nil
}

// greet sets the session's startup settings kv, pins it at startup or
// reads the shards' parameter statuses, and sends them, BackendKeyData
// and the first ReadyForQuery.
func (s *Session) greet(ctx context.Context, kv [][2]string) (bool, error) {
	s.startup = backend.NewSettings(kv)
	if s.asSelf {
		s.startup = s.startup.WithUser(s.user) // it reaches the shards as itself
	}
	s.cur = s.startup
	st, e := s.pinAtStartup(ctx)
	if e == nil && st == nil {
		st, e = s.gen.initialStatuses(ctx, s.cur)
	}
	if e != nil {
		s.host.Clients.unregister(s)
		s.releaseAll()
		return s.fail(e)
	}
	s.reported = st
	s.startupReported = st
	names := make([]string, 0, len(st))
	for n := range st {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		s.out = pgwire.AppendParameterStatus(s.out, n, st[n]) // s.seen: told
	}
	return s.sendKeyAndReady()
}

// sendKeyAndReady ends a greeting whose ParameterStatus messages are in
// s.out: BackendKeyData (the cancel key) and the first ReadyForQuery,
// flushed. A client it cannot reach leaves the register. The greeting's
// buffer is dropped: a client that stays idle holds none.
func (s *Session) sendKeyAndReady() (bool, error) {
	s.out = append(s.out, 'K', 0, 0, 0, 12)
	s.out = pgwire.AppendU32(s.out, s.pid)
	s.out = pgwire.AppendU32(s.out, s.secret)
	s.out = pgwire.AppendRFQ(s.out, 'I')
	if err := s.flush(); err != nil {
		s.host.Clients.unregister(s)
		return false, err
	}
	s.out = nil
	return true, nil
}

func appendNegotiateProtocol(dst []byte, unsupported []string) []byte {
	dst, sp := pgwire.BeginMsg(dst, 'v')
	dst = pgwire.AppendU32(dst, pgwire.ProtocolV3)
	dst = pgwire.AppendU32(dst, uint32(len(unsupported)))
	for _, o := range unsupported {
		dst = pgwire.AppendCStr(dst, o)
	}
	return pgwire.FinishMsg(dst, sp)
}

// login is user's login (ok false: none); asSelf: through the "*" login,
// which stands for every user not listed (local development and
// compatibility runs: `--trust-user '*'`).
func (g *GenerationEnv) login(user string) (l Login, asSelf, ok bool) {
	if l, ok = g.Users[user]; ok {
		return l, false, true
	}
	l, ok = g.Users["*"]
	return l, ok, ok
}

// authenticate runs trust or SCRAM-SHA-256 with the client for user's
// login l (ok false: user has none); refusals are logged on log.
func (c *clientConn) authenticate(l Login, ok bool, user string, log *slog.Logger) (bool, error) {
	if !ok {
		_, err := c.fail(pgwire.NewFatal(pgwire.CodeInvalidPassword, fmt.Sprintf("password authentication failed for user %q", user)))
		log.Info("login refused: unknown user", "user", user, "remote", c.conn.RemoteAddr().String())
		return false, err
	}
	if l.Trust {
		c.out = append(c.out, 'R', 0, 0, 0, 8, 0, 0, 0, 0)
		return true, nil
	}
	// AuthenticationSASL
	c.out, _ = appendAuth(c.out, 10, []byte(auth.Mechanism+"\x00\x00"))
	if err := c.flush(); err != nil {
		return false, err
	}
	authFail := func(reason string) (bool, error) {
		log.Info("login refused", "user", user, "remote", c.conn.RemoteAddr().String(), "reason", reason)
		_, err := c.fail(pgwire.NewFatal(pgwire.CodeInvalidPassword, fmt.Sprintf("password authentication failed for user %q", user)))
		return false, err
	}
	typ, msg, err := c.rd.Next()
	if err != nil {
		return false, err
	}
	if typ != 'p' {
		return c.fail(pgwire.NewFatal(pgwire.CodeProtocolViolation, fmt.Sprintf("expected SASL response, got message type %d", typ)))
	}
	b := pgwire.Body(msg)
	mech, i, err := pgwire.CString(b, 0)
	if err != nil || len(b)-i < 4 {
		return c.fail(pgwire.NewFatal(pgwire.CodeProtocolViolation, "malformed SASLInitialResponse message"))
	}
	if string(mech) != auth.Mechanism {
		return c.fail(pgwire.NewFatal(pgwire.CodeProtocolViolation, "client selected an invalid SASL authentication mechanism"))
	}
	n := int(int32(uint32(b[i])<<24 | uint32(b[i+1])<<16 | uint32(b[i+2])<<8 | uint32(b[i+3])))
	i += 4
	if n < 0 || len(b)-i != n {
		return c.fail(pgwire.NewFatal(pgwire.CodeProtocolViolation, "malformed SASLInitialResponse message"))
	}
	sc := &auth.SCRAMServer{Verifier: l.Verifier}
	serverFirst, err := sc.First(string(b[i:]))
	if err != nil {
		return authFail(err.Error())
	}
	c.out, _ = appendAuth(c.out, 11, []byte(serverFirst))
	if err := c.flush(); err != nil {
		return false, err
	}
	typ, msg, err = c.rd.Next()
	if err != nil {
		return false, err
	}
	if typ != 'p' {
		return c.fail(pgwire.NewFatal(pgwire.CodeProtocolViolation, fmt.Sprintf("expected SASL response, got message type %d", typ)))
	}
	serverFinal, err := sc.Final(string(pgwire.Body(msg)))
	if err != nil {
		return authFail(err.Error())
	}
	c.out, _ = appendAuth(c.out, 12, []byte(serverFinal))
	c.out = append(c.out, 'R', 0, 0, 0, 8, 0, 0, 0, 0)
	return true, nil
}

func appendAuth(dst []byte, code uint32, data []byte) ([]byte, error) {
	dst, sp := pgwire.BeginMsg(dst, 'R')
	dst = pgwire.AppendU32(dst, code)
	dst = append(dst, data...)
	return pgwire.FinishMsg(dst, sp), nil
}

// initialStatuses returns the ParameterStatus values a client gets at
// startup: those of a backend connection opened with its startup
// settings cur (which also validates them, as Postgres would), plus the
// canonical values of the settings the preamble applies.
func (g *GenerationEnv) initialStatuses(ctx context.Context, cur *backend.Settings) (map[string]string, *pgwire.Error) {
	var lastErr error
	first := g.pickAny()
	for k := 0; k < len(g.Pools); k++ {
		p := g.Pools[(first+k)%len(g.Pools)]
		if p.IsDown() != nil {
			lastErr = p.IsDown()
			continue
		}
		key, pre := cur.Split(p.ViaPooler)
		st, err := p.StartupStatuses(ctx, key)
		if err != nil {
			var be *backend.PgError
			if errors.As(err, &be) {
				// The server refused the client's settings: that is the
				// client's error, as it would have been connecting directly.
				return nil, pgErrorToError(be.PgErr, "FATAL")
			}
			lastErr = err
			continue
		}
		if len(pre.KV) == 0 {
			// Shared by the sessions with these settings: the pool's
			// map is never written, and a session copies before writing.
			return st, nil
		}
		out := make(map[string]string, len(st)+4)
		for n, v := range st {
			out[n] = v
		}
		if len(pre.KV) > 0 {
			vals, e := g.validatePreamble(ctx, p, key, pre)
			if e != nil {
				e.Severity = "FATAL"
				return nil, e
			}
			for n, v := range vals {
				out[n] = v
			}
		}
		return out, nil
	}
	e := pgwire.AsError(lastErr, pgwire.NewFatal(pgwire.CodeCannotConnect, "no shard is reachable"))
	return nil, &pgwire.Error{Severity: "FATAL", Code: e.Code, Message: "cannot start the session: no shard is reachable: " + e.Message, Hint: e.Hint}
}

// pgErrorToError converts a backend's PgError (met while connecting) into
// an Error with the same code and texts.
func pgErrorToError(pe *pgconn.PgError, severity string) *pgwire.Error {
	return &pgwire.Error{Severity: severity, Code: pe.Code, Message: pe.Message, Detail: pe.Detail, Hint: pe.Hint,
		Raw: pgwire.AppendPgError(nil, pe, severity)}
}

// releaseAll returns or discards what the session holds when it ends.
func (s *Session) releaseAll() {
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
		s.clearPin()
		bc.Pool.Discard(bc)
		return
	}
	if s.tx == txBound || s.pipelineHeld {
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
		s.clearPin()
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

// admit registers the session (bounded by max_clients) and authenticates
// it: the start of every login, the admin console's too. A refusal is
// counted by its reason and leaves the session unregistered.
func (s *Session) admit() (bool, error) {
	if !s.host.Clients.register(s, s.host.Ops.CurrentEnv().Config.MaxClients) {
		s.host.Metrics.ClientsRefused.WithLabelValues("max_clients").Inc()
		return s.fail(pgwire.NewFatal(pgwire.CodeTooManyConnections, "sorry, too many clients already"))
	}
	l, asSelf, found := s.gen.login(s.user)
	s.asSelf = asSelf
	ok, err := s.authenticate(l, found, s.user, s.log)
	if !ok {
		s.host.Clients.unregister(s)
		s.host.Metrics.ClientsRefused.WithLabelValues("auth").Inc()
		return false, err
	}
	return true, nil
}
