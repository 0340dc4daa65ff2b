package catalog

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Schema is the Postgres schema that holds the catalog's tables.
const Schema = "pgshard_catalog"

// Defaults of Options.
const (
	DefaultMaxConns       = 4
	DefaultConnectTimeout = 5 * time.Second
)

// Options configure Open. The zero value is usable.
type Options struct {
	// MaxConns bounds the catalog's connection pool (default 4).
	MaxConns int
	// ConnectTimeout bounds each new connection (default 5 s).
	ConnectTimeout time.Duration
	// ApplicationName is reported to the server and recorded as the
	// pusher of the generations this catalog writes (default "pgshard").
	ApplicationName string
}

func (o Options) withDefaults() Options {
	if o.MaxConns <= 0 {
		o.MaxConns = DefaultMaxConns
	}
	if o.ConnectTimeout <= 0 {
		o.ConnectTimeout = DefaultConnectTimeout
	}
	if o.ApplicationName == "" {
		o.ApplicationName = "pgshard"
	}
	return o
}

// Catalog is the shard map's catalog on one Postgres database. It is safe
// for concurrent use. It keeps no session state, so its DSN may point at a
// PgBouncer in transaction mode.
type Catalog struct {
	pool *pgxpool.Pool
	opts Options
	addr string // host:port/database, never a password
}

// ErrNotInstalled means the database has no catalog schema: Install (or
// `pgshard map push`, which installs it) has not run there.
var ErrNotInstalled = errors.New("the pgshard catalog is not installed in this database (no schema " + Schema + "): `pgshard map push --catalog DSN` installs it and pushes a map")

// ErrEmpty means the catalog is installed but no map was pushed yet.
var ErrEmpty = errors.New("the catalog holds no shard map yet (epoch 0): push one with `pgshard map push`")

// Open connects to the catalog database at dsn and checks that the server
// answers (bounded by Options.ConnectTimeout and ctx). It does not require
// the catalog to be installed: Install does that. Statements are sent as
// unnamed prepared statements (pgx's QueryExecModeExec), so the DSN may be
// a transaction-pooling PgBouncer.
func Open(ctx context.Context, dsn string, opts Options) (*Catalog, error) {
	opts = opts.withDefaults()
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		// pgx's parse errors do not quote the DSN's password.
		return nil, fmt.Errorf("open catalog: %w", err)
	}
	c := &Catalog{opts: opts, addr: describe(cfg.ConnConfig)}
	cfg.MaxConns = int32(opts.MaxConns)
	cfg.ConnConfig.ConnectTimeout = opts.ConnectTimeout
	// Unnamed statements only: named ones would live on a server session
	// that a transaction pooler hands to other clients.
	cfg.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeExec
	cfg.ConnConfig.RuntimeParams["application_name"] = opts.ApplicationName
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("open catalog %s: %w", c.addr, err)
	}
	pctx, cancel := context.WithTimeout(ctx, opts.ConnectTimeout)
	defer cancel()
	if err := pool.Ping(pctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("open catalog %s: %w", c.addr, err)
	}
	c.pool = pool
	return c, nil
}

// Close closes the catalog's connections.
func (c *Catalog) Close() { c.pool.Close() }

// Addr names the catalog database as host:port/database (no password).
func (c *Catalog) Addr() string { return c.addr }

// describe names a database without its password.
func describe(cfg *pgx.ConnConfig) string {
	return fmt.Sprintf("%s:%d/%s", cfg.Host, cfg.Port, cfg.Database)
}

// wrap names the catalog in err and turns "no such table or schema" in
// the catalog's schema into ErrNotInstalled.
func (c *Catalog) wrap(op string, err error) error {
	if err == nil {
		return nil
	}
	if notInstalled(err) {
		return fmt.Errorf("%s: catalog %s: %w", op, c.addr, ErrNotInstalled)
	}
	return fmt.Errorf("%s: catalog %s: %w", op, c.addr, err)
}

// notInstalled reports whether err is Postgres saying a table, sequence or
// schema of the catalog does not exist.
func notInstalled(err error) bool {
	var pe *pgconn.PgError
	if !errors.As(err, &pe) {
		return false
	}
	switch pe.Code {
	case "42P01", "3F000": // undefined_table, invalid_schema_name
		return strings.Contains(pe.Message, Schema)
	}
	return false
}
