package verify

import (
	"encoding/json"
	"reflect"
	"strconv"
	"strings"
	"unicode/utf8"
	"unsafe"
)

// fastLine decodes one history line into l without encoding/json, for
// speed: a 1,000,000-op history is a few hundred MB of JSON, and
// reflection-driven decoding of it (and the garbage it leaves) was most
// of verify's time. It handles exactly the op lines a writer produces —
// plain strings, integers, numbers, booleans, the members of an op; a
// member no line type has is skipped, as encoding/json skips it — and
// gives up (returns false) on anything else: an escape in a string, null,
// a member of another line type, a member spelled in another case, a
// repeated member, an integer with a fraction or exponent, a syntax error,
// anything after the object. The caller then decodes the line with
// encoding/json, so what is accepted and rejected, and with which error,
// is encoding/json's by construction; FuzzFastLine checks that whenever
// fastLine succeeds, encoding/json accepts the line and decodes the same
// line value.
//
// Strings it returns live in d's arena (never written again) or are
// interned; l.fast records that the members op interns are interned.
func (d *decoder) fastLine(b []byte, l *line) bool {
	p := fastParser{b: b, d: d}
	*l = line{fast: true}
	if !p.ws() || p.b[p.i] != '{' {
		return false
	}
	p.i++
	if !p.ws() {
		return false
	}
	var seen uint64
	if p.b[p.i] == '}' {
		p.i++
	} else {
		for {
			key, ok := p.rawString()
			if !ok || !p.colon() {
				return false
			}
			bit, ok := opKeys[string(key)]
			if !ok {
				// A member the op lines do not have: ignored, as
				// encoding/json ignores it, unless encoding/json
				// would match it to a member of line after all
				// (case folding) or it is one fastLine does not
				// decode (another line type's).
				if !ignorable(key) || !p.skipValue() {
					return false
				}
			} else {
				if seen&(1<<bit) != 0 {
					return false
				}
				seen |= 1 << bit
				if !p.member(bit, l) {
					return false
				}
			}
			if !p.ws() {
				return false
			}
			if p.b[p.i] == ',' {
				p.i++
				if !p.ws() {
					return false
				}
				continue
			}
			if p.b[p.i] != '}' {
				return false
			}
			p.i++
			break
		}
	}
	// Only whitespace may follow the object.
	return !p.ws()
}

// The members of an op line fastLine decodes, numbered for the bit set
// of members seen.
const (
	kType = iota
	kID
	kKind
	kSrc
	kExe
	kShard
	kT0
	kT1
	kOutcome
	kErr
	kSQLState
	kEvent
	kCause
	kExists
	kVersion
	kWriter
	kProcessed
	kExp
	kNew
	kFound
	kConflict
	kInput
	kFast
	kEmits
	kTimers
	kSpawns
	kTrace
	kStep
	kActive
	kArmed
	kSeq
	kOrigin
	kPath
	kFireAt
	kN
	kTarget
	kParent
	kChild
	kNow
	kDeleted
	kDataDig
	kTraceDig
	kSpawnDigs
	kBodyDig
	kLimit
	kVia
	kCount
)

var opKeys = map[string]int{
	"type": kType, "id": kID, "kind": kKind, "src": kSrc, "exe": kExe, "shard": kShard,
	"t0": kT0, "t1": kT1, "outcome": kOutcome, "err": kErr, "sqlstate": kSQLState,
	"event": kEvent, "cause": kCause, "exists": kExists, "version": kVersion,
	"writer": kWriter, "processed": kProcessed, "exp": kExp, "new": kNew, "found": kFound,
	"conflict": kConflict, "input": kInput, "fast": kFast, "emits": kEmits, "timers": kTimers,
	"spawns": kSpawns, "trace": kTrace, "step": kStep, "active": kActive, "armed": kArmed,
	"seq": kSeq, "origin": kOrigin, "path": kPath, "fire_at": kFireAt, "n": kN,
	"target": kTarget, "parent": kParent, "child": kChild, "now": kNow, "deleted": kDeleted,
	"data_digest": kDataDig, "trace_digest": kTraceDig, "spawn_digests": kSpawnDigs,
	"body_digest": kBodyDig, "limit": kLimit, "via": kVia,
}

