package engine

import (
	"bytes"
	"fmt"
	"strconv"

	"github.com/pgshard/pgshard/proxy/internal/pgwire"
	"github.com/pgshard/pgshard/proxy/route"
)

// COPY ... TO STDOUT of every shard (route.CopyOut): each shard runs the
// client's statement; the client gets one COPY — the first shard's
// CopyOutResponse, every shard's CopyData in shard order, one CopyDone
// and "COPY n" with the shards' counts summed — as if one database held
// every row. A header line (HEADER) is kept from the first shard only; in
// binary format the first shard's file header opens the output and one
// trailer ends it. Rows are streamed: the client's buffer is written
// whenever it holds copyFlushAt bytes, and a shard not being read waits
// in its socket's buffers.
//
// A shard's error before any output reached the client is the answer, as
// for any fan-out (fanResultError). After the client has the
// CopyOutResponse it ends the COPY the way Postgres ends a failed one: an
// ErrorResponse after the rows sent so far, no CopyDone.

// fanRead reports whether a is a read a fan-out answers: a SELECT, or a
// COPY ... TO (of every shard, its Dest carries a route.CopyOut; a COPY
// FROM never routes as a read).
func fanRead(a *route.Statement) bool { return a.Select || a.Copy }

// copyFlushAt is how much COPY output the client's buffer gathers before
// it is written.
const copyFlushAt = 64 << 10

// copyJoin is one COPY of every shard being answered.
type copyJoin struct {
	x      *fanExec
	co     *route.CopyOut
	bindAt int // the BindComplete's offset in the client's buffer, -1 if none
	// resp is the CopyOutResponse the client got (nil: none yet).
	resp   []byte
	binary bool
	total  int64
	// stop: a shard failed or disagreed; the rest is read, not sent.
	stop bool
}

// fanCopy answers a COPY ... TO STDOUT of every shard (of one, f.only, in
// its reader). It returns an error only when the client connection failed.
func (x *fanExec) fanCopy(bindAt int) error {
	co := &route.CopyOut{} // a keyed COPY in its shard's reader
	if m := x.f.dest.Merge; m != nil && m.CopyOut != nil {
		co = m.CopyOut
	}
	j := &copyJoin{x: x, co: co, bindAt: bindAt}
	for i, st := range x.streams {
		if err := j.stream(st, i == 0); err != nil {
			for _, st := range x.streams {
				st.loseConn(err) // the client is gone: discard, do not drain
			}
			return err
		}
	}
	j.finish()
	return nil
}

// stream reads one shard's answer up to its statement's ReadyForQuery.
func (j *copyJoin) stream(st *fanStream, first bool) error {
	firstData := true
	for !st.rowsDone && st.lost == nil {
		typ, msg, ok := st.recv()
		if !ok {
			j.stop = true
			return nil
		}
		switch typ {
		case 'n':
			if first && !j.stop && !j.x.f.simple && j.x.f.describe {
				j.x.cc.out = pgwire.AppendEmpty(j.x.cc.out, 'n') // the portal's NoData
			}
		case 'H':
			j.begin(st, msg)
		case 'd':
			if j.stop {
				continue
			}
			if err := j.data(st, msg, first, firstData); err != nil {
				return err
			}
			firstData = false
		default:
			st.take(typ, msg)
		}
		j.stop = j.stop || st.errRaw != nil
	}
	if n, ok := tagCount(st.tag); ok {
		j.total += n
	}
	return nil
}

// begin takes a shard's CopyOutResponse: the first goes to the client;
// every other shard's must be the same (column count and formats).
func (j *copyJoin) begin(st *fanStream, msg []byte) {
	switch {
	case j.stop:
	case j.resp == nil:
		j.resp = append([]byte(nil), msg...)
		j.binary = len(msg) > 5 && msg[5] == 1
		j.x.cc.out = append(j.x.cc.out, msg...)
	case !bytes.Equal(msg, j.resp):
		st.errRaw = pgwire.AppendError(nil, &pgwire.Error{Code: pgwire.CodeDatatypeMismatch,
			Message: fmt.Sprintf("shard %q answered the COPY with other columns or formats than shard %q", st.name, j.x.streams[0].name),
			Detail:  "The table's definition differs between shards; the output so far is incomplete.",
			Hint:    "Give the table the same definition on every shard, or COPY each shard's rows with /* pgshard:shard=NAME */."})
		j.stop = true
	}
}

// data passes one CopyData of a shard on to the client: a header line or
// binary file header only from the first shard, a binary trailer never
// (finish writes one).
func (j *copyJoin) data(st *fanStream, msg []byte, first, firstData bool) error {
	body := msg[5:]
	whole := true
	if j.binary && firstData {
		n, ok := pgwire.CopyBinaryHeaderLen(body)
		if !ok {
			st.errRaw = pgwire.AppendError(nil, pgwire.NewError(pgwire.CodeProtocolViolation,
				fmt.Sprintf("shard %q began a binary COPY without the file header", st.name)))
			j.stop = true
			return nil
		}
		if pgwire.IsCopyBinaryTrailer(body[n:]) { // a shard without rows
			body, whole = body[:n], false
		}
		if !first {
			body, whole = body[n:], false
		}
	} else if firstData && !first && j.co.Header && !j.binary {
		return nil // the header line of a shard after the first
	}
	if j.binary && !firstData && pgwire.IsCopyBinaryTrailer(body) {
		return nil
	}
	switch {
	case whole:
		j.x.cc.out = append(j.x.cc.out, msg...)
	case len(body) > 0:
		j.x.cc.out = pgwire.AppendCopyData(j.x.cc.out, body)
	}
	if len(j.x.cc.out) < copyFlushAt {
		return nil
	}
	return j.x.cc.flush()
}

// finish ends the client's COPY: CopyDone and the summed count, or the
// error of the shard that failed.
func (j *copyJoin) finish() {
	x := j.x
	if e := x.gen.fanResultError(x.streams); e != nil {
		// Nothing was flushed before the CopyOutResponse: bindAt holds.
		if first := firstFailed(x.streams); j.resp == nil && first != nil && x.failedAtBind(first, j.bindAt) {
			x.cc.out = x.cc.out[:j.bindAt]
		}
		x.cc.out = append(x.cc.out, e...)
		return
	}
	if j.binary {
		x.cc.out = pgwire.AppendCopyData(x.cc.out, []byte{0xff, 0xff})
	}
	x.cc.out = pgwire.AppendEmpty(x.cc.out, 'c')
	for _, n := range x.streams[0].notices {
		x.cc.out = append(x.cc.out, n...)
	}
	x.cc.out = pgwire.AppendCommandComplete(x.cc.out, "COPY "+strconv.FormatInt(j.total, 10))
}
