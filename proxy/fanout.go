package proxy

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/pgshard/pgshard/proxy/route"
)

// Fan-out: a statement the analyzer sends to every shard (DestAll) — DDL,
// or a key-less read merged per route.Merge — runs outside a transaction
// only, on every shard at once (one write per shard, then the results are
// read shard by shard, or merged row by row: no goroutines, no buffering
// beyond one row per shard).

// fanPlan is a fan-out statement of a pipeline or simple query.
type fanPlan struct {
	simple bool
	st     *route.Statement
	dest   route.Dest
	// query is the raw Query message (simple protocol).
	query string
	// Extended protocol: the statement, the client's Bind (copied), and
	// whether the client asked for a portal Describe.
	vs       *vstmt
	bind     []byte
	portal   string
	describe bool
	executed bool
}

// startFan records a DestAll Bind; the rest of the pipeline must be its
// Describe, Execute and Sync.
func (p *planner) startFan(a *route.Statement, d route.Dest, vs *vstmt, idx int) {
	s := p.s
	p.fan = &fanPlan{st: a, dest: d, vs: vs, bind: append([]byte(nil), s.grp[idx].raw...), portal: string(s.bv.portal)}
}

// fanAccepts reports whether m may follow a fan-out Bind.
func (p *planner) fanAccepts(m cmsg) bool {
	f := p.fan
	switch m.typ {
	case 'D':
		kind, name, err := decodeTarget(m.raw)
		if err != nil || kind != 'P' || string(name) != f.portal || f.executed {
			return false
		}
		f.describe = true
		return true
	case 'E':
		portal, maxRows, err := decodeExecute(m.raw)
		if err != nil || string(portal) != f.portal || maxRows != 0 || f.executed {
			return false
		}
		f.executed = true
		return true
	case 'S':
		return f.executed
	}
	return false
}

// fanStream reads one shard's answer to a fan-out.
type fanStream struct {
	shard   int
	bc      *bconn
	rowDesc []byte // copy of the RowDescription
	row     []byte // current DataRow, valid until the next read
	tag     []byte // CommandComplete tag (copy)
	errRaw  []byte // the shard's error (copy)
	notices [][]byte
	// rfqLeft is how many ReadyForQuery messages are still to come.
	rfqLeft  int
	rowsDone bool
	lost     error
	// skipReplies counts leading queries whose answers are the proxy's own
	// (the preamble's BEGIN).
	skipReplies int
}

// nextRow advances to the shard's next DataRow; false at the end of rows.
func (f *fanStream) nextRow() bool {
	if f.rowsDone {
		return false
	}
	for {
		typ, msg, err := f.bc.rd.next()
		if err != nil {
			f.lost = err
			f.bc.broken = true
			f.rowsDone = true
			f.rfqLeft = 0
			return false
		}
		switch typ {
		case 'Z':
			f.rfqLeft--
			if f.skipReplies > 0 {
				f.skipReplies--
				continue
			}
			f.rowsDone = true
			return false
		case 'D':
			if f.skipReplies > 0 {
				continue
			}
			f.row = msg
			return true
		case 'T':
			if f.skipReplies == 0 {
				f.rowDesc = append([]byte(nil), msg...)
			}
		case 'C':
			if f.skipReplies == 0 {
				f.tag = append([]byte(nil), commandTag(msg)...)
				f.rowsDone = true
				return false
			}
		case 'I':
			if f.skipReplies == 0 {
				f.rowsDone = true
				return false
			}
		case 'E':
			if f.errRaw == nil {
				f.errRaw = append([]byte(nil), msg...)
			}
			if errorField(msg, 'S') == "FATAL" {
				f.bc.broken = true
			}
			if f.skipReplies == 0 {
				f.rowsDone = true
				return false
			}
		case 'N':
			if f.skipReplies == 0 {
				f.notices = append(f.notices, append([]byte(nil), msg...))
			}
		case 'G', 'H', 'W':
			// COPY cannot fan out; the analyzer should refuse it.
			f.errRaw = appendError(nil, newError(codeFeatureNotSupported, "COPY cannot run on every shard through pgshard"))
			f.bc.broken = true
			f.rowsDone = true
			f.rfqLeft = 0
			return false
		}
	}
}