// lineKeys are the lower-cased JSON names of every member of line, which
// encoding/json matches case-insensitively.
var lineKeys = func() map[string]bool {
	m := map[string]bool{}
	t := reflect.TypeFor[line]()
	for i := range t.NumField() {
		if tag, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ","); tag != "" && tag != "-" {
			m[strings.ToLower(tag)] = true
		}
	}
	return m
}()

// ignorable reports whether encoding/json would ignore a member named key
// (its raw, unescaped bytes) when decoding a line: ASCII, and no member
// of line has its name in any case. Non-ASCII names are left to
// encoding/json (its case folding maps some to ASCII letters).
func ignorable(key []byte) bool {
	var buf [32]byte
	if len(key) > len(buf) {
		for _, c := range key {
			if c >= utf8.RuneSelf {
				return false
			}
		}
		return true // longer than every member name
	}
	for i, c := range key {
		switch {
		case c >= utf8.RuneSelf:
			return false
		case 'A' <= c && c <= 'Z':
			c += 'a' - 'A'
		}
		buf[i] = c
	}
	return !lineKeys[string(buf[:len(key)])]
}

type fastParser struct {
	b []byte
	i int
	d *decoder
}

// ws skips whitespace and reports whether input is left.
func (p *fastParser) ws() bool {
	for p.i < len(p.b) {
		switch p.b[p.i] {
		case ' ', '\t', '\r', '\n':
			p.i++
		default:
			return true
		}
	}
	return false
}

func (p *fastParser) colon() bool {
	if !p.ws() || p.b[p.i] != ':' {
		return false
	}
	p.i++
	return p.ws()
}

// rawString reads a string without escapes, control characters or
// invalid UTF-8 (which encoding/json would decode to other bytes) and
// returns its bytes.
func (p *fastParser) rawString() ([]byte, bool) {
	if p.i >= len(p.b) || p.b[p.i] != '"' {
		return nil, false
	}
	start := p.i + 1
	ascii := true
	for j := start; j < len(p.b); j++ {
		switch c := p.b[j]; {
		case c == '"':
			p.i = j + 1
			s := p.b[start:j]
			if !ascii && !utf8.Valid(s) {
				return nil, false
			}
			return s, true
		case c == '\\' || c < 0x20:
			return nil, false
		case c >= utf8.RuneSelf:
			ascii = false
		}
	}
	return nil, false
}

func (p *fastParser) str() (string, bool) {
	s, ok := p.rawString()
	if !ok {
		return "", false
	}
	return p.d.keep(s), true
}

func (p *fastParser) interned() (string, bool) {
	s, ok := p.rawString()
	if !ok {
		return "", false
	}
	return p.d.internBytes(s), true
}

func (p *fastParser) boolean() (bool, bool) {
	switch {
	case hasLit(p.b[p.i:], "true"):
		p.i += 4
		return true, true
	case hasLit(p.b[p.i:], "false"):
		p.i += 5
		return false, true
	}
	return false, false
}

func hasLit(b []byte, lit string) bool {
	return len(b) >= len(lit) && string(b[:len(lit)]) == lit
}

// integer reads a JSON integer without fraction or exponent that fits in
// an int64 (int is 64 bits wherever this runs; see intOK).
func (p *fastParser) integer() (int64, bool) {
	j := p.i
	neg := j < len(p.b) && p.b[j] == '-'
	if neg {
		j++
	}
	start := j
	var u uint64
	for j < len(p.b) && '0' <= p.b[j] && p.b[j] <= '9' {
		if u > (1<<63)/10 {
			return 0, false
		}
		u = u*10 + uint64(p.b[j]-'0')
		j++
	}
	n := j - start
	if n == 0 || (n > 1 && p.b[start] == '0') {
		return 0, false
	}
	if j < len(p.b) {
		if c := p.b[j]; c == '.' || c == 'e' || c == 'E' {
			return 0, false
		}
	}
	if u > 1<<63 || (!neg && u == 1<<63) {
		return 0, false
	}
	p.i = j
	if neg {
		return -int64(u), true
	}
	return int64(u), true
}

// intOK: fastLine stores integers in int members only where int is 64
// bits; elsewhere it gives up on every integer member.
const intOK = strconv.IntSize == 64

func (p *fastParser) intv() (int, bool) {
	if !intOK {
		return 0, false
	}
	v, ok := p.integer()
	return int(v), ok
}

