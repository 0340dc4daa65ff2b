package admin

import (
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5/pgtype"
)

// SHOW CLIENTS and SHOW SERVERS: PgBouncer's columns, plus the shard and,
// for a client pinned to a backend of its own, why (remote_pid is then
// that backend's PID, as PgBouncer's for a linked client).

var connCols = []column{
	{"type", pgtype.TextOID}, {"user", pgtype.TextOID}, {"database", pgtype.TextOID}, {"state", pgtype.TextOID}, {"addr", pgtype.TextOID},
	{"port", pgtype.Int4OID}, {"local_addr", pgtype.TextOID}, {"local_port", pgtype.Int4OID}, {"connect_time", pgtype.TextOID},
	{"request_time", pgtype.TextOID}, {"wait", pgtype.Int4OID}, {"wait_us", pgtype.Int4OID}, {"close_needed", pgtype.Int4OID},
	{"ptr", pgtype.TextOID}, {"link", pgtype.TextOID}, {"remote_pid", pgtype.Int8OID}, {"tls", pgtype.TextOID},
	{"application_name", pgtype.TextOID}, {"shard", pgtype.TextOID}, {"pinned", pgtype.TextOID},
}

func showClients(h Host) *result {
	r := &result{cols: connCols}
	clients := h.Clients()
	slices.SortFunc(clients, func(a, b Client) int { return a.Connected.Compare(b.Connected) })
	for _, c := range clients {
		state, shard, link := "idle", "", ""
		if c.Shard != "" {
			state, shard, link = "active", c.Shard, fmt.Sprintf("%s/%d", c.Shard, c.BackendPID)
		}
		if c.Admin {
			state, shard = "active", ""
		}
		addr, port := hostPort(c.Remote)
		laddr, lport := hostPort(c.Local)
		tls := ""
		if c.TLS {
			tls = "TLS"
		}
		r.rows = append(r.rows, []any{"C", c.User, c.Database, state, addr, port, laddr, lport, c.Connected, c.Request, 0, 0, 0,
			fmt.Sprintf("%08x", c.PID), link, c.RemotePID, tls, c.App, nullIfEmpty(shard), nullIfEmpty(c.Pinned)})
	}
	return r
}

func showServers(h Host) *result {
	r := &result{cols: connCols}
	for _, s := range h.Servers() {
		state := "active"
		if s.Idle {
			state = "idle"
		}
		addr, port := hostPort(s.Remote)
		laddr, lport := hostPort(s.Local)
		tls := ""
		if s.TLS {
			tls = "TLS"
		}
		r.rows = append(r.rows, []any{"S", s.User, s.Database, state, addr, port, laddr, lport,
			s.Opened, s.Request, 0, 0, s.CloseNeeded, fmt.Sprintf("%s/%d", s.Shard, s.PID), "",
			s.PID, tls, "", s.Shard, nil})
	}
	return r
}
