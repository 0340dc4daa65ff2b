package pgvalue

import (
	"slices"
	"strings"
	"sync"
	"time"
)

// Dates and times as the shards write them in text: in any DateStyle
// (ISO, SQL, German, Postgres), BC years included, a timestamptz's zone
// as a numeric offset or an abbreviation of the session's TimeZone. The
// merge orders such values by the instant they name, never by their text
// (which orders only ISO dates of years 1 to 9999).
//
// Which style a text is in is read from the text itself (each style's
// shape differs), except the order of day and month in the SQL style
// (12/05/2020) and in the Postgres style's dates (12-05-2020), which the
// session's DateStyle gives (TimeStyle.Order). An abbreviation (CET,
// EDT) names an offset only together with the session's TimeZone
// (TimeStyle.Zone): the local time and the abbreviation must match
// exactly one instant there, else the value is not compared (the merge
// refuses the read, 0A000) — it never guesses.

// TimeStyle is what the shards' session settings say about dates and
// times written as text. The zero value knows neither (a read inside a
// transaction block that may have changed them with SET LOCAL): only
// the texts that say everything themselves are compared then.
type TimeStyle struct {
	// Order is 'D' when DateStyle names DMY (SQL and Postgres styles
	// write the day first), 'M' for MDY or YMD (month first), 0 unknown.
	Order byte
	// Zone is the session's TimeZone (nil: unknown, or a zone this
	// machine's time zone database lacks).
	Zone *time.Location
}

// zones caches the time zones loaded by name: each is immutable, and the
// names are those of the time zone database's files (a bounded set).
var zones sync.Map // string → *time.Location (nil: failed to load)

// NewTimeStyle is the TimeStyle of the reported parameters DateStyle
// ("German, DMY") and TimeZone ("Europe/Berlin").
func NewTimeStyle(dateStyle, timeZone string) TimeStyle {
	var ts TimeStyle
	ds := strings.ToUpper(dateStyle)
	switch {
	case strings.Contains(ds, "DMY"):
		ts.Order = 'D'
	case strings.Contains(ds, "MDY"), strings.Contains(ds, "YMD"):
		ts.Order = 'M'
	}
	if timeZone == "" {
		return ts
	}
	if z, ok := zones.Load(timeZone); ok {
		ts.Zone, _ = z.(*time.Location)
		return ts
	}
	loc, err := time.LoadLocation(timeZone)
	if err != nil || timeZone == "Local" {
		loc = nil // Postgres's names are the database's; "Local" is Go's own
	}
	zones.Store(timeZone, loc)
	ts.Zone = loc
	return ts
}

// timeKey is the instant a date or time text names, in days and
// microseconds of the day (UTC for a timestamptz, else local), or an
// interval's span (intervals.go); rank 0 is -infinity, 2 infinity.
type timeKey struct {
	rank int
	day  int64
	usec int64
}

func (a timeKey) compare(b timeKey) int {
	switch {
	case a.rank != b.rank:
		return cmpInt(int64(a.rank), int64(b.rank))
	case a.day != b.day:
		return cmpInt(a.day, b.day)
	}
	return cmpInt(a.usec, b.usec)
}

// timeText is a date or time text split into its fields.
type timeText struct {
	year        int64 // astronomical: 1 BC is 0
	month, day  int
	clock       bool // a time of day follows the date
	usec        int64
	zone        string // the zone as written ("" none)
	numericZone bool   // zone is an offset, +HH[:MM[:SS]] or +HHMM
	dow         string // the day of the week written (Postgres style)
}

// cmpTime orders two date, timestamp or timestamptz (tz) texts as
// Postgres orders their values: by the instants they name (ISO ones read
// without allocating, isoTime); false when either cannot be read with
// certainty.
func cmpTime(a, b string, tz bool, ts *TimeStyle) (int, bool) {
	ka, ok := readTimeKey(a, tz, ts)
	if !ok {
		return 0, false
	}
	kb, ok := readTimeKey(b, tz, ts)
	if !ok {
		return 0, false
	}
	return ka.compare(kb), true
}