// number reads a JSON number as encoding/json decodes it into a float64.
func (p *fastParser) number() (float64, bool) {
	j := p.i
	if j < len(p.b) && p.b[j] == '-' {
		j++
	}
	start := j
	for j < len(p.b) && '0' <= p.b[j] && p.b[j] <= '9' {
		j++
	}
	if j == start || (j-start > 1 && p.b[start] == '0') {
		return 0, false
	}
	if j < len(p.b) && p.b[j] == '.' {
		j++
		f := j
		for j < len(p.b) && '0' <= p.b[j] && p.b[j] <= '9' {
			j++
		}
		if j == f {
			return 0, false
		}
	}
	if j < len(p.b) && (p.b[j] == 'e' || p.b[j] == 'E') {
		j++
		if j < len(p.b) && (p.b[j] == '+' || p.b[j] == '-') {
			j++
		}
		f := j
		for j < len(p.b) && '0' <= p.b[j] && p.b[j] <= '9' {
			j++
		}
		if j == f {
			return 0, false
		}
	}
	lit := p.b[p.i:j]
	v, err := strconv.ParseFloat(unsafe.String(unsafe.SliceData(lit), len(lit)), 64)
	if err != nil {
		return 0, false
	}
	p.i = j
	return v, true
}

// strings reads an array of strings ([] is an empty, non-nil slice, as
// encoding/json makes it).
func (p *fastParser) strings() ([]string, bool) {
	d := p.d
	out := d.strScratch[:0]
	ok := p.array(func() bool {
		s, ok := p.str()
		out = append(out, s)
		return ok
	})
	d.strScratch = out[:0]
	return d.strSlab.clone(out), ok
}

// array reads a JSON array, calling elem at each element's first byte.
func (p *fastParser) array(elem func() bool) bool {
	if p.b[p.i] != '[' {
		return false
	}
	p.i++
	if !p.ws() {
		return false
	}
	if p.b[p.i] == ']' {
		p.i++
		return true
	}
	for {
		if !elem() || !p.ws() {
			return false
		}
		switch p.b[p.i] {
		case ',':
			p.i++
			if !p.ws() {
				return false
			}
		case ']':
			p.i++
			return true
		default:
			return false
		}
	}
}

// object reads a JSON object, calling member after each key's colon.
// Keys must be plain strings (see rawString).
func (p *fastParser) object(member func(key []byte) bool) bool {
	if p.b[p.i] != '{' {
		return false
	}
	p.i++
	if !p.ws() {
		return false
	}
	if p.b[p.i] == '}' {
		p.i++
		return true
	}
	for {
		key, ok := p.rawString()
		if !ok || !p.colon() || !member(key) || !p.ws() {
			return false
		}
		switch p.b[p.i] {
		case ',':
			p.i++
			if !p.ws() {
				return false
			}
		case '}':
			p.i++
			return true
		default:
			return false
		}
	}
}

// skipValue skips one JSON value, which must be valid JSON (checked by
// encoding/json: members fastLine ignores are rare).
func (p *fastParser) skipValue() bool {
	start := p.i
	depth := 0
	for p.i < len(p.b) {
		switch c := p.b[p.i]; c {
		case '"':
			p.i++
			for p.i < len(p.b) && p.b[p.i] != '"' {
				if p.b[p.i] == '\\' {
					p.i++
				}
				p.i++
			}
			if p.i >= len(p.b) {
				return false
			}
			p.i++
		case '{', '[':
			depth++
			p.i++
		case '}', ']':
			if depth == 0 {
				return json.Valid(p.b[start:p.i])
			}
			depth--
			p.i++
		case ',', ' ', '\t', '\r', '\n':
			if depth == 0 {
				return json.Valid(p.b[start:p.i])
			}
			p.i++
		default:
			p.i++
		}
		if depth == 0 && p.i > start && (p.b[p.i-1] == '"' || p.b[p.i-1] == '}' || p.b[p.i-1] == ']') {
			return json.Valid(p.b[start:p.i])
		}
	}
	return json.Valid(p.b[start:p.i])
}

