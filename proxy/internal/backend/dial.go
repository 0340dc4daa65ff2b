package backend

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgshard/pgshard/migrations"
	"github.com/pgshard/pgshard/proxy/internal/pgwire"
	"github.com/pgshard/pgshard/shardmap"
)

// dialer makes one shard's backend connections: the startup through
// pgconn, the identity check, the takeover (Hijack) and the client's error
// when it fails. It holds what that needs and no pool state: the shard,
// its parsed DSN (base) and address, whether it is the shard's PgBouncer,
// and the pool's environment and health flags it reads and sets. Slots,
// waiters and the open connections stay with the Pool (connect).
type dialer struct {
	shard shardmap.Shard
	// base is the parsed DSN (the pooler's when viaPooler); connections
	// copy it. Read-only after NewPool.
	base      *pgconn.Config
	addr      string // host:port, for messages
	viaPooler bool
	// env is the pool's environment (its newest generation's): timeouts,
	// VerifyIdentity, the statement cache, the map and identity register.
	env *atomic.Pointer[Env]
	// verified is the pool's "identity record matched" flag (Pool.Verified).
	verified *atomic.Bool
	// down is the pool's health (Pool.Down): a failed connect to the
	// shard's Postgres marks it down until the next probe.
	down *atomic.Pointer[pgwire.Error]
}

func (d *dialer) Env() *Env { return d.env.Load() }

// open opens a connection with startup settings key as user ("" = the
// key's user, else the DSN's). The connection is not yet the pool's:
// Pool.connect sets its Pool and reconnect generation and registers it.
func (d *dialer) open(ctx context.Context, key *Settings, user string) (*Conn, error) {
	cfg := d.base.Copy()
	if user == "" {
		user = key.user
	}
	if user != "" {
		cfg.User = user
	}
	for k, v := range key.runtimeParams(d.viaPooler) {
		cfg.RuntimeParams[k] = v
	}
	// Straight to Postgres a client that sets no application_name (or an
	// empty one) sees Postgres's default, '', as directly. PgBouncer 1.18
	// ignores an empty or absent one — its server connection would keep
	// whatever name its previous client set, another client's — so towards
	// it such a client's connections say "pgshard proxy", which PgBouncer
	// then sets for each of them. One in the shard's DSN stands either way.
	if d.viaPooler && cfg.RuntimeParams["application_name"] == "" {
		cfg.RuntimeParams["application_name"] = "pgshard proxy"
	}
	ctx, cancel := context.WithTimeout(ctx, d.Env().ConnectTimeout)
	defer cancel()
	pc, err := pgconn.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, d.connectError(err)
	}
	if d.Env().VerifyIdentity && !d.verified.Load() {
		if err := d.verify(ctx, pc); err != nil {
			_ = pc.Close(context.Background())
			return nil, err
		}
	}
	var canon map[string]string
	if d.viaPooler {
		if canon, err = canonicalStatuses(ctx, pc, key); err != nil {
			_ = pc.Close(context.Background())
			return nil, d.connectError(err)
		}
	}
	// pgconn may still be reading in the background (its reader starts
	// when a write takes over 15ms, as on a loaded machine, and stops only
	// after its read in progress returns) or hold buffered bytes: taken
	// over like that, its reader would steal the backend's next reply and
	// the proxy would wait for it forever. SyncConn stops it (pgconn's
	// documented step before Hijack).
	if err := pc.SyncConn(ctx); err != nil {
		_ = pc.Close(context.Background())
		return nil, d.connectError(err)
	}
	hc, err := pc.Hijack()
	if err != nil {
		_ = pc.Close(context.Background())
		return nil, d.connectError(err)
	}
	cio := pgwire.ConnIO(hc.Conn)
	c := &Conn{
		NetConn:  hc.Conn,
		IO:       cio,
		Reader:   pgwire.NewMsgReader(cio, nil),
		key:      key,
		Statuses: hc.ParameterStatuses,
		PID:      hc.PID,
		Secret:   hc.SecretKey,
		opened:   time.Now(),
	}
	for n, v := range canon {
		c.Statuses[n] = v
	}
	_, c.TLS = hc.Conn.(*tls.Conn)
	c.Reader.Ready = hc.TxStatus
	c.peekFn = c.peek
	if !d.viaPooler && d.Env().StatementCacheSize > 0 {
		c.Stmts = NewStmtCache(d.Env().StatementCacheSize)
		c.Stmts.Epoch = d.Env().StmtEpoch.Load()
	}
	return c, nil
}

// canonicalStatuses returns, for the parameters PgBouncer tracks that key
// sets, the values the server reports for them, which open puts in place
// of the connection's ParameterStatus values: PgBouncer reports a client's own spelling of its
// startup parameters ("utf8", "euc-jp", "iso, dmy"), where Postgres
// reports its canonical one ("UTF8", "EUC_JP", "ISO, DMY"), which drivers
// compare against (psycopg's connection encoding). One round trip, only
// on a new connection whose settings name any of them.
func canonicalStatuses(ctx context.Context, pc *pgconn.PgConn, key *Settings) (map[string]string, error) {
	var names []string
	for _, p := range key.KV {
		if n, ok := poolerTracked[p[0]]; ok && n != "application_name" {
			names = append(names, n)
		}
	}
	if len(names) == 0 {
		return nil, nil
	}
	var q strings.Builder
	q.WriteString("SELECT ")
	for i, n := range names {
		if i > 0 {
			q.WriteString(", ")
		}
		q.WriteString("pg_catalog.current_setting(")
		q.WriteString(QuoteLiteral(n))
		q.WriteString(")")
	}
	res, err := pc.Exec(ctx, q.String()).ReadAll()
	if err != nil {
		return nil, err
	}
	if len(res) != 1 || len(res[0].Rows) != 1 || len(res[0].Rows[0]) != len(names) {
		return nil, fmt.Errorf("reading the server's values of %s: unexpected answer", strings.Join(names, ", "))
	}
	canon := make(map[string]string, len(names))
	for i, n := range names {
		canon[n] = string(res[0].Rows[0][i])
	}
	return canon, nil
}

