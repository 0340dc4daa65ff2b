package merge

import (
	"slices"

	"github.com/pgshard/pgshard/proxy/internal/pgvalue"
	"github.com/pgshard/pgshard/proxy/internal/pgwire"
	"github.com/pgshard/pgshard/proxy/route"
)

// Run executes one merge: set its inputs, call Answer (or Description
// for an error that ends the statement before its rows).
type Run struct {
	Plan    *route.Merge
	Sources []Source
	// Live[i] reports whether Sources[i] stands at a row (the caller
	// advanced every source to its first row; Answer keeps it current).
	Live []bool
	// RawDesc is the per-shard RowDescription (the first shard's).
	RawDesc []byte
	// ClientFormats are the client's result format codes (Bind), none = text.
	ClientFormats []int16
	Describe      bool // send a RowDescription (simple query, or a portal Describe)
	Bytewise      bool // text orders by bytes on the shards (C collation)
	// Times is how the shards write dates and times as text (their
	// session's DateStyle and TimeZone; nil: not known).
	Times      *pgvalue.TimeStyle
	GroupLimit int // how many groups a sort after the merge may buffer
	// Origins, when set, are the columns the statement describes: the
	// answer's RowDescription gives their originating tables (Table,
	// Attnum), not the shards' (a read in two stages, whose shards read
	// some columns from a VALUES list).
	Origins []pgvalue.Field
	// Params, Formats, OIDs are the client's Bind parameters (HAVING $n).
	Params  [][]byte
	Formats []int16
	OIDs    []uint32
	// Out is the client's output buffer the answer is appended to; Flush
	// writes it to the client (and empties it) when it grows past 64 KiB.
	Out   *[]byte
	Flush func() error

	// Emitted is the number of rows answered so far.
	Emitted int64
	// IOErr is the client write that failed (Answer returned ErrStop).
	IOErr error

	fields []pgvalue.Field // the per-shard columns (from RawDesc)
}

// rowMerge is a Run of a plain fan-out (no GROUP BY): the k-way merge of
// the shards' rows (rows.go).
type rowMerge struct{ run *Run }

// groupMerge is a Run of a grouped fan-out: groups combined across the
// shards, HAVING, the bounded sort after grouping (groups.go, having.go).
// Both hold the Run (its inputs and output) as a field, not embedded:
// what each does is its own method set, the Run's is the Run's.
type groupMerge struct{ run *Run }

// Source is one shard's answer to a fanned-out read, a row at a time.
type Source interface {
	// Row is the current DataRow message and Cols its columns, valid until Next.
	Row() []byte
	Cols() [][]byte
	// Next advances to the next row: false at the end of the rows or
	// when the answer failed.
	Next() bool
	// Failed reports whether the answer is an error or its connection was
	// lost; the caller reports it (Answer stops with no error of its own).
	Failed() bool
	// Shard names the shard, for errors.
	Shard() string
}

// ErrStop ends a merge whose client went away (Run.IOErr).
var ErrStop = &pgwire.Error{Code: pgwire.CodeConnectionFailure, Message: "the client connection failed"}

// clientFormat is the format the client asked for column i.
func (r *Run) clientFormat(i int) int16 { return pgwire.FormatAt(r.ClientFormats, i) }

// ShardFormats are the result formats to ask every shard for: the
// client's on the client's columns, binary on the proxy's own (hidden
// columns, partial aggregates, group keys). width is the per-shard
// column count, -1 when unknown (a * in the select list).
func ShardFormats(m *route.Merge, client []int16) []int16 {
	fmtOf := func(i int) int16 {
		switch len(client) {
		case 0:
			return 0
		case 1:
			return client[0]
		}
		if i < len(client) {
			return client[i]
		}
		return 0
	}
	if g := m.Groups; g != nil {
		out := make([]int16, m.Width)
		for i := range out {
			out[i] = 1
		}
		for j := 0; j < g.Visible; j++ {
			o := g.Outputs[j]
			if o.Cast == route.CastNone && (o.Agg == route.AggNone || o.Agg == route.AggMin || o.Agg == route.AggMax) {
				out[o.Column] = fmtOf(j)
			}
		}
		return out
	}
	if m.Hidden == 0 {
		return client
	}
	if m.Width < 0 {
		if len(client) > 1 {
			out := slices.Clone(client)
			for i := 0; i < m.Hidden; i++ {
				out = append(out, 1)
			}
			return out
		}
		return client // one format for every column, the hidden ones too
	}
	out := make([]int16, m.Width)
	for i := range out {
		if i < m.Width-m.Hidden {
			out[i] = fmtOf(i)
		} else {
			out[i] = 1
		}
	}
	return out
}

// Answer appends the merged answer (RowDescription if Describe, rows) to
// *r.Out, counting the rows in Emitted; it returns the error that ends it
// (ErrStop: the client went away, IOErr says why), nil also when a source
// failed (the caller reports the shard's error).
func (r *Run) Answer() *pgwire.Error {
	fs, err := pgvalue.ParseRowDesc(r.RawDesc)
	if err != nil {
		return pgwire.NewError(pgwire.CodeProtocolViolation, err.Error())
	}
	r.fields = fs
	if r.Plan.Groups != nil {
		return groupMerge{r}.groups()
	}
	return rowMerge{r}.rows()
}

// description is the RowDescription the merge would answer with (for an
// error that ends the statement before its rows).
func (r *Run) Description() ([]byte, *pgwire.Error) {
	fs, err := pgvalue.ParseRowDesc(r.RawDesc)
	if err != nil {
		return nil, pgwire.NewError(pgwire.CodeProtocolViolation, err.Error())
	}
	r.fields = fs
	if r.Plan.Groups != nil {
		if len(r.fields) != r.Plan.Width {
			return nil, pgwire.NewError(pgwire.CodeInternalError, "pgshard merge: a shard returned another number of columns than the merge expects")
		}
		out, _, e := groupMerge{r}.groupFields()
		if e != nil {
			return nil, e
		}
		return r.appendDesc(nil, out), nil
	}
	visible := len(r.fields) - r.Plan.Hidden
	switch {
	case visible < 0:
		return nil, pgwire.NewError(pgwire.CodeInternalError, "pgshard merge: a shard returned fewer columns than the merge needs")
	case r.Plan.Hidden == 0 && r.Origins == nil:
		return r.RawDesc, nil
	}
	return r.appendDesc(nil, r.fields[:visible]), nil
}

// appendDesc appends the RowDescription of the answer's columns fs,
// with Origins' originating tables when set.
func (r *Run) appendDesc(dst []byte, fs []pgvalue.Field) []byte {
	if r.Origins != nil {
		fs = slices.Clone(fs)
		for i := range fs {
			if i < len(r.Origins) {
				fs[i].Table, fs[i].Attnum = r.Origins[i].Table, r.Origins[i].Attnum
			}
		}
	}
	return pgvalue.AppendRowDesc(dst, fs)
}

// flushFull writes the client's buffer once it holds over 64 KiB; ErrStop
// when the write failed (IOErr).
func (r *Run) flushFull() *pgwire.Error {
	if len(*r.Out) <= 64*1024 {
		return nil
	}
	if err := r.Flush(); err != nil {
		r.IOErr = err
		return ErrStop
	}
	return nil
}