// emits reads the emits array.
func (p *fastParser) emits() ([]Emit, bool) {
	d := p.d
	out := d.emitScratch[:0]
	ok := p.array(func() bool {
		var e Emit
		var seen uint8
		ok := p.object(func(key []byte) bool {
			var bit uint8
			var dst *string
			switch string(key) {
			case "event":
				bit, dst = 1, &e.Event
			case "target":
				bit, dst = 2, &e.Target
			case "digest":
				bit, dst = 4, &e.Digest
			default:
				return false
			}
			if seen&bit != 0 {
				return false
			}
			seen |= bit
			var ok bool
			if bit == 2 {
				*dst, ok = p.interned()
			} else {
				*dst, ok = p.str()
			}
			return ok
		})
		out = append(out, e)
		return ok
	})
	d.emitScratch = out[:0]
	return d.emitSlab.clone(out), ok
}

// timers reads the timers array into the parser's scratch space (op
// copies it).
func (p *fastParser) timers() ([]rawTime, bool) {
	d := p.d
	out := d.rawTimers[:0]
	ok := p.array(func() bool {
		var t rawTime
		var seen uint8
		ok := p.object(func(key []byte) bool {
			var bit uint8
			switch string(key) {
			case "exe":
				bit = 1
			case "path":
				bit = 2
			case "fire_at":
				bit = 4
			case "cancel":
				bit = 8
			default:
				return false
			}
			if seen&bit != 0 {
				return false
			}
			seen |= bit
			var ok bool
			switch bit {
			case 1:
				t.Exe, ok = p.interned()
			case 2:
				t.Path, ok = p.str()
			case 4:
				var f float64
				if f, ok = p.number(); ok {
					t.FireAt = d.floats.ptr(f)
				}
			case 8:
				t.Cancel, ok = p.boolean()
			}
			return ok
		})
		out = append(out, t)
		return ok
	})
	if out == nil {
		out = []rawTime{} // [] decodes to an empty slice, not nil
	}
	d.rawTimers = out[:0]
	return out, ok
}

// armed reads the armed object (a repeated path keeps its last value, as
// encoding/json's map decoding does).
func (p *fastParser) armed() (map[string]float64, bool) {
	m := map[string]float64{}
	ok := p.object(func(key []byte) bool {
		if !utf8.Valid(key) {
			return false
		}
		f, ok := p.number()
		m[p.d.keep(key)] = f
		return ok
	})
	return m, ok
}