// drain reads the rest of the shard's answer up to its last ReadyForQuery.
func (f *fanStream) drain() {
	for f.rfqLeft > 0 && f.lost == nil {
		typ, msg, err := f.bc.rd.next()
		if err != nil {
			f.lost = err
			f.bc.broken = true
			return
		}
		switch typ {
		case 'Z':
			f.rfqLeft--
		case 'C':
			if f.tag == nil && f.skipReplies == 0 {
				f.tag = append([]byte(nil), commandTag(msg)...)
			}
		case 'E':
			if f.errRaw == nil {
				f.errRaw = append([]byte(nil), msg...)
			}
			if errorField(msg, 'S') == "FATAL" {
				f.bc.broken = true
			}
		}
	}
}

// runFanout executes p.fan on every shard and answers the client.
func (s *session) runFanout(p *planner) error {
	f := p.fan
	srv := s.srv
	srv.metrics.fanouts.Inc()
	// Answers planned before the fan-out statement (ParseComplete, ...).
	for i := range s.items {
		it := &s.items[i]
		s.out = append(s.out, s.lbuf[it.lo:it.hi]...)
		s.apply(it.eff)
	}
	merge := f.dest.Merge
	streams := make([]*fanStream, len(srv.pools))
	defer func() {
		for _, st := range streams {
			if st == nil {
				continue
			}
			st.drain()
			if st.lost != nil || st.bc.broken {
				st.bc.pool.discard(st.bc)
			} else {
				st.bc.pool.release(st.bc)
			}
		}
	}()
	// Connect to every shard, in shard order (two fan-outs never wait for
	// each other's connections in a cycle).
	for i, pool := range srv.pools {
		key, pre := s.cur.split(pool.viaPooler)
		bc, err := pool.acquire(p.ctx, key)
		if err != nil {
			e := asError(err, newError(codeCannotConnect, err.Error()))
			if be, ok := err.(*backendPgError); ok {
				e = pgErrorToError(be.pe, "ERROR")
			}
			e2 := *e
			e2.Message = fmt.Sprintf("cannot run the statement on every shard: %s", e.Message)
			return s.fanFail(&e2, f)
		}
		st := &fanStream{shard: i, bc: bc}
		streams[i] = st
		var buf []byte
		wrap := len(pre.kv) > 0 && !f.st.NoTxnBlock
		if wrap {
			buf = appendQuery(buf, "BEGIN;\n"+pre.preambleSQL())
			st.rfqLeft++
			st.skipReplies = 1
		}
		sql := f.st.SQL
		if merge != nil && merge.SQL != "" {
			sql = merge.SQL
		}
		if f.simple {
			if merge != nil && merge.SQL != "" {
				buf = appendQuery(buf, merge.SQL)
			} else {
				buf = append(buf, f.query...)
			}
		} else {
			var bv bindView
			if err := bv.decode(f.bind); err != nil {
				return err
			}
			buf = appendParseMsg(buf, "", sql, f.vs.oids)
			buf = appendBindAs(buf, f.bind, &bv, "")
			buf = appendDescribe(buf, 'P', string(bv.portal))
			buf = appendExecute(buf, string(bv.portal), 0)
			buf = appendEmpty(buf, 'S')
		}
		st.rfqLeft++
		if wrap {
			buf = appendQuery(buf, "COMMIT")
			st.rfqLeft++
		}
		if err := bc.write(buf); err != nil {
			st.lost = err
			st.rfqLeft = 0
		}
	}
	if !f.simple {
		s.out = appendEmpty(s.out, '2') // BindComplete
	}
	if merge == nil {
		return s.fanCollect(streams, f)
	}
	return s.fanMerge(streams, f, merge)
}

