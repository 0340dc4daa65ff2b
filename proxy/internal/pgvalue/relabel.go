package pgvalue

import (
	"bytes"
	"encoding/binary"

	"github.com/pgshard/pgshard/proxy/internal/pgwire"
)

// FirstUserOID is Postgres's FirstNormalObjectId: objects made after
// initdb (tables, their columns' relations, types a user created) have
// OIDs from it on; below it are the built-in ones, the same on every
// server of one major version.
const FirstUserOID = 16384

// DescEdit rewrites one column of a RowDescription: it is given the
// column's table OID, attribute number and type OID and returns what the
// column should say instead.
type DescEdit func(table uint32, attnum uint16, typ uint32) (uint32, uint16, uint32)

// EditRowDesc rewrites the table OID, attribute number and type OID of
// each column of RowDescription msg in place, as edit says. It reports
// false, and changes nothing, when msg is not a well-formed
// RowDescription.
func EditRowDesc(msg []byte, edit DescEdit) bool {
	return rowDescFields(msg, func(_, j int) bool {
		t, a, o := edit(binary.BigEndian.Uint32(msg[j:]), binary.BigEndian.Uint16(msg[j+4:]), binary.BigEndian.Uint32(msg[j+6:]))
		binary.BigEndian.PutUint32(msg[j:], t)
		binary.BigEndian.PutUint16(msg[j+4:], a)
		binary.BigEndian.PutUint32(msg[j+6:], o)
		return true
	})
}

// RowDescUserOIDs reports whether a column of RowDescription msg names a
// table or a type made after initdb (FirstUserOID): only such a
// description can differ between two servers with the same schema.
func RowDescUserOIDs(msg []byte) bool {
	user := false
	rowDescFields(msg, func(_, j int) bool {
		user = binary.BigEndian.Uint32(msg[j:]) >= FirstUserOID || binary.BigEndian.Uint32(msg[j+6:]) >= FirstUserOID
		return !user
	})
	return user
}

// RowDescColumns calls fn with each column of RowDescription msg: its
// index, type OID and format code. It reports false, calling fn for no
// column, when msg is malformed.
func RowDescColumns(msg []byte, fn func(k int, typ uint32, format uint16)) bool {
	return rowDescFields(msg, func(k, j int) bool {
		fn(k, binary.BigEndian.Uint32(msg[j+6:]), binary.BigEndian.Uint16(msg[j+16:]))
		return true
	})
}

// rowDescFields calls fn with each column k of RowDescription msg and
// where its fixed fields begin (j: the table OID, then the attnum, type
// OID, length, modifier, format) until fn returns false. It reports
// false, calling fn for no column, when msg is malformed.
func rowDescFields(msg []byte, fn func(k, j int) bool) bool {
	n, ok := rowDescCheck(msg)
	if !ok {
		return false
	}
	for k, i := 0, pgwire.HeaderLen+2; k < n; k++ {
		j := i + bytes.IndexByte(msg[i:], 0) + 1
		if !fn(k, j) {
			break
		}
		i = j + 18
	}
	return true
}

// rowDescCheck returns the number of columns of RowDescription msg, and
// false when msg is malformed (a name without its end, a column cut
// short, bytes after the last column).
func rowDescCheck(msg []byte) (int, bool) {
	if len(msg) < pgwire.HeaderLen+2 || msg[0] != 'T' {
		return 0, false
	}
	n := int(binary.BigEndian.Uint16(msg[pgwire.HeaderLen:]))
	i := pgwire.HeaderLen + 2
	for range n {
		z := bytes.IndexByte(msg[i:], 0)
		if z < 0 || len(msg)-(i+z+1) < 18 {
			return 0, false
		}
		i += z + 1 + 18
	}
	return n, i == len(msg)
}

// EditParamDesc rewrites each parameter type OID of ParameterDescription
// msg in place, as edit says (edit's table and attnum are 0 and ignored).
// It reports false, and changes nothing, when msg is malformed.
func EditParamDesc(msg []byte, edit DescEdit) bool {
	if len(msg) < pgwire.HeaderLen+2 || msg[0] != 't' {
		return false
	}
	n := int(binary.BigEndian.Uint16(msg[pgwire.HeaderLen:]))
	if len(msg) != pgwire.HeaderLen+2+4*n {
		return false
	}
	for k := range n {
		j := pgwire.HeaderLen + 2 + 4*k
		_, _, o := edit(0, 0, binary.BigEndian.Uint32(msg[j:]))
		binary.BigEndian.PutUint32(msg[j:], o)
	}
	return true
}

// ParamDescUserOIDs reports whether a parameter of ParameterDescription
// msg has a type made after initdb.
func ParamDescUserOIDs(msg []byte) bool {
	if len(msg) < pgwire.HeaderLen+2 || msg[0] != 't' {
		return false
	}
	for j := pgwire.HeaderLen + 2; j+4 <= len(msg); j += 4 {
		if binary.BigEndian.Uint32(msg[j:]) >= FirstUserOID {
			return true
		}
	}
	return false
}
