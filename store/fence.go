package store

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
)

// FenceSQLState is the SQLSTATE of a shard's fence refusing a key whose
// bucket the shard does not own (migration 0008; class PS, which no
// Postgres error uses).
const FenceSQLState = "PS001"

// ErrFenced is matched (errors.Is) by every *FenceError.
var ErrFenced = errors.New("refused by the shard's fence")

// FenceError is a shard's fence refusing an operation: the key's bucket
// is not served by the shard (ARCHITECTURE.md §6). The shard refused it
// before doing anything, in the operation's one transaction, which rolled
// back: nothing of the operation was applied, so it is safe to send again
// to the owner after reloading the shard map.
type FenceError struct {
	// Shard is the refusing shard's name (its identity record).
	Shard string
	// Bucket is the key's bucket.
	Bucket int
	// Lo and Hi are the range holding the bucket on the refusing shard;
	// both -1 when its fence has no range for the bucket.
	Lo, Hi int
	// State is the range's state there: "moved", "incoming" or "frozen"
	// (frozen refuses writes only); "" when no range holds the bucket.
	State string
	// Epoch is the map epoch the shard's fence row was set at.
	Epoch uint64
	// Owner is the shard owning the range as of Epoch, "" when unknown.
	Owner string
	// Err is the server's error, with its message, detail and hint.
	Err *pgconn.PgError
}

// Error is the server's message and hint.
func (e *FenceError) Error() string {
	if e.Err.Hint == "" {
		return e.Err.Message + " (SQLSTATE " + FenceSQLState + ")"
	}
	return e.Err.Message + " (SQLSTATE " + FenceSQLState + "; " + e.Err.Hint + ")"
}

// Unwrap returns the server's error.
func (e *FenceError) Unwrap() error { return e.Err }

// Is makes errors.Is(err, ErrFenced) true.
func (e *FenceError) Is(target error) bool { return target == ErrFenced }

// Frozen reports whether the range is frozen for a move: the shard still
// owns it and the refusal ends with the move's cut-over.
func (e *FenceError) Frozen() bool { return e.State == "frozen" }

// AsFenceError returns the *FenceError for a server error with the
// fence's SQLSTATE, parsing its DETAIL (key=value pairs: bucket, lo, hi,
// state, epoch, owner, shard); ok is false for any other error. A DETAIL
// it cannot parse leaves the fields it could not read zero (Lo and Hi -1)
// rather than failing: the refusal is what matters.
func AsFenceError(err error) (*FenceError, bool) {
	var fe *FenceError
	if errors.As(err, &fe) {
		return fe, true
	}
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != FenceSQLState {
		return nil, false
	}
	fe = &FenceError{Lo: -1, Hi: -1, Err: pe}
	detailPairs(pe.Detail, func(k, v string) {
		switch k {
		case "bucket":
			fe.Bucket = atoiOr(v, 0)
		case "lo":
			fe.Lo = atoiOr(v, -1)
		case "hi":
			fe.Hi = atoiOr(v, -1)
		case "state":
			fe.State = v
		case "epoch":
			if n, err := strconv.ParseUint(v, 10, 64); err == nil {
				fe.Epoch = n
			}
		case "owner":
			fe.Owner = v
		case "shard":
			fe.Shard = v
		}
	})
	return fe, true
}

// detailPairs calls pair with each key=value pair of a fence error's
// DETAIL (space-separated; a word without '=' is a key with no value).
func detailPairs(detail string, pair func(k, v string)) {
	for _, kv := range strings.Fields(detail) {
		k, v, _ := strings.Cut(kv, "=")
		pair(k, v)
	}
}

// ServedSQLState is the SQLSTATE of a shard refusing its part of a read of
// every shard because the buckets it serves to reads are not the ones the
// reader's map gives it (migration 0015's pgshard_fence_served_by): a
// range move flipping between the parts' snapshots, or a map behind the
// shards.
const ServedSQLState = "PS002"

// ServedMismatch is such a refusal, parsed from its DETAIL (key=value
// pairs: epoch, map_epoch, shard, served, expected).
type ServedMismatch struct {
	// Shard is the refusing shard's name.
	Shard string
	// Epoch is the epoch the shard's fence was set at; MapEpoch the
	// reader's map's. A fence newer than the map: reload the map; else
	// the shard's fence is still to flip.
	Epoch, MapEpoch uint64
}

// AsServedMismatch parses a server error with ServedSQLState; ok is false
// for any other error or a DETAIL without the fence's epoch.
func AsServedMismatch(pe *pgconn.PgError) (sm ServedMismatch, ok bool) {
	if pe == nil || pe.Code != ServedSQLState {
		return sm, false
	}
	detailPairs(pe.Detail, func(k, v string) {
		switch k {
		case "epoch":
			n, err := strconv.ParseUint(v, 10, 64)
			sm.Epoch, ok = n, err == nil
		case "map_epoch":
			sm.MapEpoch, _ = strconv.ParseUint(v, 10, 64)
		case "shard":
			sm.Shard = v
		}
	})
	return sm, ok
}

func atoiOr(s string, def int) int {
	if n, err := strconv.Atoi(s); err == nil {
		return n
	}
	return def
}

// fenced replaces a fence refusal in err by a *FenceError; the error's
// text stays the server's.
func fenced(err error) error {
	if err == nil {
		return nil
	}
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != FenceSQLState {
		return err
	}
	fe, _ := AsFenceError(pe)
	if err == error(pe) {
		return fe
	}
	// Keep the context the error carried: its text, with the typed
	// refusal to match.
	return &wrappedFence{fe: fe, text: err.Error(), orig: err}
}

// wrappedFence is an error whose chain holds a fence refusal, made
// errors.As-able as a *FenceError.
type wrappedFence struct {
	fe   *FenceError
	text string
	orig error
}

func (w *wrappedFence) Error() string   { return w.text }
func (w *wrappedFence) Unwrap() []error { return []error{w.fe, w.orig} }

// fenceAssertSQL is the fence's assert for a write: the first statement
// of a batch, so the statements after it take their snapshots after it
// took the range's lock (migration 0008).
const fenceAssertSQL = `SELECT pgshard_fence_assert($1::text)`

// fenceServes returns the scan filter's condition for the key column col:
// fs is pgshard_fence_served()'s row (servedScanSQL, served.go).
func fenceServes(col string) string {
	return fmt.Sprintf(`(fs.served IS NULL OR pgshard_fence_bucket(%s, fs.buckets) <@ fs.served)`, col)
}
