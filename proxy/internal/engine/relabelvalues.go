package engine

import (
	"encoding/binary"
	"slices"

	"github.com/pgshard/pgshard/proxy/internal/pgvalue"
	"github.com/pgshard/pgshard/proxy/internal/pgwire"
)

// A value in binary format can name types itself: array_send writes the
// element type's OID ahead of the elements, record_send (a row value, a
// composite type) each field's type ahead of the field. A shard writes
// its own numbers there, and psycopg picks the decoder of a binary
// array's elements and of a record's fields by them: an array of a user
// enum that another shard answers comes back as a list of bytes, not of
// the enum's values. So the DataRows that follow a RowDescription told in
// the catalog shard's numbers (relabel.go) are told alike: the columns in
// binary format whose type is an array of a user type, a composite type,
// a record or a domain over one of them (rowValues, from the
// description) have the type OIDs inside their values rewritten in
// place — an OID is four bytes either way — by what the snapshot knows
// of each type (typeShape: learned with the type's number, one catalog
// read). A value that does not decode as its type is left alone.
//
// The rows of a result follow its description within one answer: a
// RowDescription, then its rows up to CommandComplete (a query string's
// result, a portal described before its Execute). A portal the client
// runs without describing it (Npgsql's prepared statements: it knows the
// columns from the statement's Describe, in an earlier round trip) is
// known from its Bind instead (portalRows: the statement's columns as
// the client was told them, in the catalog shard's numbers, told back
// into the shard's; the Bind's result formats).

// typeShape is what a type is, as far as the OIDs in its binary values
// go.
type typeShape struct {
	kind shapeKind
	// inner is an array's element type, a domain's base type.
	inner uint32
}

type shapeKind uint8

const (
	shapePlain  shapeKind = iota // its values name no type
	shapeArray                   // array_send's values
	shapeRecord                  // record_send's values (a composite type)
	shapeDomain                  // its base type's values
)

// typeShapeCols are the columns of pg_type a typeShape is read from
// (shapeOf), after the type's OID, name and whether it is temporary.
const typeShapeCols = `t.typtype, t.typcategory, t.typelem, t.typbasetype`

// shapeOf reads the typeShape of a type from typeShapeCols' values.
func shapeOf(cols [][]byte) typeShape {
	if len(cols) < 4 {
		return typeShape{}
	}
	typtype, category := string(cols[0]), string(cols[1])
	switch {
	case typtype == "c":
		return typeShape{kind: shapeRecord}
	case typtype == "d":
		return typeShape{kind: shapeDomain, inner: rowOID(cols[3])}
	case category == "A" && rowOID(cols[2]) != 0:
		return typeShape{kind: shapeArray, inner: rowOID(cols[2])}
	}
	return typeShape{}
}

// maxDomainChain bounds how many domains over domains kind follows.
const maxDomainChain = 8

// kind is how binary values of p.from's type o carry type OIDs, and
// whether snap knows (a type not known is taken as plain).
func (snap *oidSnap) kind(p pair, o uint32) (pgvalue.ValueKind, bool) {
	for range maxDomainChain {
		switch {
		case o == pgvalue.RecordOID:
			return pgvalue.ValueRecord, true
		case o == pgvalue.RecordArrayOID:
			return pgvalue.ValueArray, true
		case o < pgvalue.FirstUserOID:
			return pgvalue.ValuePlain, true // built-in arrays hold built-in types
		case snap == nil:
			return pgvalue.ValuePlain, false
		}
		t, ok := snap.types[oidKey{p, o}]
		sh := t.shape
		switch {
		case !ok:
			return pgvalue.ValuePlain, false
		case sh.kind == shapeArray:
			return pgvalue.ValueArray, true
		case sh.kind == shapeRecord:
			return pgvalue.ValueRecord, true
		case sh.kind != shapeDomain:
			return pgvalue.ValuePlain, true
		}
		o = sh.inner
	}
	return pgvalue.ValuePlain, true
}

// rowValues are the columns of a shard's rows whose binary values carry
// type OIDs (nil: none).
type rowValues struct {
	cols []valueCol
	// scratch: a row's values, where one value's OIDs are
	vals [][]byte
	offs []int
}

// valueCol is a column by its index and its type (the shard's number).
type valueCol struct {
	at  int
	typ uint32
}

// mayHoldOIDs reports whether binary values of type typ may carry type
// OIDs: a user type (an array, a composite, a domain: learned), a record.
func mayHoldOIDs(typ uint32) bool {
	return typ >= pgvalue.FirstUserOID || typ == pgvalue.RecordOID || typ == pgvalue.RecordArrayOID
}

// rowValuesOf returns the columns of the rows that RowDescription msg
// (in the shard's numbers, before it is told) describes whose values are
// to be walked, and the snapshot that knows their types (learned if need
// be: the columns' types, then the types those hold, a few levels deep).
func (r relabeler) rowValuesOf(snap *oidSnap, msg []byte) (*oidSnap, *rowValues) {
	var cand []valueCol
	pgvalue.RowDescColumns(msg, func(k int, typ uint32, format uint16) {
		if format == 1 && mayHoldOIDs(typ) {
			cand = append(cand, valueCol{at: k, typ: typ})
		}
	})
	return r.walkable(snap, cand)
}

