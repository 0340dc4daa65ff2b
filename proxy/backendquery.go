package proxy

import (
	"context"
	"time"

	"github.com/pgshard/pgshard/proxy/internal/pgwire"
)

// The proxy's own queries on a backend connection (identity and setting
// checks, the collation check, ROLLBACK of a moved transaction, the abort
// of a failed one), sent and read outside any client exchange.

// simpleResult is the outcome of one internal simple query.
type simpleResult struct {
	// errRaw is the ErrorResponse (a copy), nil on success.
	errRaw []byte
	tag    string
	rows   [][][]byte // text values (nil = NULL)
	// statuses are the ParameterStatus messages that preceded the query's
	// ReadyForQuery.
	statuses [][2]string
	status   byte
}

// runSimple sends queries as Query messages in one write and reads every
// result (the proxy's own queries: probes, ROLLBACK). An error means the
// connection failed; it is then marked broken.
func (c *bconn) runSimple(ctx context.Context, timeout time.Duration, queries ...string) ([]simpleResult, error) {
	deadline := time.Now().Add(timeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	_ = c.nc.SetDeadline(deadline)
	defer c.nc.SetDeadline(time.Time{})
	var buf []byte
	for _, q := range queries {
		buf = pgwire.AppendQuery(buf, q)
	}
	if err := c.write(buf); err != nil {
		return nil, err
	}
	out := make([]simpleResult, 0, len(queries))
	cur := simpleResult{}
	for len(out) < len(queries) {
		typ, msg, err := c.rd.Next()
		if err != nil {
			c.broken = true
			return out, err
		}
		switch typ {
		case 'E':
			cur.errRaw = append([]byte(nil), msg...)
			if pgwire.ErrorField(msg, 'S') == "FATAL" {
				c.broken = true
			}
		case 'C':
			cur.tag = string(pgwire.CommandTag(msg))
		case 'D':
			cols, _ := pgwire.DataRowCols(nil, msg)
			for k, c := range cols {
				if c != nil {
					cols[k] = append([]byte{}, c...)
				}
			}
			cur.rows = append(cur.rows, cols)
		case 'S':
			b := pgwire.Body(msg)
			n, i, err1 := pgwire.CString(b, 0)
			v, _, err2 := pgwire.CString(b, i)
			if err1 == nil && err2 == nil {
				cur.statuses = append(cur.statuses, [2]string{string(n), string(v)})
			}
		case 'Z':
			cur.status = pgwire.ReadyStatus(msg)
			out = append(out, cur)
			cur = simpleResult{}
		}
	}
	return out, nil
}