// readTimeKey reads a text's instant (tz: a timestamptz, which must carry
// a zone; else it must not).
func readTimeKey(s string, tz bool, ts *TimeStyle) (timeKey, bool) {
	switch s {
	case "-infinity":
		return timeKey{rank: 0}, true
	case "infinity":
		return timeKey{rank: 2}, true
	}
	if k, zone, ok := isoTime(s); ok {
		if zone != tz {
			return timeKey{}, false
		}
		return k, true
	}
	order := byte(0)
	if ts != nil {
		order = ts.Order
	}
	t, ok := splitTime(s, order)
	if !ok || (t.zone != "") != tz {
		return timeKey{}, false
	}
	k := timeKey{rank: 1, day: civilDay(t.year, t.month, t.day), usec: t.usec}
	if !tz {
		return k, true
	}
	if t.numericZone {
		off, ok := zoneOffset(t.zone)
		if !ok {
			return timeKey{}, false
		}
		return k.minus(off), true
	}
	if ts == nil || ts.Zone == nil {
		return timeKey{}, false
	}
	off, ok := abbrevOffset(k, t.zone, ts.Zone)
	if !ok {
		return timeKey{}, false
	}
	return k.minus(off), true
}

// isoTime reads the common case without allocating: an ISO date or
// time of a year of four digits, AD, "2024-03-05[ 10:11:12[.123456]
// [+01[:00[:00]]]]", as UTC when it has an offset (zone). false for
// anything else, which splitTime reads.
func isoTime(s string) (k timeKey, zone, ok bool) {
	two := func(i int) (int64, bool) {
		if i+2 > len(s) || s[i] < '0' || s[i] > '9' || s[i+1] < '0' || s[i+1] > '9' {
			return 0, false
		}
		return int64(s[i]-'0')*10 + int64(s[i+1]-'0'), true
	}
	if len(s) < 10 || s[4] != '-' || s[7] != '-' {
		return k, false, false
	}
	y1, ok1 := two(0)
	y2, ok2 := two(2)
	m, ok3 := two(5)
	d, ok4 := two(8)
	y := y1*100 + y2
	if !ok1 || !ok2 || !ok3 || !ok4 || y < 1 || m < 1 || m > 12 || d < 1 || d > int64(daysIn(y, int(m))) {
		return k, false, false
	}
	k = timeKey{rank: 1, day: civilDay(y, int(m), int(d))}
	if len(s) == 10 {
		return k, false, true
	}
	if len(s) < 19 || s[10] != ' ' || s[13] != ':' || s[16] != ':' {
		return k, false, false
	}
	h, ok1 := two(11)
	mi, ok2 := two(14)
	sec, ok3 := two(17)
	if !ok1 || !ok2 || !ok3 || h > 24 || mi > 59 || sec > 60 {
		return k, false, false
	}
	us, i := int64(0), 19
	if i < len(s) && s[i] == '.' {
		n := 0
		for i++; i < len(s) && s[i] >= '0' && s[i] <= '9'; i++ {
			if n++; n > 6 {
				return k, false, false
			}
			us = us*10 + int64(s[i]-'0')
		}
		if n == 0 {
			return k, false, false
		}
		for ; n < 6; n++ {
			us *= 10
		}
	}
	k.usec = ((h*60+mi)*60+sec)*1_000_000 + us
	if i == len(s) {
		return k, false, true
	}
	if s[i] != '+' && s[i] != '-' {
		return k, false, false // " BC" and the like: splitTime
	}
	off, neg := int64(0), s[i] == '-'
	for part := 0; part < 3; part++ {
		off *= 60
		if part == 0 || i < len(s) && s[i] == ':' {
			v, ok := two(i + 1)
			if !ok {
				return k, false, false
			}
			off += v
			i += 3
		}
	}
	if i != len(s) {
		return k, false, false
	}
	if neg {
		off = -off
	}
	return k.minus(off), true, true
}

// minus is k moved back by off seconds (local time to UTC).
func (k timeKey) minus(off int64) timeKey {
	const dayUsec = 86400 * 1_000_000
	u := k.usec - off*1_000_000
	k.day += floorDiv(u, dayUsec)
	k.usec = floorMod(u, dayUsec)
	return k
}

func floorMod(a, b int64) int64 { return a - floorDiv(a, b)*b }

func floorDiv(a, b int64) int64 {
	q := a / b
	if (a%b != 0) && ((a < 0) != (b < 0)) {
		q--
	}
	return q
}

// civilDay is the day number of a proleptic Gregorian date (0 is
// 1970-01-01), for any astronomical year.
func civilDay(y int64, m, d int) int64 {
	if m <= 2 {
		y--
	}
	era := floorDiv(y, 400)
	yoe := y - era*400
	mp := int64((m + 9) % 12)
	doy := (153*mp+2)/5 + int64(d) - 1
	doe := yoe*365 + yoe/4 - yoe/100 + doy
	return era*146097 + doe - 719468
}

