package catalog

import (
	"context"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
)

//go:embed sql/*.sql
var sqlFiles embed.FS

// Version is one released change of the catalog's schema. Its SQL is never
// edited once released: the ledger records a checksum and Install refuses
// a mismatch.
type Version struct {
	Number   int    // from the file name: 0001_name.sql → 1
	Name     string // from the file name: 0001_name.sql → "name"
	SQL      string
	Checksum string // hex sha256 of SQL
}

// ID is "0001_name", the version's file name without extension.
func (v Version) ID() string { return fmt.Sprintf("%04d_%s", v.Number, v.Name) }

var versions = mustLoad(sqlFiles)

// Versions returns the catalog schema versions of this build, in order.
func Versions() []Version { return append([]Version(nil), versions...) }

func mustLoad(fsys fs.FS) []Version {
	vs, err := loadVersions(fsys)
	if err != nil {
		panic(err)
	}
	return vs
}

func loadVersions(fsys fs.FS) ([]Version, error) {
	names, err := fs.Glob(fsys, "sql/*.sql")
	if err != nil {
		return nil, err
	}
	var out []Version
	for _, name := range names {
		base := strings.TrimSuffix(path.Base(name), ".sql")
		num, rest, ok := strings.Cut(base, "_")
		n, err := strconv.Atoi(num)
		if !ok || err != nil || n <= 0 || rest == "" {
			return nil, fmt.Errorf("catalog schema file %s: name must be NNNN_description.sql", name)
		}
		body, err := fs.ReadFile(fsys, name)
		if err != nil {
			return nil, err
		}
		sum := sha256.Sum256(body)
		out = append(out, Version{Number: n, Name: rest, SQL: string(body), Checksum: hex.EncodeToString(sum[:])})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Number < out[j].Number })
	for i, v := range out {
		if v.Number != i+1 {
			return nil, fmt.Errorf("catalog schema file %s: versions must be 1, 2, 3, ... without gaps or duplicates", v.ID())
		}
	}
	return out, nil
}

// lockKey is the pg_advisory_xact_lock key that serializes concurrent
// installers of one catalog ("pgshcat1" in ASCII); it differs from the
// shard migrators' key, so a catalog may share a database with a shard.
const lockKey int64 = 0x7067736863617431

// installLockTimeout bounds each installer's wait for the lock (and for
// DDL's table locks).
const installLockTimeout = "30s"

// ledgerDDL creates the schema and its ledger. It runs under the advisory
// lock because concurrent CREATE ... IF NOT EXISTS can still collide on
// the system catalogs' unique indexes.
const ledgerDDL = `CREATE SCHEMA IF NOT EXISTS ` + Schema + `;
CREATE TABLE IF NOT EXISTS ` + Schema + `.schema_versions (
    version    INT PRIMARY KEY,
    name       TEXT NOT NULL,
    checksum   TEXT NOT NULL,
    applied_at TIMESTAMPTZ NOT NULL DEFAULT now()
)`

// UnknownVersionsError means the catalog's ledger holds versions this
// build does not know: a newer pgshard installed it, and this one must not
// touch it.
type UnknownVersionsError struct {
	Entries []string // "0002_name" as recorded
}

func (e *UnknownVersionsError) Error() string {
	return fmt.Sprintf("the catalog has schema versions this build does not know: %s (upgrade pgshard)", strings.Join(e.Entries, ", "))
}

// ChecksumMismatchError means a released catalog schema version was edited.
type ChecksumMismatchError struct {
	Version, Ledger, Build string
}

func (e *ChecksumMismatchError) Error() string {
	return fmt.Sprintf("catalog schema version %s was installed with checksum %.12s but this build has %.12s: released versions must never be edited",
		e.Version, e.Ledger, e.Build)
}

