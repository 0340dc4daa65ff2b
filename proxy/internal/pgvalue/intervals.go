package pgvalue

import (
	"encoding/binary"
	"math/bits"
	"strings"
)

// Intervals and times of day as the shards write them: an interval in
// any IntervalStyle (postgres, postgres_verbose, sql_standard, iso_8601:
// each style's texts read alone, so the style need not be known), a time
// and a time with time zone, text or binary. The merge orders them as
// Postgres does:
//
//   - an interval by its span, a month counting 30 days and a day 24
//     hours (interval_cmp: '1 mon' equals '30 days');
//   - a time by its microseconds;
//   - a timetz by the UTC time it names, then by its offset, east of UTC
//     first (timetz_cmp: '10:00+02' sorts before '08:00+00', equal in
//     UTC, since Postgres keeps the zone in seconds west).

// span is the key of months, days and microseconds (a timeKey: days and
// the microseconds within a day, 0 to 86,399,999,999); false on overflow.
func span(months, days, usec int64) (timeKey, bool) {
	const dayUsec = 86400 * 1_000_000
	d, ok := mulAdd(months, 30, days)
	if !ok {
		return timeKey{}, false
	}
	d, ok = addInt(d, floorDiv(usec, dayUsec))
	return timeKey{rank: 1, day: d, usec: floorMod(usec, dayUsec)}, ok
}

// cmpInterval orders two interval values (text in any IntervalStyle, or
// binary); false when either cannot be read.
func cmpInterval(a, b []byte, format int16) (int, bool) {
	ka, ok := readSpan(a, format)
	if !ok {
		return 0, false
	}
	kb, ok := readSpan(b, format)
	if !ok {
		return 0, false
	}
	return ka.compare(kb), true
}

func readSpan(v []byte, format int16) (timeKey, bool) {
	if format == 1 {
		if len(v) != 16 {
			return timeKey{}, false
		}
		usec := int64(binary.BigEndian.Uint64(v))
		day := int64(int32(binary.BigEndian.Uint32(v[8:])))
		mon := int64(int32(binary.BigEndian.Uint32(v[12:])))
		switch {
		case usec == -1<<63 && day == -1<<31 && mon == -1<<31:
			return timeKey{rank: 0}, true
		case usec == 1<<63-1 && day == 1<<31-1 && mon == 1<<31-1:
			return timeKey{rank: 2}, true
		}
		return span(mon, day, usec)
	}
	s := string(v)
	switch s {
	case "-infinity":
		return timeKey{rank: 0}, true
	case "infinity":
		return timeKey{rank: 2}, true
	}
	var iv ivParts
	var ok bool
	switch {
	case strings.HasPrefix(s, "@ "):
		ok = iv.verbose(s[2:])
	case strings.HasPrefix(s, "P"):
		ok = iv.iso8601(s[1:])
	case strings.ContainsAny(s, "ymd"):
		ok = iv.postgres(s)
	default:
		ok = iv.sqlStandard(s)
	}
	if !ok {
		return timeKey{}, false
	}
	return span(iv.months, iv.days, iv.usec)
}

// ivParts is an interval read from text.
type ivParts struct{ months, days, usec int64 }

// add adds n of unit (year, mon, day, hour, min; sec is read apart).
func (iv *ivParts) add(n int64, unit string) bool {
	var ok bool
	switch strings.TrimSuffix(unit, "s") {
	case "year":
		iv.months, ok = mulAdd(n, 12, iv.months)
	case "mon":
		iv.months, ok = addInt(iv.months, n)
	case "day":
		iv.days, ok = addInt(iv.days, n)
	case "hour":
		iv.usec, ok = mulAdd(n, 3600*1_000_000, iv.usec)
	case "min":
		iv.usec, ok = mulAdd(n, 60*1_000_000, iv.usec)
	}
	return ok
}

// postgres reads "[+-]N year[s] [+-]N mon[s] [+-]N day[s] [+-]HH:MM:SS[.f]"
// (each part present or not; "00:00:00" alone for zero).
func (iv *ivParts) postgres(s string) bool {
	f := strings.Split(s, " ")
	for len(f) >= 2 && !strings.Contains(f[0], ":") {
		n, ok := signedInt(f[0])
		if !ok || !isUnit(f[1], "year", "mon", "day") || !iv.add(n, f[1]) {
			return false
		}
		f = f[2:]
	}
	switch len(f) {
	case 0:
		return true
	case 1:
		return iv.clock(f[0])
	}
	return false
}