var monthNames = [...]string{"Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"}
var dayNames = [...]string{"Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"}

// splitTime reads the fields of a date or time text written by Postgres
// in any DateStyle; order is the DateStyle's order ('D', 'M', 0 unknown:
// day-month texts without a month name are then refused).
//
//	ISO       2020-12-05 [13:04:05[.123456][+01[:00[:00]]]] [BC]
//	SQL       12/05/2020 [13:04:05[.123456] [CET|+01[:00]]] [BC]  (05/12/2020 DMY)
//	German    05.12.2020 [13:04:05[.123456] [CET|+01[:00]]] [BC]
//	Postgres  12-05-2020 [BC]                                  (05-12-2020 DMY)
//	          Sat Dec 05 13:04:05[.123456] 2020 [CET|+01[:00]] [BC]  (Sat 05 Dec ... DMY)
func splitTime(s string, order byte) (timeText, bool) {
	var t timeText
	bc := false
	if rest, ok := strings.CutSuffix(s, " BC"); ok {
		s, bc = rest, true
	}
	f := strings.Split(s, " ")
	var ok bool
	if len(f[0]) == 3 && isLetters(f[0]) {
		ok = t.postgresStyle(f)
	} else {
		ok = t.numericDate(f[0], order)
		if ok && len(f) > 1 {
			ok = t.clockAndZone(f[1:])
		}
	}
	if !ok || t.year < 1 || t.year > 9_999_999 { // Postgres writes years up to 5874897
		return t, false
	}
	if bc {
		t.year = 1 - t.year
	}
	if t.month < 1 || t.month > 12 || t.day < 1 || t.day > daysIn(t.year, t.month) {
		return t, false
	}
	// The Postgres style names the day of the week: it must be the date's.
	if t.dow != "" && t.dow != dayNames[floorMod(civilDay(t.year, t.month, t.day)+4, 7)] {
		return t, false
	}
	return t, true
}

// numericDate reads the date of the ISO, SQL, German and Postgres (date
// only) styles.
func (t *timeText) numericDate(d string, order byte) bool {
	var p []string
	var sep byte
	for _, c := range []byte{'-', '/', '.'} {
		if strings.IndexByte(d, c) > 0 {
			p, sep = strings.Split(d, string(c)), c
			break
		}
	}
	if len(p) != 3 {
		return false
	}
	iso := sep == '-' && len(p[0]) >= 4 // year, month, day already
	dayFirst := sep == '.' || order == 'D'
	switch {
	case iso:
	case len(p[0]) != 2 || len(p[1]) != 2 || len(p[2]) < 4:
		return false
	case sep == '.' || order != 0:
		if dayFirst {
			p[0], p[1] = p[1], p[0]
		}
		p[0], p[1], p[2] = p[2], p[0], p[1] // year, month, day
	default:
		return false // SQL or Postgres style, and which comes first unknown
	}
	if len(p[1]) != 2 || len(p[2]) != 2 || len(p[0]) < 4 {
		return false
	}
	y, ok1 := digits(p[0])
	m, ok2 := digits(p[1])
	dd, ok3 := digits(p[2])
	t.year, t.month, t.day = y, int(m), int(dd)
	return ok1 && ok2 && ok3
}

// clockAndZone reads "13:04:05[.123456]" and what follows it: in ISO an
// offset written onto the time, in the other styles a zone of its own.
func (t *timeText) clockAndZone(f []string) bool {
	c := f[0]
	if i := strings.IndexAny(c, "+-"); i >= 0 {
		if len(f) != 1 {
			return false
		}
		c, t.zone, t.numericZone = c[:i], c[i:], true
	} else if len(f) == 2 {
		t.zone = f[1]
		t.numericZone = f[1] != "" && (f[1][0] == '+' || f[1][0] == '-')
		if !t.numericZone && !isLetters(t.zone) {
			return false
		}
	} else if len(f) != 1 {
		return false
	}
	return t.readClock(c)
}

