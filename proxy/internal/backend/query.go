package backend

import (
	"context"
	"time"

	"github.com/pgshard/pgshard/proxy/internal/pgwire"
)

// The proxy's own queries on a backend connection (identity and setting
// checks, the collation check, ROLLBACK of a moved transaction, the abort
// of a failed one), sent and read outside any client exchange.

// SimpleResult is the outcome of one internal simple query.
type SimpleResult struct {
	// errRaw is the ErrorResponse (a copy), nil on success.
	ErrRaw []byte
	tag    string
	Rows   [][][]byte // text values (nil = NULL)
	// statuses are the ParameterStatus messages that preceded the query's
	// ReadyForQuery.
	Statuses [][2]string
	Status   byte
}

// RunSimple sends queries as Query messages in one write and reads every
// result (the proxy's own queries: probes, ROLLBACK). An error means the
// connection failed; it is then marked broken.
func (c *Conn) RunSimple(ctx context.Context, timeout time.Duration, queries ...string) ([]SimpleResult, error) {
	deadline := time.Now().Add(timeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	_ = c.NetConn.SetDeadline(deadline)
	defer c.NetConn.SetDeadline(time.Time{})
	var buf []byte
	for _, q := range queries {
		buf = pgwire.AppendQuery(buf, q)
	}
	if err := c.Write(buf); err != nil {
		return nil, err
	}
	out := make([]SimpleResult, 0, len(queries))
	cur := SimpleResult{}
	for len(out) < len(queries) {
		typ, msg, err := c.Reader.Next()
		if err != nil {
			c.Broken = true
			return out, err
		}
		switch typ {
		case 'E':
			cur.ErrRaw = append([]byte(nil), msg...)
			if pgwire.ErrorField(msg, 'S') == "FATAL" {
				c.Broken = true
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
			cur.Rows = append(cur.Rows, cols)
		case 'S':
			b := pgwire.Body(msg)
			n, i, err1 := pgwire.CString(b, 0)
			v, _, err2 := pgwire.CString(b, i)
			if err1 == nil && err2 == nil {
				cur.Statuses = append(cur.Statuses, [2]string{string(n), string(v)})
			}
		case 'Z':
			cur.Status = pgwire.ReadyStatus(msg)
			out = append(out, cur)
			cur = SimpleResult{}
		}
	}
	return out, nil
}