// verbose reads postgres_verbose after its "@ ": "N unit" pairs (year,
// mon, day, hour, min, sec; seconds may have a fraction), "0" for zero,
// and " ago", which negates every part.
func (iv *ivParts) verbose(s string) bool {
	ago := false
	if rest, ok := strings.CutSuffix(s, " ago"); ok {
		s, ago = rest, true
	}
	if s == "0" {
		return !ago
	}
	f := strings.Split(s, " ")
	if len(f)%2 != 0 {
		return false
	}
	for ; len(f) > 0; f = f[2:] {
		if isUnit(f[1], "sec") {
			us, ok := seconds(f[0])
			if !ok || len(f) != 2 {
				return false
			}
			if iv.usec, ok = addInt(iv.usec, us); !ok {
				return false
			}
			continue
		}
		n, ok := signedInt(f[0])
		if !ok || !isUnit(f[1], "year", "mon", "day", "hour", "min") || !iv.add(n, f[1]) {
			return false
		}
	}
	if ago {
		iv.months, iv.days, iv.usec = -iv.months, -iv.days, -iv.usec
	}
	return true
}

// iso8601 reads iso_8601 after its "P": [nY][nM][nD][T[nH][nM][n.fS]],
// every number signed ("T0S" for zero).
func (iv *ivParts) iso8601(s string) bool {
	date, clock, hasT := strings.Cut(s, "T")
	if hasT && clock == "" || !hasT && date == "" {
		return false
	}
	unit := func(u byte, clock bool) string {
		switch {
		case u == 'Y':
			return "year"
		case u == 'D':
			return "day"
		case u == 'H':
			return "hour"
		case u == 'M' && clock:
			return "min"
		}
		return "mon"
	}
	read := func(part string, units string, clock bool) bool {
		for part != "" {
			i := strings.IndexAny(part, units)
			if i <= 0 {
				return false
			}
			u := part[i]
			if u == 'S' {
				us, ok := seconds(part[:i])
				if !ok || i != len(part)-1 {
					return false
				}
				var ok2 bool
				iv.usec, ok2 = addInt(iv.usec, us)
				return ok2
			}
			n, ok := signedInt(part[:i])
			if !ok || !iv.add(n, unit(u, clock)) {
				return false
			}
			units = units[strings.IndexByte(units, u)+1:] // each unit once, in order
			part = part[i+1:]
		}
		return true
	}
	return read(date, "YMD", false) && read(clock, "HMS", true)
}

// sqlStandard reads sql_standard: "0"; "[-]Y-M"; "[-]D H:MM:SS[.f]";
// "[-]H:MM:SS[.f]" (a leading minus negates every part); or, with
// mixed signs or both a year-month and a day-time part, "±Y-M ±D
// ±H:MM:SS[.f]", each part signed.
func (iv *ivParts) sqlStandard(s string) bool {
	if s == "0" {
		return true
	}
	f := strings.Split(s, " ")
	yearMonth := func(p string) bool {
		neg := strings.HasPrefix(p, "-")
		y, m, ok := strings.Cut(strings.TrimLeft(p, "+-"), "-")
		yn, ok1 := digits(y)
		mn, ok2 := digits(m)
		if !ok || !ok1 || !ok2 || mn > 11 || !iv.add(yn, "year") || !iv.add(mn, "mon") {
			return false
		}
		if neg {
			iv.months = -iv.months
		}
		return true
	}
	if len(f) == 3 {
		if len(f[0]) < 2 || len(f[1]) < 2 || f[0][0] != '+' && f[0][0] != '-' || f[1][0] != '+' && f[1][0] != '-' {
			return false
		}
		d, ok := signedInt(f[1])
		return ok && yearMonth(f[0]) && iv.add(d, "day") && iv.clock(f[2])
	}
	neg := strings.HasPrefix(s, "-")
	body := strings.TrimPrefix(s, "-")
	if strings.ContainsAny(body, "+-") && (len(f) != 1 || strings.Contains(body, ":")) {
		return false // a sign inside a part other than year-month's dash
	}
	var ok bool
	switch {
	case len(f) == 1 && !strings.Contains(body, ":"):
		ok = yearMonth(body)
	case len(f) == 1:
		ok = iv.clock(body)
	case len(f) == 2:
		d, ok1 := digits(strings.TrimPrefix(f[0], "-"))
		ok = ok1 && iv.add(d, "day") && iv.clock(f[1])
	}
	if neg {
		iv.months, iv.days, iv.usec = -iv.months, -iv.days, -iv.usec
	}
	return ok
}