// postgresStyle reads "Sat Dec 05 13:04:05[.123456] 2020 [zone]" (or
// "Sat 05 Dec ...", DMY), checking the day of the week.
func (t *timeText) postgresStyle(f []string) bool {
	if len(f) != 5 && len(f) != 6 {
		return false
	}
	mon, dd := f[1], f[2]
	if isLetters(dd) {
		mon, dd = dd, mon
	}
	t.month = 0
	for i, n := range monthNames {
		if mon == n {
			t.month = i + 1
		}
	}
	d, ok1 := digits(dd)
	y, ok2 := digits(f[4])
	if !ok1 || !ok2 || len(dd) != 2 || len(f[4]) < 4 || !t.readClock(f[3]) {
		return false
	}
	t.year, t.day = y, int(d)
	if len(f) == 6 {
		t.zone = f[5]
		t.numericZone = f[5] != "" && (f[5][0] == '+' || f[5][0] == '-')
		if !t.numericZone && !isLetters(t.zone) {
			return false
		}
	}
	t.dow = f[0]
	return t.month != 0
}

// readClock reads HH:MM:SS[.ffffff] into t.usec.
func (t *timeText) readClock(c string) bool {
	sec, frac, _ := strings.Cut(c, ".")
	p := strings.Split(sec, ":")
	if len(p) != 3 || len(p[0]) != 2 || len(p[1]) != 2 || len(p[2]) != 2 || len(frac) > 6 || strings.Contains(c, ".") && frac == "" {
		return false
	}
	h, ok1 := digits(p[0])
	m, ok2 := digits(p[1])
	s, ok3 := digits(p[2])
	if !ok1 || !ok2 || !ok3 || h > 24 || m > 59 || s > 60 {
		return false
	}
	us := int64(0)
	if frac != "" {
		f, ok := digits(frac)
		if !ok {
			return false
		}
		us = f
		for i := len(frac); i < 6; i++ {
			us *= 10
		}
	}
	t.clock = true
	t.usec = ((h*60+m)*60+s)*1_000_000 + us
	return true
}

// zoneOffset reads +HH, +HH:MM, +HH:MM:SS or +HHMM as seconds east of UTC.
func zoneOffset(z string) (int64, bool) {
	if len(z) < 3 || z[0] != '+' && z[0] != '-' {
		return 0, false
	}
	var p []string
	if strings.Contains(z, ":") {
		p = strings.Split(z[1:], ":")
	} else {
		for r := z[1:]; r != ""; r = r[min(2, len(r)):] {
			p = append(p, r[:min(2, len(r))])
		}
	}
	if len(p) > 3 {
		return 0, false
	}
	off := int64(0)
	for i := 0; i < 3; i++ {
		off *= 60
		if i < len(p) {
			v, ok := digits(p[i])
			if !ok || len(p[i]) != 2 {
				return 0, false
			}
			off += v
		}
	}
	if z[0] == '-' {
		off = -off
	}
	return off, true
}

// abbrevOffset is the offset (seconds east of UTC) of the one instant
// whose local time in loc is k and whose zone there is abbreviated abbr;
// false when none or more than one is.
func abbrevOffset(k timeKey, abbr string, loc *time.Location) (int64, bool) {
	local := k.day*86400 + floorDiv(k.usec, 1_000_000) // civilDay counts from 1970-01-01
	// The offsets the zone uses around that time (a zone changes its
	// offset at most a few times a year).
	var offs []int64
	for _, h := range []int64{0, -1, 1, -3, 3, -6, 6, -12, 12, -26, 26} {
		_, o := time.Unix(local+h*3600, 0).In(loc).Zone()
		if !slices.Contains(offs, int64(o)) {
			offs = append(offs, int64(o))
		}
	}
	found, n := int64(0), 0
	for _, o := range offs {
		name, got := time.Unix(local-o, 0).In(loc).Zone()
		if int64(got) == o && name == abbr {
			found, n = o, n+1
		}
	}
	return found, n == 1
}

func daysIn(y int64, m int) int {
	switch m {
	case 2:
		if y%4 == 0 && (y%100 != 0 || y%400 == 0) {
			return 29
		}
		return 28
	case 4, 6, 9, 11:
		return 30
	}
	return 31
}

// digits reads a run of ASCII digits that fits an int64 (at most 18).
func digits(s string) (int64, bool) {
	if s == "" || len(s) > 18 {
		return 0, false
	}
	n := int64(0)
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, false
		}
		n = n*10 + int64(s[i]-'0')
	}
	return n, true
}

func isLetters(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i] | 0x20
		if c < 'a' || c > 'z' {
			return false
		}
	}
	return true
}
