package pgvalue

import "encoding/binary"

// Two binary output formats carry type OIDs inside a value: array_send
// writes its element type ahead of the elements, record_send (a row
// value, a composite type) each field's type ahead of the field. A value
// a shard sends in binary therefore names types in that shard's numbers,
// and a client that picks its decoder by them (psycopg's binary arrays
// and records) must be told them in the numbers of the catalog it read.
// ValueOIDs finds them; it reads no catalog itself: what each type is
// comes from its caller.

// ValueKind is how a binary value of a type carries type OIDs.
type ValueKind uint8

const (
	// ValuePlain carries none (numbers, text, enums, ...).
	ValuePlain ValueKind = iota
	// ValueArray is array_send's: dimensions, element type, elements.
	ValueArray
	// ValueRecord is record_send's: each field's type, then the field.
	ValueRecord
)

// The built-in types whose binary values carry type OIDs: an anonymous
// row value and an array of them. Every other built-in type's values
// name only built-in types, numbered alike on every server.
const (
	RecordOID      = 2249
	RecordArrayOID = 2287
)

// maxValueDepth bounds how deeply ValueOIDs follows arrays of records of
// arrays...: a value nested deeper is not walked (Postgres itself stops
// far sooner at its stack depth).
const maxValueDepth = 32

// maxArrayDims is Postgres's MAXDIM.
const maxArrayDims = 6

// ValueOIDs appends to offs the offset in v of every type OID at or above
// FirstUserOID that binary value v of type typ carries, walking arrays'
// elements and records' fields by their own types; kind says what a type
// is (a type it does not know is taken as ValuePlain: its values are not
// walked). ok is false, and offs is returned as given, when v does not
// decode as typ (a length past its end, bytes after its last element):
// nothing of a value that is not what its type says is rewritten.
func ValueOIDs(offs []int, v []byte, typ uint32, kind func(uint32) ValueKind) ([]int, bool) {
	n := len(offs)
	w := valueWalk{v: v, offs: offs, kind: kind}
	if !w.value(0, len(v), typ, 0) {
		return offs[:n], false
	}
	return w.offs, true
}

type valueWalk struct {
	v    []byte
	offs []int
	kind func(uint32) ValueKind
}

// value walks v[at:end], a value of type typ.
func (w *valueWalk) value(at, end int, typ uint32, depth int) bool {
	if depth > maxValueDepth {
		return false
	}
	switch w.kind(typ) {
	case ValueArray:
		return w.array(at, end, depth)
	case ValueRecord:
		return w.record(at, end, depth)
	}
	return true
}

// array walks array_send's output in v[at:end].
func (w *valueWalk) array(at, end, depth int) bool {
	if end-at < 12 {
		return false
	}
	ndim := int32(binary.BigEndian.Uint32(w.v[at:]))
	elem := binary.BigEndian.Uint32(w.v[at+8:])
	if ndim < 0 || ndim > maxArrayDims || end-at-12 < 8*int(ndim) {
		return false
	}
	w.note(at+8, elem)
	i, count := at+12, 1
	for range ndim {
		dim := int32(binary.BigEndian.Uint32(w.v[i:]))
		if dim < 0 || (dim > 0 && count > (end-at)/4/int(dim)) {
			return false // more elements than bytes to hold them
		}
		count *= int(dim)
		i += 8
	}
	if ndim == 0 {
		count = 0
	}
	for range count {
		var ok bool
		if i, ok = w.item(i, end, elem, depth); !ok {
			return false
		}
	}
	return i == end
}

// record walks record_send's output in v[at:end].
func (w *valueWalk) record(at, end, depth int) bool {
	if end-at < 4 {
		return false
	}
	n := int32(binary.BigEndian.Uint32(w.v[at:]))
	i := at + 4
	if n < 0 || int(n) > (end-i)/8 {
		return false
	}
	for range n {
		typ := binary.BigEndian.Uint32(w.v[i:])
		w.note(i, typ)
		var ok bool
		if i, ok = w.item(i+4, end, typ, depth); !ok {
			return false
		}
	}
	return i == end
}

// item walks one length-prefixed element or field of type typ at v[i:]
// (a length of -1 is NULL) and returns where the next begins.
func (w *valueWalk) item(i, end int, typ uint32, depth int) (int, bool) {
	if end-i < 4 {
		return 0, false
	}
	l := int32(binary.BigEndian.Uint32(w.v[i:]))
	i += 4
	if l < 0 {
		return i, l == -1
	}
	if int(l) > end-i {
		return 0, false
	}
	return i + int(l), w.value(i, i+int(l), typ, depth+1)
}

func (w *valueWalk) note(at int, typ uint32) {
	if typ >= FirstUserOID {
		w.offs = append(w.offs, at)
	}
}