// member decodes the value of the member numbered bit into l.
func (p *fastParser) member(bit int, l *line) bool {
	d := p.d
	var ok bool
	switch bit {
	case kType:
		var s []byte
		if s, ok = p.rawString(); ok {
			switch string(s) {
			case "op":
				l.Type = "op"
			default:
				return false // other line types go to encoding/json
			}
		}
	case kID:
		l.ID, ok = p.str()
	case kKind:
		l.Kind, ok = p.interned()
	case kSrc:
		l.Src, ok = p.interned()
	case kExe:
		var s string
		if s, ok = p.interned(); ok {
			d.scratch.exe = s
			l.Exe = &d.scratch.exe
		}
	case kShard:
		l.Shard, ok = p.interned()
	case kVia:
		l.Via, ok = p.interned()
	case kT0, kT1:
		var v int64
		if v, ok = p.integer(); ok {
			if bit == kT0 {
				d.scratch.t0, l.T0 = v, &d.scratch.t0
			} else {
				d.scratch.t1, l.T1 = v, &d.scratch.t1
			}
		}
	case kOutcome:
		l.Outcome, ok = p.interned()
	case kErr:
		l.Err, ok = p.str()
	case kSQLState:
		l.SQLState, ok = p.interned()
	case kEvent:
		l.Event, ok = p.str()
	case kCause:
		l.Cause, ok = p.interned()
	case kExists:
		l.Exists, ok = p.boolean()
	case kVersion:
		var v int
		if v, ok = p.intv(); ok {
			d.scratch.version, l.HVersion = v, &d.scratch.version
		}
	case kWriter:
		// A writer is an op id, mostly one read already: its string
		// is shared with that op's.
		var s []byte
		if s, ok = p.rawString(); ok {
			if o := d.ids[string(s)]; o != nil {
				l.Writer = o.ID
			} else {
				l.Writer = d.keep(s)
			}
		}
	case kProcessed:
		l.Processed, ok = p.boolean()
	case kExp:
		var v int
		if v, ok = p.intv(); ok {
			d.scratch.exp, l.Exp = v, &d.scratch.exp
		}
	case kNew:
		var v int
		if v, ok = p.intv(); ok {
			d.scratch.new, l.New = v, &d.scratch.new
		}
	case kFound:
		var v int
		if v, ok = p.intv(); ok {
			l.Found = d.ints.ptr(v) // kept by the op
		}
	case kConflict:
		l.Conflict, ok = p.boolean()
	case kInput:
		l.Input, ok = p.str()
	case kFast:
		l.Fast, ok = p.boolean()
	case kEmits:
		l.Emits, ok = p.emits()
	case kTimers:
		l.Timers, ok = p.timers()
	case kSpawns:
		l.Spawns, ok = p.strings()
	case kTrace:
		l.Trace, ok = p.boolean()
	case kStep:
		var v int
		if v, ok = p.intv(); ok {
			l.Step = d.ints.ptr(v) // kept by the op
		}
	case kActive:
		l.Active, ok = p.interned()
	case kArmed:
		l.Armed, ok = p.armed()
	case kSeq:
		var v int64
		if v, ok = p.integer(); ok {
			d.scratch.seq, l.Seq = v, &d.scratch.seq
		}
	case kOrigin:
		l.Origin, ok = p.str()
	case kPath:
		l.Path, ok = p.str()
	case kFireAt:
		var f float64
		if f, ok = p.number(); ok {
			d.scratch.fireAt, l.FireAt = f, &d.scratch.fireAt
		}
	case kN:
		l.N, ok = p.intv()
	case kTarget:
		l.Target, ok = p.interned()
	case kParent:
		l.Parent, ok = p.interned()
	case kChild:
		l.Child, ok = p.str()
	case kNow:
		var f float64
		if f, ok = p.number(); ok {
			d.scratch.now, l.Now = f, &d.scratch.now
		}
	case kDeleted:
		l.Deleted, ok = p.boolean()
	case kDataDig:
		l.DataDig, ok = p.str()
	case kTraceDig:
		l.TraceDig, ok = p.str()
	case kSpawnDigs:
		l.SpawnDigs, ok = p.strings()
	case kBodyDig:
		l.BodyDig, ok = p.str()
	case kLimit:
		l.Limit, ok = p.intv()
	}
	return ok
}

// slab hands out pieces of large chunks, so that a history's many small
// slices and pointers cost one allocation per chunk, not one each. A
// piece is never handed out twice.
type slab[T any] struct{ chunk []T }

const slabChunk = 4096

// clone copies s into the slab ([] for an empty s: non-nil, as
// encoding/json decodes an empty array).
func (s *slab[T]) clone(src []T) []T {
	if len(src) == 0 {
		return []T{}
	}
	if len(src) > cap(s.chunk)-len(s.chunk) {
		s.chunk = make([]T, 0, max(slabChunk, len(src)))
	}
	n := len(s.chunk)
	s.chunk = append(s.chunk, src...)
	return s.chunk[n : n+len(src) : n+len(src)]
}

// ptr returns a pointer to a new element holding v.
func (s *slab[T]) ptr(v T) *T {
	if len(s.chunk) == cap(s.chunk) {
		s.chunk = make([]T, 0, slabChunk)
	}
	s.chunk = append(s.chunk, v)
	return &s.chunk[len(s.chunk)-1]
}

// fastScratch holds the members op copies out of a line (fastLine points
// line's presence pointers here instead of allocating).
type fastScratch struct {
	exe               string
	t0, t1, seq       int64
	version, exp, new int
	fireAt, now       float64
}

// keep returns b as a string stored in the decoder's arena: chunks of
// bytes that are only appended to, so a string made of a piece of one
// (unsafe.String) never changes. One chunk holds the ids, events and
// digests of hundreds of ops, instead of one allocation each.
func (d *decoder) keep(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	if len(b) > cap(d.arena)-len(d.arena) {
		if len(b) > 4<<10 {
			return string(b)
		}
		d.arena = make([]byte, 0, 256<<10)
	}
	n := len(d.arena)
	d.arena = append(d.arena, b...)
	return unsafe.String(&d.arena[n], len(b))
}

// internBytes is intern for a byte slice, without allocating when the
// string is known.
func (d *decoder) internBytes(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	if v, ok := d.strs[string(b)]; ok {
		return v
	}
	s := string(b)
	d.strs[s] = s
	return s
}
