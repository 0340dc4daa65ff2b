package pgvalue

import (
	"encoding/binary"
	"slices"
	"testing"
)

// binArray builds a binary array value: ndim, element oid, and for one
// dimension the elements (nil: NULL).
func binArray(ndim int32, oid uint32, elems ...[]byte) []byte {
	b := binary.BigEndian.AppendUint32(nil, uint32(ndim))
	b = binary.BigEndian.AppendUint32(b, 0) // no NULL bitmap flag
	b = binary.BigEndian.AppendUint32(b, oid)
	if ndim != 1 {
		return b
	}
	b = binary.BigEndian.AppendUint32(b, uint32(len(elems)))
	b = binary.BigEndian.AppendUint32(b, 1) // lower bound
	for _, e := range elems {
		if e == nil {
			b = binary.BigEndian.AppendUint32(b, 0xFFFFFFFF)
			continue
		}
		b = binary.BigEndian.AppendUint32(b, uint32(len(e)))
		b = append(b, e...)
	}
	return b
}

// TestDecodeArray: the one-dimensional binary array reader of the merge
// and of pg_terminate_backend's argument, on good and malformed values.
func TestDecodeArray(t *testing.T) {
	one := binArray(1, 25, []byte("a"), nil, []byte(""), []byte("bc"))
	ndim, oid, elems, ok := DecodeArray(one)
	if !ok || ndim != 1 || oid != 25 || len(elems) != 4 || string(elems[0]) != "a" || elems[1] != nil || elems[2] == nil || len(elems[2]) != 0 || string(elems[3]) != "bc" {
		t.Fatalf("1-D array: ndim %d oid %d elems %q ok %v", ndim, oid, elems, ok)
	}
	if ndim, _, elems, ok := DecodeArray(binArray(0, 23)); !ok || ndim != 0 || elems != nil {
		t.Errorf("empty array: ndim %d elems %q ok %v", ndim, elems, ok)
	}
	if ndim, _, elems, ok := DecodeArray(binArray(2, 23)); !ok || ndim != 2 || elems != nil {
		t.Errorf("2-D array: ndim %d elems %q ok %v, want ndim 2 and no elements", ndim, elems, ok)
	}
	for name, v := range map[string][]byte{
		"short":          one[:11],
		"no dimension":   one[:16],
		"truncated len":  one[:22],
		"truncated elem": one[:len(one)-1],
		"negative ndim":  binArray(-1, 23),
		"count too big":  slices.Concat(one[:12], []byte{0x7f, 0, 0, 0}, one[16:]),
	} {
		if _, _, _, ok := DecodeArray(v); ok {
			t.Errorf("%s: accepted", name)
		}
	}
}
