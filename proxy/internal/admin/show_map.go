package admin

import "github.com/jackc/pgx/v5/pgtype"

// SHOW MAP, SHOW ROUTES and SHOW LISTS: the shard map, the recent routing
// decisions, and the counts of shards, users, clients and servers.

func showMap(h Host) *result {
	m := h.Map()
	r := &result{cols: []column{{"epoch", pgtype.Int8OID}, {"bucket_count", pgtype.Int4OID}, {"lo", pgtype.Int4OID},
		{"hi", pgtype.Int4OID}, {"buckets", pgtype.Int4OID}, {"shard", pgtype.TextOID}, {"ordinal", pgtype.Int4OID}}}
	for _, rg := range m.Ranges {
		r.rows = append(r.rows, []any{m.Epoch, m.Buckets, rg.Lo, rg.Hi, rg.Hi - rg.Lo + 1, rg.Shard, rg.Ordinal})
	}
	return r
}

func showRoutes(h Host) *result {
	r := &result{cols: textCols("time", "kind", "shard", "statement", "reason")}
	for _, e := range h.Routes() {
		r.rows = append(r.rows, []any{e.At.UTC().Format("2006-01-02 15:04:05.000 UTC"), e.Kind, nullIfEmpty(e.Shard), e.SQL, e.Reason})
	}
	return r
}

func showLists(h Host) *result {
	l := h.Lists()
	r := &result{cols: []column{{"list", pgtype.TextOID}, {"items", pgtype.Int4OID}}}
	for _, kv := range []struct {
		k string
		v int
	}{{"databases", l.Shards}, {"users", l.Users}, {"pools", l.Shards},
		{"free_clients", max(l.MaxClients-l.UsedClients, 0)}, {"used_clients", l.UsedClients}, {"login_clients", 0},
		{"pinned_clients", l.Pinned},
		{"free_servers", max(l.PoolSize*l.Shards-l.OpenConnections, 0)}, {"used_servers", l.OpenConnections},
		{"dns_names", 0}, {"dns_zones", 0}, {"dns_queries", 0}, {"dns_pending", 0}} {
		r.rows = append(r.rows, []any{kv.k, kv.v})
	}
	return r
}