// walkable returns the columns among cand (in the shard's numbers) whose
// values are to be walked, their types learned.
func (r relabeler) walkable(snap *oidSnap, cand []valueCol) (*oidSnap, *rowValues) {
	if len(cand) == 0 {
		return snap, nil
	}
	var types []uint32
	for _, c := range cand {
		types = append(types, c.typ)
	}
	snap = r.learnTypes(snap, types)
	var v rowValues
	for _, c := range cand {
		if k, _ := snap.kind(r.p, c.typ); k != pgvalue.ValuePlain {
			v.cols = append(v.cols, c)
		}
	}
	if len(v.cols) == 0 {
		return snap, nil
	}
	return snap, &v
}

// maxLearnRounds bounds learnTypes: an array of a domain over a composite
// is three rounds.
const maxLearnRounds = 4

// learnTypes returns a snapshot that knows the shapes and numbers of
// p.from's types and of the types they hold (an array's element, a
// domain's base), learning what it lacks. A failed lookup leaves some
// unknown: their values are taken as plain, their OIDs left as they are.
func (r relabeler) learnTypes(snap *oidSnap, types []uint32) *oidSnap {
	for range maxLearnRounds {
		var missing []uint32
		seen := map[uint32]bool{}
		for len(types) > 0 {
			o := types[len(types)-1]
			types = types[:len(types)-1]
			if o < pgvalue.FirstUserOID || seen[o] {
				continue
			}
			seen[o] = true
			if t, ok := snap.typeOf(r.p, o); !ok {
				missing = append(missing, o)
			} else if t.shape.inner != 0 {
				types = append(types, t.shape.inner)
			}
		}
		if len(missing) == 0 {
			return snap
		}
		snap = r.gen.OIDs.lookup(r.ctx, r.gen, r.p, func(snap *oidSnap) oidAsk {
			var ask []uint32
			for _, o := range missing {
				if !snap.knows(r.p, o) {
					ask = append(ask, o)
				}
			}
			return oidAsk{types: ask}
		})
		types = append(types[:0], missing...)
	}
	return snap
}

// dataRow tells the type OIDs inside DataRow msg's values of v's columns
// (in place) in the catalog shard's numbers. A record's fields name their
// types only in the values, so a type first seen there is learned then.
func (r relabeler) dataRow(v *rowValues, msg []byte) {
	var err error
	if v.vals, err = pgwire.DataRowCols(v.vals[:0], msg); err != nil {
		return
	}
	snap := r.gen.OIDs.current(r.gen)
	for _, c := range v.cols {
		if c.at >= len(v.vals) || v.vals[c.at] == nil {
			continue
		}
		val, typ := v.vals[c.at], c.typ
		if _, known := snap.kind(r.p, typ); !known {
			// Not in this snapshot: a schema change since the
			// description was told (a new epoch's snapshot starts empty).
			snap = r.learnTypes(snap, []uint32{typ})
		}
		var ok bool
		for round := 0; ; round++ {
			kind := func(o uint32) pgvalue.ValueKind { k, _ := snap.kind(r.p, o); return k }
			if v.offs, ok = pgvalue.ValueOIDs(v.offs[:0], val, typ, kind); !ok {
				break
			}
			var missing []uint32
			for _, at := range v.offs {
				if o := binary.BigEndian.Uint32(val[at:]); !snap.knows(r.p, o) {
					missing = append(missing, o)
				}
			}
			if len(missing) == 0 || round == maxLearnRounds {
				break
			}
			snap = r.learnTypes(snap, missing)
		}
		if !ok {
			continue
		}
		for _, at := range v.offs {
			binary.BigEndian.PutUint32(val[at:], snap.relabelType(r.p, binary.BigEndian.Uint32(val[at:])))
		}
	}
}

// portalRows is what a Bind tells of the rows its portal will send: the
// statement's result columns as the client was told them (vstmt.desc, in
// the catalog shard's numbers) and the result formats the Bind asks for.
type portalRows struct {
	desc    []pgvalue.Field
	formats []int16
}

// bindRows returns the portalRows of a Bind of vs asking result formats
// fmts, nil when no column in binary may carry type OIDs (the common
// case) or vs was never described.
func bindRows(vs *vstmt, fmts []int16) *portalRows {
	for k, f := range vs.desc {
		if pgwire.FormatAt(fmts, k) == 1 && mayHoldOIDs(f.OID) {
			return &portalRows{desc: vs.desc, formats: slices.Clone(fmts)}
		}
	}
	return nil
}

// portalValues is rowValuesOf for a portal run without its description
// (portalRows): each column's type told back into the shard's numbers;
// a column whose type the shard's number is not known of is not walked.
func (r relabeler) portalValues(pr *portalRows) *rowValues {
	if r.gen == nil {
		return nil
	}
	var cand []valueCol
	var user []uint32
	for k, f := range pr.desc {
		if pgwire.FormatAt(pr.formats, k) == 1 && mayHoldOIDs(f.OID) {
			cand = append(cand, valueCol{at: k, typ: f.OID})
			if f.OID >= pgvalue.FirstUserOID {
				user = append(user, f.OID)
			}
		}
	}
	snap := r.gen.OIDs.current(r.gen)
	if len(user) > 0 {
		snap = r.backSnap(user)
	}
	kept := cand[:0]
	for _, c := range cand {
		if c.typ >= pgvalue.FirstUserOID {
			if c.typ = snap.backOf(r.p, c.typ); c.typ == 0 {
				continue
			}
		}
		kept = append(kept, c)
	}
	_, v := r.walkable(snap, kept)
	return v
}

// backOf is p.from's number of the catalog shard's type o (0: not known,
// or p.from has none).
func (snap *oidSnap) backOf(p pair, o uint32) uint32 {
	if snap == nil {
		return 0
	}
	return snap.back[oidKey{p, o}]
}
