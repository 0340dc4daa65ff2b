package catalog

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/jackc/pgx/v5"
)

// Lease is a process's registration in the catalog: it serves the map at
// Epoch until ExpiresAt, by the catalog server's clock. The catalog
// decides expiry with its own now(); a process must not compare
// ExpiresAt with its own clock, and uses ValidUntil instead.
type Lease struct {
	Owner string // unique per process, e.g. "proxy@host:5432"
	Kind  string // what the owner is (proxy, router, mover), informational
	// Token identifies this holding of the lease: it changes when the
	// lease is acquired again after it expired, so a holder that lost it
	// cannot renew or release its successor's lease.
	Token int64
	Epoch uint64        // the map epoch the owner serves
	TTL   time.Duration // how long each acquire or renew extends it
	// ExpiresAt is when the catalog server considers the lease lapsed
	// (its clock).
	ExpiresAt time.Time
	// ValidUntil is a local, conservative bound (monotonic clock): the
	// time the request that set ExpiresAt was sent, plus TTL. The server
	// computed ExpiresAt from a now() taken after that send, so the lease
	// is still live at the server until at least ValidUntil (clock rates
	// aside). A process must stop serving what the lease covers once
	// ValidUntil has passed without a renewal.
	ValidUntil time.Time
}

// Valid reports whether the lease may still be relied on at local time
// now (see ValidUntil).
func (l Lease) Valid(now time.Time) bool { return now.Before(l.ValidUntil) }

// LeaseInfo is a lease as Live lists it.
type LeaseInfo struct {
	Owner      string
	Kind       string
	Token      int64
	Epoch      uint64
	AcquiredAt time.Time // server clock
	RenewedAt  time.Time // server clock
	ExpiresAt  time.Time // server clock
	// Remaining is ExpiresAt minus the server's now() when listed.
	Remaining time.Duration
}

// ErrLeaseHeld is matched (errors.Is) by a *LeaseHeldError.
var ErrLeaseHeld = errors.New("lease held")

// LeaseHeldError means Acquire found the owner's lease live under another
// token: another process uses the same owner name, or this process
// acquired it before and lost track of it. It lapses at ExpiresAt.
type LeaseHeldError struct {
	Owner     string
	Token     int64
	Epoch     uint64
	ExpiresAt time.Time     // server clock
	Remaining time.Duration // by the server's clock
}

func (e *LeaseHeldError) Error() string {
	return fmt.Sprintf("lease %q is held (token %d, serving epoch %d) for another %v: another process uses this owner name, or wait until it lapses",
		e.Owner, e.Token, e.Epoch, e.Remaining.Round(time.Millisecond))
}

// Is makes errors.Is(err, ErrLeaseHeld) true.
func (e *LeaseHeldError) Is(target error) bool { return target == ErrLeaseHeld }

// ErrLeaseLost is matched (errors.Is) by a *LeaseLostError.
var ErrLeaseLost = errors.New("lease lost")

// LeaseLostError means a Renew or Release found the lease no longer held
// under its token: it expired (by the catalog's clock), was taken over by
// a new holder, or was released. A lapsed lease is never revived: the
// owner must stop serving and Acquire again.
type LeaseLostError struct {
	Owner  string
	Token  int64
	Reason string
}

func (e *LeaseLostError) Error() string {
	return fmt.Sprintf("lease %q (token %d) is lost: %s; stop serving and acquire it again", e.Owner, e.Token, e.Reason)
}

// Is makes errors.Is(err, ErrLeaseLost) true.
func (e *LeaseLostError) Is(target error) bool { return target == ErrLeaseLost }

func checkLeaseArgs(owner string, epoch uint64, ttl time.Duration) error {
	switch {
	case owner == "":
		return errors.New("lease: owner is empty")
	case ttl < time.Millisecond:
		return fmt.Errorf("lease %q: ttl %v is below 1ms", owner, ttl)
	case epoch > math.MaxInt64:
		return fmt.Errorf("lease %q: epoch %d does not fit the catalog's BIGINT", owner, epoch)
	}
	return nil
}

