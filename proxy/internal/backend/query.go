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

// setDeadline bounds the proxy's own exchange on c by timeout and ctx's
// deadline, whichever comes first.
func (c *Conn) setDeadline(ctx context.Context, timeout time.Duration) {
	deadline := time.Now().Add(timeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	_ = c.NetConn.SetDeadline(deadline)
}

// RunSimple sends queries as Query messages in one write and reads every
// result (the proxy's own queries: probes, ROLLBACK). An error means the
// connection failed; it is then marked broken.
func (c *Conn) RunSimple(ctx context.Context, timeout time.Duration, queries ...string) ([]SimpleResult, error) {
	c.setDeadline(ctx, timeout)
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

// Described is what DescribeStmt read: the server's answer to a Describe
// of a statement, or its error.
type Described struct {
	// Msgs are the ParameterDescription and RowDescription (or NoData)
	// messages, as the server sent them.
	Msgs []byte
	// ErrRaw is the server's first ErrorResponse (a copy), nil on
	// success; Parsed says whether its Parse had succeeded before it.
	ErrRaw []byte
	Parsed bool
}

// DescribeStmt parses sql (parameter types oids) as the unnamed statement
// and describes it, in a transaction of its own that changes nothing:
// begin, when not empty, is a query string run first (BEGIN and the
// session's settings, which name resolution may depend on), and a
// ROLLBACK ends it. An error means the connection failed; it is then
// marked broken.
func (c *Conn) DescribeStmt(ctx context.Context, timeout time.Duration, begin, sql string, oids []uint32) (Described, error) {
	c.setDeadline(ctx, timeout)
	defer c.NetConn.SetDeadline(time.Time{})
	var buf []byte
	ready := 1
	if begin != "" {
		buf = pgwire.AppendQuery(buf, begin)
		ready++
	}
	buf = pgwire.AppendParseMsg(buf, "", sql, oids)
	buf = pgwire.AppendDescribe(buf, 'S', "")
	buf = pgwire.AppendEmpty(buf, 'S')
	if begin != "" {
		buf = pgwire.AppendQuery(buf, "ROLLBACK")
		ready++
	}
	if err := c.Write(buf); err != nil {
		return Described{}, err
	}
	var d Described
	for ready > 0 {
		typ, msg, err := c.Reader.Next()
		if err != nil {
			c.Broken = true
			return d, err
		}
		switch typ {
		case '1':
			d.Parsed = true
		case 't', 'T', 'n':
			if d.Parsed { // not the rows of begin's settings
				d.Msgs = append(d.Msgs, msg...)
			}
		case 'E':
			if d.ErrRaw == nil {
				d.ErrRaw = append([]byte(nil), msg...)
			}
			if pgwire.ErrorField(msg, 'S') == "FATAL" {
				c.Broken = true
			}
		case 'Z':
			ready--
		}
	}
	return d, nil
}

// NamedStmt is a statement to prepare under a name of the session's own
// (ParseNamed).
type NamedStmt struct {
	Name string
	SQL  string
	Oids []uint32
}

// ParseNamed prepares stmts on c under their names (Parse messages and one
// Sync), as a client's Parse would: it returns the server's first
// ErrorResponse (a copy; nil when every one was prepared) and the status
// of the ReadyForQuery that ended it. Inside a transaction block a failed
// Parse fails the transaction, as the client's own statement would have.
// An error means the connection failed; it is then marked broken.
func (c *Conn) ParseNamed(ctx context.Context, timeout time.Duration, stmts []NamedStmt) (errRaw []byte, status byte, err error) {
	c.setDeadline(ctx, timeout)
	defer c.NetConn.SetDeadline(time.Time{})
	var buf []byte
	for _, st := range stmts {
		buf = pgwire.AppendParseMsg(buf, st.Name, st.SQL, st.Oids)
	}
	buf = pgwire.AppendEmpty(buf, 'S')
	if err := c.Write(buf); err != nil {
		return nil, 0, err
	}
	for {
		typ, msg, err := c.Reader.Next()
		if err != nil {
			c.Broken = true
			return errRaw, 0, err
		}
		switch typ {
		case 'E':
			if errRaw == nil {
				errRaw = append([]byte(nil), msg...)
			}
			if pgwire.ErrorField(msg, 'S') == "FATAL" {
				c.Broken = true
			}
		case 'Z':
			return errRaw, pgwire.ReadyStatus(msg), nil
		}
	}
}