// clock adds "[+-]H:MM:SS[.ffffff]" (hours of any length) to iv.usec.
func (iv *ivParts) clock(c string) bool {
	neg := strings.HasPrefix(c, "-")
	c = strings.TrimLeft(c, "+-")
	p := strings.Split(c, ":")
	if len(p) != 3 || len(p[1]) != 2 {
		return false
	}
	h, ok1 := digits(p[0])
	m, ok2 := digits(p[1])
	us, ok3 := seconds(p[2])
	if !ok1 || !ok2 || !ok3 || m > 59 || us < 0 || len(p[2]) < 2 || p[2][1] == '.' {
		return false
	}
	t, ok := mulAdd(h, 3600*1_000_000, m*60*1_000_000+us)
	if !ok {
		return false
	}
	if neg {
		t = -t
	}
	iv.usec, ok = addInt(iv.usec, t)
	return ok
}

// seconds reads "[-]S[.ffffff]" as microseconds.
func seconds(s string) (int64, bool) {
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	whole, frac, hasFrac := strings.Cut(s, ".")
	w, ok := digits(whole)
	if !ok || hasFrac && (frac == "" || len(frac) > 6) {
		return 0, false
	}
	us := int64(0)
	if hasFrac {
		f, ok := digits(frac)
		if !ok {
			return 0, false
		}
		us = f
		for i := len(frac); i < 6; i++ {
			us *= 10
		}
	}
	t, ok := mulAdd(w, 1_000_000, us)
	if neg {
		t = -t
	}
	return t, ok
}

// signedInt reads "[+-]digits".
func signedInt(s string) (int64, bool) {
	neg := strings.HasPrefix(s, "-")
	if neg || strings.HasPrefix(s, "+") {
		s = s[1:]
	}
	n, ok := digits(s)
	if neg {
		n = -n
	}
	return n, ok
}

func isUnit(u string, names ...string) bool {
	for _, n := range names {
		if u == n || u == n+"s" {
			return true
		}
	}
	return false
}

// mulAdd is a*b + c, false on overflow.
func mulAdd(a, b, c int64) (int64, bool) {
	hi, lo := bits.Mul64(uint64(abs64(a)), uint64(abs64(b)))
	if hi != 0 || lo > 1<<63-1 {
		return 0, false
	}
	p := int64(lo)
	if (a < 0) != (b < 0) {
		p = -p
	}
	return addInt(p, c)
}

func addInt(a, b int64) (int64, bool) {
	s := a + b
	if (a > 0 && b > 0 && s < 0) || (a < 0 && b < 0 && s >= 0) {
		return 0, false
	}
	return s, true
}

func abs64(a int64) int64 {
	if a < 0 {
		return -a
	}
	return a
}

// ---- time of day ----

// cmpClock orders two time (tz false) or timetz values, text or binary.
func cmpClock(a, b []byte, tz bool, format int16) (int, bool) {
	ua, za, ok := readClock(a, tz, format)
	if !ok {
		return 0, false
	}
	ub, zb, ok := readClock(b, tz, format)
	if !ok {
		return 0, false
	}
	// UTC time first (local minus the offset east), then the offset, the
	// more easterly first (Postgres keeps it as seconds west).
	if c := cmpInt(ua-za*1_000_000, ub-zb*1_000_000); c != 0 {
		return c, true
	}
	return cmpInt(zb, za), true
}

// readClock reads a time's microseconds and, for a timetz, its offset
// in seconds east of UTC.
func readClock(v []byte, tz bool, format int16) (usec, east int64, ok bool) {
	if format == 1 {
		switch {
		case !tz && len(v) == 8:
			return int64(binary.BigEndian.Uint64(v)), 0, true
		case tz && len(v) == 12:
			return int64(binary.BigEndian.Uint64(v)), -int64(int32(binary.BigEndian.Uint32(v[8:]))), true
		}
		return 0, 0, false
	}
	s := string(v)
	zone := ""
	if tz {
		i := strings.IndexAny(s, "+-")
		if i < 0 {
			return 0, 0, false
		}
		s, zone = s[:i], s[i:]
	}
	var t timeText
	if !t.readClock(s) || t.usec > 86400*1_000_000 {
		return 0, 0, false
	}
	if tz {
		if east, ok = zoneOffset(zone); !ok {
			return 0, 0, false
		}
	}
	return t.usec, east, true
}
