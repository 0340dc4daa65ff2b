package chaos

import (
	"errors"
	"fmt"
	"net"
	"net/url"

	"github.com/pgshard/pgshard/shardmap"
)

// RelayMap starts one relay per shard of m in front of the endpoint a
// workload uses for that shard — its PgBouncer when pooler is true (every
// shard must then have a pooler DSN), else its Postgres — and returns a
// copy of m whose DSNs (pooler DSNs when pooler) lead through the relays,
// with the relays by shard index (Env.Relays). The other DSN of each shard
// stays as it was. DSNs must be URLs (postgres://...) naming one host. On
// an error no relay is left running. Close the relays with CloseRelays.
func RelayMap(m *shardmap.Map, pooler bool, opts RelayOptions) (*shardmap.Map, []*Relay, error) {
	out := m.Clone()
	relays := make([]*Relay, len(out.Shards))
	for i := range out.Shards {
		sh := &out.Shards[i]
		dsn := &sh.DSN
		if pooler {
			dsn = &sh.PoolerDSN
		}
		if *dsn == "" {
			CloseRelays(relays)
			return nil, nil, fmt.Errorf("relay map: shard %s has no pooler DSN", sh.Name)
		}
		u, err := url.Parse(*dsn)
		if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") || u.Host == "" {
			CloseRelays(relays)
			return nil, nil, fmt.Errorf("relay map: shard %s: the DSN is not a postgres:// URL with a host", sh.Name)
		}
		host := u.Host
		if _, _, err := net.SplitHostPort(host); err != nil {
			host = net.JoinHostPort(host, "5432")
		}
		o := opts
		o.Name = sh.Name
		r, err := NewRelay(host, o)
		if err != nil {
			CloseRelays(relays)
			return nil, nil, err
		}
		relays[i] = r
		u.Host = r.Addr()
		*dsn = u.String()
	}
	if err := out.Validate(); err != nil {
		CloseRelays(relays)
		return nil, nil, fmt.Errorf("relay map: %w", err)
	}
	return out, relays, nil
}

// CloseRelays closes every non-nil relay and joins their errors.
func CloseRelays(relays []*Relay) error {
	var errs []error
	for _, r := range relays {
		if r != nil {
			errs = append(errs, r.Close())
		}
	}
	return errors.Join(errs...)
}