// Install creates or upgrades the catalog schema: the schema
// pgshard_catalog, its ledger, and every version of this build the ledger
// lacks, each in its own transaction holding a transaction-level advisory
// lock and recorded in the ledger in that transaction. It is idempotent,
// safe against concurrent installers and through a transaction pooler. It
// refuses a ledger with versions this build does not know or whose
// checksum differs. It returns the ids of the versions it applied.
func (c *Catalog) Install(ctx context.Context) ([]string, error) {
	applied, err := c.install(ctx, versions)
	if err != nil {
		return applied, fmt.Errorf("install catalog %s: %w", c.addr, err)
	}
	return applied, nil
}

func (c *Catalog) install(ctx context.Context, vs []Version) ([]string, error) {
	if err := c.lockedTx(ctx, func(tx pgx.Tx) error {
		return tx.Conn().PgConn().Exec(ctx, ledgerDDL).Close()
	}); err != nil {
		return nil, fmt.Errorf("create ledger: %w", err)
	}
	ledger := map[int][2]string{}
	if err := pgx.BeginFunc(ctx, c.pool, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `SELECT version, name, checksum FROM `+Schema+`.schema_versions ORDER BY version`)
		if err != nil {
			return err
		}
		var n int
		var name, sum string
		_, err = pgx.ForEachRow(rows, []any{&n, &name, &sum}, func() error {
			ledger[n] = [2]string{name, sum}
			return nil
		})
		return err
	}); err != nil {
		return nil, fmt.Errorf("read ledger: %w", err)
	}
	if err := checkLedger(ledger, vs); err != nil {
		return nil, err
	}
	var applied []string
	for _, v := range vs {
		if _, ok := ledger[v.Number]; ok {
			continue
		}
		done := false
		err := c.lockedTx(ctx, func(tx pgx.Tx) error {
			// Another installer may have applied it while we waited.
			var n int
			if err := tx.QueryRow(ctx, `SELECT count(*) FROM `+Schema+`.schema_versions WHERE version = $1::int`, v.Number).Scan(&n); err != nil {
				return err
			}
			if n > 0 {
				done = true
				return nil
			}
			// The simple protocol runs the file's statements in one message.
			if err := tx.Conn().PgConn().Exec(ctx, v.SQL).Close(); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, `INSERT INTO `+Schema+`.schema_versions (version, name, checksum) VALUES ($1::int, $2::text, $3::text)`,
				v.Number, v.Name, v.Checksum)
			return err
		})
		if err != nil {
			return applied, fmt.Errorf("schema version %s: %w", v.ID(), err)
		}
		if !done {
			applied = append(applied, v.ID())
		}
	}
	return applied, nil
}

// checkLedger refuses a ledger naming versions vs lacks or with a changed
// checksum.
func checkLedger(ledger map[int][2]string, vs []Version) error {
	known := make(map[int]Version, len(vs))
	for _, v := range vs {
		known[v.Number] = v
	}
	var unknown []string
	nums := make([]int, 0, len(ledger))
	for n := range ledger {
		nums = append(nums, n)
	}
	sort.Ints(nums)
	for _, n := range nums {
		row := ledger[n]
		v, ok := known[n]
		if !ok || v.Name != row[0] {
			unknown = append(unknown, fmt.Sprintf("%04d_%s", n, row[0]))
			continue
		}
		if v.Checksum != row[1] {
			return &ChecksumMismatchError{Version: v.ID(), Ledger: row[1], Build: v.Checksum}
		}
	}
	if len(unknown) > 0 {
		return &UnknownVersionsError{Entries: unknown}
	}
	return nil
}

// lockedTx runs f in a transaction that first takes the installers'
// transaction-level advisory lock, waiting at most installLockTimeout.
func (c *Catalog) lockedTx(ctx context.Context, f func(pgx.Tx) error) error {
	return pgx.BeginFunc(ctx, c.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT set_config('lock_timeout', $1::text, true)`, installLockTimeout); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1::bigint)`, lockKey); err != nil {
			return fmt.Errorf("wait for other installers: %w", err)
		}
		return f(tx)
	})
}

// errNoHead means the catalog's head row is missing: someone deleted it.
var errNoHead = errors.New("the catalog's head row (" + Schema + ".head) is missing: the catalog was damaged by hand")