// Acquire registers owner as serving epoch for ttl, by the catalog
// server's clock (expires_at = now() + ttl on the server). It creates the
// lease, or takes it over when the owner's previous lease has expired
// (with a new Token); a live lease of the same owner makes it fail with a
// *LeaseHeldError. One statement.
func (c *Catalog) Acquire(ctx context.Context, owner, kind string, epoch uint64, ttl time.Duration) (Lease, error) {
	if err := checkLeaseArgs(owner, epoch, ttl); err != nil {
		return Lease{}, err
	}
	sent := time.Now()
	l := Lease{Owner: owner, Kind: kind, Epoch: epoch, TTL: ttl, ValidUntil: sent.Add(ttl)}
	err := c.pool.QueryRow(ctx, `INSERT INTO `+Schema+`.leases AS l (owner, kind, epoch, token, acquired_at, renewed_at, expires_at)
		VALUES ($1::text, $2::text, $3::bigint, nextval('`+Schema+`.lease_tokens'), now(), now(), now() + $4::bigint * interval '1 microsecond')
		ON CONFLICT (owner) DO UPDATE
		    SET kind = EXCLUDED.kind, epoch = EXCLUDED.epoch, token = EXCLUDED.token,
		        acquired_at = EXCLUDED.acquired_at, renewed_at = EXCLUDED.renewed_at, expires_at = EXCLUDED.expires_at
		    WHERE l.expires_at <= now()
		RETURNING token, expires_at`, owner, kind, int64(epoch), ttl.Microseconds()).Scan(&l.Token, &l.ExpiresAt)
	if errors.Is(err, pgx.ErrNoRows) {
		// The owner's lease is live: say whose and for how long.
		var h LeaseHeldError
		var e, remaining int64
		err = c.pool.QueryRow(ctx, `SELECT token, epoch, expires_at, (extract(epoch FROM expires_at - now()) * 1000000)::bigint
			FROM `+Schema+`.leases WHERE owner = $1::text`, owner).Scan(&h.Token, &e, &h.ExpiresAt, &remaining)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			err = fmt.Errorf("lease %q: released while acquiring it; try again", owner)
		case err == nil:
			h.Owner, h.Epoch, h.Remaining = owner, uint64(e), time.Duration(remaining)*time.Microsecond
			err = &h
		}
	}
	if err != nil {
		return Lease{}, c.wrap("acquire lease", err)
	}
	return l, nil
}

// Renew extends l by its TTL from the catalog server's now() and records
// epoch as the epoch its owner now serves. It succeeds only while the
// lease is live under l's token; otherwise it fails with a
// *LeaseLostError and changes nothing (a lapsed lease is never revived).
// It returns the renewed lease; l is not modified.
func (c *Catalog) Renew(ctx context.Context, l Lease, epoch uint64) (Lease, error) {
	if err := checkLeaseArgs(l.Owner, epoch, l.TTL); err != nil {
		return Lease{}, err
	}
	sent := time.Now()
	n := l
	n.Epoch, n.ValidUntil = epoch, sent.Add(l.TTL)
	err := c.pool.QueryRow(ctx, `UPDATE `+Schema+`.leases
		SET epoch = $3::bigint, renewed_at = now(), expires_at = now() + $4::bigint * interval '1 microsecond'
		WHERE owner = $1::text AND token = $2::bigint AND expires_at > now()
		RETURNING expires_at`, l.Owner, l.Token, int64(epoch), l.TTL.Microseconds()).Scan(&n.ExpiresAt)
	if errors.Is(err, pgx.ErrNoRows) {
		err = c.lost(ctx, l)
	}
	if err != nil {
		return Lease{}, c.wrap("renew lease", err)
	}
	return n, nil
}

// Release ends l now, so that its owner stops counting as live. It fails
// with a *LeaseLostError when l is no longer held under its token (taken
// over, or released already); releasing a lease that expired but was not
// taken over succeeds.
func (c *Catalog) Release(ctx context.Context, l Lease) error {
	tag, err := c.pool.Exec(ctx, `DELETE FROM `+Schema+`.leases WHERE owner = $1::text AND token = $2::bigint`, l.Owner, l.Token)
	if err == nil && tag.RowsAffected() == 0 {
		err = c.lost(ctx, l)
	}
	return c.wrap("release lease", err)
}

// lost explains why l is not held under its token.
func (c *Catalog) lost(ctx context.Context, l Lease) error {
	var token int64
	var expired bool
	var expiresAt time.Time
	err := c.pool.QueryRow(ctx, `SELECT token, expires_at <= now(), expires_at FROM `+Schema+`.leases WHERE owner = $1::text`, l.Owner).
		Scan(&token, &expired, &expiresAt)
	reason := ""
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		reason = "it was released"
	case err != nil:
		return err
	case token != l.Token:
		reason = fmt.Sprintf("it was acquired again after it expired (now token %d)", token)
	case expired:
		reason = fmt.Sprintf("it expired at %s by the catalog's clock", expiresAt.UTC().Format(time.RFC3339Nano))
	default:
		// Live under our token: the statement raced a renewal of our own.
		reason = "it changed while renewing (concurrent renewals of one lease)"
	}
	return &LeaseLostError{Owner: l.Owner, Token: l.Token, Reason: reason}
}

// Live lists the leases that are live by the catalog server's clock
// (expires_at > now()), by owner.
func (c *Catalog) Live(ctx context.Context) ([]LeaseInfo, error) {
	rows, err := c.pool.Query(ctx, `SELECT owner, kind, token, epoch, acquired_at, renewed_at, expires_at,
		    (extract(epoch FROM expires_at - now()) * 1000000)::bigint
		FROM `+Schema+`.leases WHERE expires_at > now() ORDER BY owner`)
	if err != nil {
		return nil, c.wrap("list leases", err)
	}
	var out []LeaseInfo
	var li LeaseInfo
	var epoch, remaining int64
	_, err = pgx.ForEachRow(rows, []any{&li.Owner, &li.Kind, &li.Token, &epoch, &li.AcquiredAt, &li.RenewedAt, &li.ExpiresAt, &remaining}, func() error {
		li.Epoch, li.Remaining = uint64(epoch), time.Duration(remaining)*time.Microsecond
		out = append(out, li)
		return nil
	})
	if err != nil {
		return nil, c.wrap("list leases", err)
	}
	return out, nil
}