// connectError turns a connect failure into the client's error: a
// Postgres error (bad setting, authentication) keeps its fields; anything
// else names the shard.
func (d *dialer) connectError(err error) error {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		if d.viaPooler {
			pe = bouncerLoginError(pe, d.shard.Name)
		}
		return &PgError{PgErr: pe, shard: d.shard.Name}
	}
	e := &pgwire.Error{Code: pgwire.CodeConnectionFailure,
		Message: fmt.Sprintf("cannot connect to shard %q at %s: %v", d.shard.Name, d.addr, ShortErr(err)),
		Hint:    "The shard's server is down or unreachable; transactions for other shards still work."}
	if d.Env().HealthInterval > 0 && !d.viaPooler {
		// Until the next probe says otherwise, fail fast.
		if d.down.Swap(e) == nil {
			d.Env().Log.Warn("shard is down", "shard", d.shard.Name, "addr", d.addr, "err", ShortErr(err))
		}
	}
	return e
}

// bouncerLoginError gives PgBouncer's refusal of a login the SQLSTATE
// Postgres gives its own: PgBouncer 1.18 sends every error as 08P01
// (protocol violation), so a client would take a role PgBouncer does not
// know, or a wrong password, for a bug in the wire protocol. Its login
// refusals ("trust" / password / SASL authentication failed, no such
// user) become 28000 (invalid authorization) or, for a password, 28P01,
// with the shard named; any other error is e itself.
func bouncerLoginError(e *pgconn.PgError, shard string) *pgconn.PgError {
	if e.Code != pgwire.CodeProtocolViolation {
		return e
	}
	code := ""
	switch m := e.Message; {
	case strings.Contains(m, "password authentication failed"), strings.Contains(m, "SASL authentication failed"):
		code = "28P01"
	case strings.Contains(m, "authentication failed"), strings.HasPrefix(m, "no such user"):
		code = "28000"
	default:
		return e
	}
	c := *e
	c.Code = code
	c.Message = fmt.Sprintf("the PgBouncer of shard %q refused the login: %s", shard, e.Message)
	c.Hint = "The role must be one that PgBouncer admits (its auth_file, or its auth_query), with the password it holds."
	return &c
}

// PgError is a Postgres error returned while connecting.
type PgError struct {
	PgErr *pgconn.PgError
	shard string
}

func (e *PgError) Error() string { return "shard " + e.shard + ": " + e.PgErr.Error() }
func (e *PgError) Unwrap() error { return e.PgErr }

// verify checks the shard's identity record on a fresh connection.
func (d *dialer) verify(ctx context.Context, pc *pgconn.PgConn) error {
	rr := pc.ExecParams(ctx, "SELECT shard_name, ordinal, buckets, map_epoch, database_id::text FROM pgshard_identity", nil, nil, nil, nil).Read()
	if rr.Err != nil && Unreachable(rr.Err) {
		// Through PgBouncer: the login worked, the shard behind it is down.
		return &pgwire.Error{Code: pgwire.CodeConnectionFailure,
			Message: fmt.Sprintf("cannot reach shard %q through %s: %s", d.shard.Name, d.addr, ShortErr(rr.Err)),
			Hint:    "The shard's server is down or unreachable; transactions for other shards still work."}
	}
	if rr.Err != nil || len(rr.Rows) != 1 || len(rr.Rows[0]) != 5 {
		reason := "no identity record (run pgshard migrate)"
		if rr.Err != nil {
			reason = ShortErr(rr.Err)
		}
		return &pgwire.Error{Code: pgwire.CodeCannotConnect, Message: fmt.Sprintf("shard %q failed its identity check: %s", d.shard.Name, reason)}
	}
	row := rr.Rows[0]
	ord, _ := strconv.Atoi(string(row[1]))
	buckets, _ := strconv.Atoi(string(row[2]))
	epoch, _ := strconv.ParseUint(string(row[3]), 10, 64)
	id := migrations.Identity{ShardName: string(row[0]), Ordinal: ord, Buckets: buckets, MapEpoch: epoch, DatabaseID: string(row[4])}
	if err := id.Check(d.shard, d.Env().Map); err != nil {
		return &pgwire.Error{Code: pgwire.CodeCannotConnect, Message: fmt.Sprintf("shard %q failed its identity check: %v", d.shard.Name, err)}
	}
	if err := d.Env().RegisterDatabaseID(d.shard.Name, id.DatabaseID); err != nil {
		return &pgwire.Error{Code: pgwire.CodeCannotConnect, Message: err.Error()}
	}
	d.verified.Store(true)
	return nil
}
