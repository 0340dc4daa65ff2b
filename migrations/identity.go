package migrations

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgshard/pgshard/shardmap"
)

// Querier is what identity checks need from a connection, a pool or a
// transaction (pgx.Conn, pgxpool.Pool and pgx.Tx all satisfy it).
type Querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Identity is a shard's record of itself (table pgshard_identity).
type Identity struct {
	ShardName  string
	Ordinal    int
	Buckets    int
	MapEpoch   uint64
	DatabaseID string // random uuid generated when the record was first written
	CreatedAt  time.Time
}

// ErrNoIdentity means the database has not been migrated by pgshard.
var ErrNoIdentity = errors.New("no pgshard identity record (run pgshard migrate)")

// IdentityMismatchError says a shard's identity record disagrees with the
// shard map.
type IdentityMismatchError struct {
	Shard    string // map entry
	Problems []string
}

func (e *IdentityMismatchError) Error() string {
	return "identity mismatch: " + strings.Join(e.Problems, "; ")
}

// ReadIdentity reads the shard identity record.
func ReadIdentity(ctx context.Context, q Querier) (Identity, error) {
	var id Identity
	var epoch int64
	err := q.QueryRow(ctx, `SELECT shard_name, ordinal, buckets, map_epoch, database_id::text, created_at
		FROM pgshard_identity`).Scan(&id.ShardName, &id.Ordinal, &id.Buckets, &epoch, &id.DatabaseID, &id.CreatedAt)
	if errors.Is(err, pgx.ErrNoRows) || isUndefinedTable(err) {
		return Identity{}, ErrNoIdentity
	}
	if err != nil {
		return Identity{}, fmt.Errorf("read shard identity: %w", err)
	}
	id.MapEpoch = uint64(epoch)
	return id, nil
}

// Check compares the record with the map entry s of m. The record's map epoch
// may be older than m's (the map moved on) but never newer: a newer epoch
// means m is stale.
func (id Identity) Check(s shardmap.Shard, m *shardmap.Map) error {
	var p []string
	if id.ShardName != s.Name {
		p = append(p, fmt.Sprintf("the database belongs to shard %q (ordinal %d), not %q: do two map entries point at one database?", id.ShardName, id.Ordinal, s.Name))
	}
	if id.Ordinal != s.Ordinal {
		p = append(p, fmt.Sprintf("the database has ordinal %d, the map says %d", id.Ordinal, s.Ordinal))
	}
	if id.Buckets != m.Buckets {
		p = append(p, fmt.Sprintf("the database was created for %d buckets, the map has %d", id.Buckets, m.Buckets))
	}
	if id.MapEpoch > m.Epoch {
		p = append(p, fmt.Sprintf("the database has seen map epoch %d, newer than this map's epoch %d (stale map?)", id.MapEpoch, m.Epoch))
	}
	if len(p) > 0 {
		return &IdentityMismatchError{Shard: s.Name, Problems: p}
	}
	return nil
}

// CheckDistinct fails when two map entries reach the same database, which
// shows up as one database id under two shard names.
func CheckDistinct(ids map[string]Identity) error {
	byDB := map[string]string{}
	var p []string
	for _, name := range sortedKeys(ids) {
		id := ids[name]
		if other, dup := byDB[id.DatabaseID]; dup {
			p = append(p, fmt.Sprintf("map entries %q and %q point at the same database (database id %s)", other, name, id.DatabaseID))
			continue
		}
		byDB[id.DatabaseID] = name
	}
	if len(p) > 0 {
		return errors.New(strings.Join(p, "; "))
	}
	return nil
}

// VerifyCluster reads every shard's identity through q(shard) and checks it
// against m: each record matches its map entry, and no two entries share a
// database. The router and the proxy call it at start.
func VerifyCluster(ctx context.Context, m *shardmap.Map, q func(shardmap.Shard) Querier) error {
	ids := make(map[string]Identity, len(m.Shards))
	var errs []error
	for _, s := range m.Shards {
		id, err := ReadIdentity(ctx, q(s))
		if err != nil {
			errs = append(errs, fmt.Errorf("shard %q: %w", s.Name, err))
			continue
		}
		if err := id.Check(s, m); err != nil {
			errs = append(errs, fmt.Errorf("shard %q: %w", s.Name, err))
			continue
		}
		ids[s.Name] = id
	}
	if err := CheckDistinct(ids); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