// fanFail answers the client with an error after a failed fan-out start.
func (s *session) fanFail(e *Error, f *fanPlan) error {
	s.srv.metrics.refusals.WithLabelValues("shard_unavailable").Inc()
	s.out = appendError(s.out, e)
	s.out = appendRFQ(s.out, 'I')
	return nil
}

// fanResultError picks the error to report: the first shard's error in
// map order, with the shard named in its Detail and where the statement
// did succeed (DDL is not atomic across shards).
func (s *session) fanResultError(streams []*fanStream) []byte {
	var failed, ok []string
	var first []byte
	firstShard := ""
	for _, st := range streams {
		name := s.srv.shardName(st.shard)
		switch {
		case st.lost != nil:
			failed = append(failed, name)
			if first == nil {
				first = appendError(nil, &Error{Code: codeConnectionFailure, Message: fmt.Sprintf("lost the connection to shard %q: %s", name, shortErr(st.lost))})
				firstShard = name
			}
		case st.errRaw != nil:
			failed = append(failed, name)
			if first == nil {
				first, firstShard = st.errRaw, name
			}
		default:
			ok = append(ok, name)
		}
	}
	if first == nil {
		return nil
	}
	e := decodeErrorResponse(first)
	d := fmt.Sprintf("pgshard ran the statement on every shard: it failed on %s", strings.Join(failed, ", "))
	if len(ok) > 0 {
		d += fmt.Sprintf(" and succeeded on %s", strings.Join(ok, ", "))
	}
	d += fmt.Sprintf("; this error is shard %q's.", firstShard)
	if e.Detail != "" {
		e.Detail += "\n" + d
	} else {
		e.Detail = d
	}
	return appendErrorResponse(nil, e)
}

// fanCollect answers a fan-out without a merge plan (DDL, or writes the
// analyzer sends everywhere): every shard's answer is read; on success the
// first shard's answer stands for all, with row counts summed.
func (s *session) fanCollect(streams []*fanStream, f *fanPlan) error {
	var total int64
	var tag []byte
	countable := true
	for _, st := range streams {
		if st.lost == nil {
			more := st.nextRow()
			if st.shard == 0 {
				switch {
				case f.simple && st.rowDesc != nil:
					s.out = append(s.out, st.rowDesc...)
				case !f.simple && f.describe && st.rowDesc != nil:
					s.out = append(s.out, st.rowDesc...)
				case !f.simple && f.describe:
					s.out = appendEmpty(s.out, 'n')
				}
			}
			for ; more; more = st.nextRow() {
				s.out = append(s.out, st.row...) // RETURNING rows: concatenated
			}
			st.drain()
		}
		if st.tag != nil {
			if tag == nil {
				tag = st.tag
			}
			if n, ok := tagCount(st.tag); ok {
				total += n
			} else {
				countable = false
			}
		}
	}
	if e := s.fanResultError(streams); e != nil {
		s.out = append(s.out, e...)
		s.out = appendRFQ(s.out, 'I')
		return nil
	}
	if len(streams) > 0 {
		for _, n := range streams[0].notices {
			s.out = append(s.out, n...)
		}
	}
	if tag != nil {
		if countable {
			tag = replaceTagCount(tag, total)
		}
		s.out = appendCommandComplete(s.out, string(tag))
	} else {
		s.out = appendEmpty(s.out, 'I')
	}
	s.out = appendRFQ(s.out, 'I')
	return nil
}

// tagCount returns the row count at the end of a command tag.
func tagCount(tag []byte) (int64, bool) {
	i := strings.LastIndexByte(string(tag), ' ')
	if i < 0 {
		return 0, false
	}
	n, err := strconv.ParseInt(string(tag[i+1:]), 10, 64)
	return n, err == nil
}

