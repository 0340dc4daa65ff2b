package engine

import (
	"errors"

	"github.com/pgshard/pgshard/proxy/internal/backend"
	"github.com/pgshard/pgshard/proxy/internal/merge"
	"github.com/pgshard/pgshard/proxy/internal/pgwire"
)

// A fan-out's participant: one shard's connection and its answer, read
// message by message (no goroutines, no buffering beyond the current
// row); fanExec (fanout.go) sends the requests and reads the streams, a
// merged read through internal/merge, which reads them as merge.Sources.

// partRole is how a fan-out participant's connection is held.
type partRole uint8

const (
	partOwn       partRole = iota // taken from the pool for this statement
	partMain                      // the client transaction's backend (fanExec.bc)
	partReader                    // a reader the transaction already holds
	partNewReader                 // a reader opened by this statement
)

// leadKind is a simple query a participant runs before the statement.
type leadKind uint8

const (
	leadSetup leadKind = iota // BEGIN and the preamble, or a reader's replay
	leadCheck                 // the isolation check
)

// fanStream reads one shard's answer to a fan-out.
type fanStream struct {
	shard int
	name  string // the shard's
	bc    *backend.Conn
	role  partRole
	// lead are the simple queries ahead of the statement, in order.
	lead    []leadKind
	leadErr int // the lead query that failed +1, 0 if none
	rowDesc []byte
	// paramDesc is the ParameterDescription of a Describe of a statement.
	paramDesc []byte
	row       []byte   // current DataRow, valid until the next read
	cols      [][]byte // row, split
	tag       []byte   // CommandComplete tag (copy)
	errRaw    []byte   // the shard's first error (copy)
	notices   [][]byte
	// status is the statement's ReadyForQuery status.
	status byte
	// rfqLeft is how many ReadyForQuery messages are still to come.
	rfqLeft  int
	rowsDone bool
	lost     error
	// bound: the statement's BindComplete arrived.
	bound bool
	// rl tells the shard's descriptions in the default shard's OIDs.
	rl relabeler
	// vals: the rows of its description carry the shard's type OIDs in
	// their values (relabelvalues.go).
	vals *rowValues
}

// failed reports whether the shard's answer is an error or its connection
// was lost.
func (f *fanStream) failed() bool { return f.errRaw != nil || f.lost != nil }

// A fanStream is a merge's source of one shard's rows.
var _ merge.Source = (*fanStream)(nil)

func (f *fanStream) Row() []byte    { return f.row }
func (f *fanStream) Cols() [][]byte { return f.cols }
func (f *fanStream) Next() bool     { return f.nextRow() }
func (f *fanStream) Failed() bool   { return f.failed() }
func (f *fanStream) Shard() string  { return f.name }

// recv reads the shard's next message past the answers to its lead
// queries; false when the connection failed.
func (f *fanStream) recv() (byte, []byte, bool) {
	for {
		typ, msg, err := f.bc.Reader.Next()
		if err != nil {
			f.loseConn(err)
			return 0, nil, false
		}
		if len(f.lead) == 0 {
			return typ, msg, true
		}
		switch typ {
		case 'Z':
			f.rfqLeft--
			f.lead = f.lead[1:]
		case 'E':
			if f.errRaw == nil {
				f.errRaw = append([]byte(nil), msg...)
				f.leadErr = int(f.lead[0]) + 1
			}
			if pgwire.ErrorField(msg, 'S') == "FATAL" {
				f.bc.Broken = true
			}
		}
	}
}

// nextRow advances to the shard's next DataRow; false at the end of rows.
func (f *fanStream) nextRow() bool {
	if f.rowsDone {
		return false
	}
	for {
		typ, msg, ok := f.recv()
		if !ok {
			return false
		}
		switch typ {
		case 'D':
			if f.vals != nil {
				f.rl.dataRow(f.vals, msg)
			}
			f.row = msg
			var e error
			if f.cols, e = pgwire.DataRowCols(f.cols[:0], msg); e != nil {
				f.loseConn(e)
				return false
			}
			return true
		case 'G', 'H', 'W':
			// A COPY out of every shard is read by copyJoin (copyout.go),
			// and COPY FROM never fans out.
			f.errRaw = pgwire.AppendError(nil, pgwire.NewError(pgwire.CodeFeatureNotSupported, "COPY cannot run on every shard through pgshard"))
			f.bc.Broken = true
			f.rowsDone = true
			f.rfqLeft = 0
			return false
		default:
			if f.take(typ, msg); f.rowsDone {
				return false
			}
		}
	}
}

// take records a message of the statement's answer that every reader of
// a stream keeps alike (ReadyForQuery, which ends the rows; BindComplete;
// the descriptions; the command tag; the first error; notices) and
// ignores any other.
func (f *fanStream) take(typ byte, msg []byte) {
	switch typ {
	case '2', 'C', 's', 'I', 'n', 'E', 'Z':
		f.vals = nil // rows to come are another result's
	}
	switch typ {
	case 'Z':
		f.rfqLeft--
		f.status = pgwire.ReadyStatus(msg)
		f.rowsDone = true
	case '2':
		f.bound = true
	case 'T':
		f.rowDesc = append([]byte(nil), msg...)
		f.vals = f.rl.rowDesc(f.rowDesc)
	case 't':
		f.paramDesc = append([]byte(nil), msg...)
		f.rl.paramDesc(f.paramDesc)
	case 'C':
		f.tag = append([]byte(nil), pgwire.CommandTag(msg)...)
	case 'E':
		if f.errRaw == nil {
			f.errRaw = append([]byte(nil), msg...)
		}
		if pgwire.ErrorField(msg, 'S') == "FATAL" {
			f.bc.Broken = true
		}
	case 'N':
		f.notices = append(f.notices, append([]byte(nil), msg...))
	}
}

// failRequest ends a stream whose request could not be written (nothing
// was sent): a refusal (*pgwire.Error) is its answer and its connection
// stays good; anything else loses the connection.
func (f *fanStream) failRequest(err error) {
	var e *pgwire.Error
	if !errors.As(err, &e) {
		f.loseConn(err)
		return
	}
	f.errRaw = pgwire.AppendError(nil, e)
	f.rowsDone = true
	f.rfqLeft = 0
}

func (f *fanStream) loseConn(err error) {
	f.lost = err
	f.bc.Broken = true
	f.rowsDone = true
	f.rfqLeft = 0
}

// drain reads the rest of the shard's answer up to its last ReadyForQuery.
func (f *fanStream) drain() {
	for f.nextRow() {
	}
	for f.rfqLeft > 0 && f.lost == nil {
		typ, msg, err := f.bc.Reader.Next()
		if err != nil {
			f.loseConn(err)
			return
		}
		switch typ {
		case 'Z':
			f.rfqLeft--
		case 'E':
			if pgwire.ErrorField(msg, 'S') == "FATAL" {
				f.bc.Broken = true
			}
		}
	}
}