func replaceTagCount(tag []byte, n int64) []byte {
	i := strings.LastIndexByte(string(tag), ' ')
	if i < 0 {
		return tag
	}
	return append(append([]byte(nil), tag[:i+1]...), strconv.FormatInt(n, 10)...)
}

// fanMerge answers a merged fan-out read.
func (s *session) fanMerge(streams []*fanStream, f *fanPlan, m *route.Merge) error {
	// Prime every stream: its first row (and its RowDescription).
	live := make([]bool, len(streams))
	for i, st := range streams {
		if st.lost == nil {
			live[i] = st.nextRow()
		}
	}
	if e := s.fanErrorsSoFar(streams); e != nil {
		s.out = append(s.out, e...)
		s.out = appendRFQ(s.out, 'I')
		return nil
	}
	rd := streams[0].rowDesc
	cols, err := parseRowDesc(rd)
	if err != nil {
		return err
	}
	if f.simple {
		if rd != nil {
			s.out = append(s.out, rd...)
		}
	} else if f.describe {
		if rd != nil {
			s.out = append(s.out, rd...)
		} else {
			s.out = appendEmpty(s.out, 'n')
		}
	}
	var emitted int64
	var mergeErr *Error
	switch {
	case len(m.Aggregates) > 0:
		var rows [][][]byte
		for i, st := range streams {
			if live[i] {
				rows = append(rows, splitDataRow(st.row))
				for st.nextRow() {
					// an aggregate returns one row per shard; more is a bug
					mergeErr = newError(codeInternalError, "pgshard expected one row per shard for a merged aggregate")
				}
			}
		}
		if mergeErr == nil && len(rows) > 0 {
			row, e := combineAggregates(rows, m.Aggregates, cols)
			if e != nil {
				mergeErr = e
			} else if m.Offset <= 0 && m.Limit != 0 {
				s.out = appendDataRow(s.out, row)
				emitted = 1
			}
		}
	default:
		skip := m.Offset
		limit := m.Limit
		for limit != 0 {
			// pick the next row: concatenation takes shards in order.
			best := -1
			for i := range streams {
				if !live[i] {
					continue
				}
				if best < 0 {
					best = i
					if len(m.OrderBy) == 0 {
						break
					}
					continue
				}
				c, e := compareRows(streams[i].row, streams[best].row, m.OrderBy, cols)
				if e != nil {
					mergeErr = e
					break
				}
				if c < 0 {
					best = i
				}
			}
			if mergeErr != nil || best < 0 {
				break
			}
			if skip > 0 {
				skip--
			} else {
				s.out = append(s.out, streams[best].row...)
				emitted++
				if limit > 0 {
					limit--
				}
				if len(s.out) > 64*1024 {
					if err := s.flush(); err != nil {
						return err
					}
				}
			}
			live[best] = streams[best].nextRow()
		}
	}
	for _, st := range streams {
		st.drain()
	}
	if e := s.fanResultError(streams); e != nil {
		s.out = append(s.out, e...)
		s.out = appendRFQ(s.out, 'I')
		return nil
	}
	if mergeErr != nil {
		s.out = appendError(s.out, mergeErr)
		s.out = appendRFQ(s.out, 'I')
		return nil
	}
	for _, n := range streams[0].notices {
		s.out = append(s.out, n...)
	}
	s.out = appendCommandComplete(s.out, "SELECT "+strconv.FormatInt(emitted, 10))
	s.out = appendRFQ(s.out, 'I')
	return nil
}

// fanErrorsSoFar reports an error once any shard failed before its rows.
func (s *session) fanErrorsSoFar(streams []*fanStream) []byte {
	for _, st := range streams {
		if st.errRaw != nil || st.lost != nil {
			for _, x := range streams {
				x.drain()
			}
			return s.fanResultError(streams)
		}
	}
	return nil
}
