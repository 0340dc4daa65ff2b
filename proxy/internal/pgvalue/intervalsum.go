package pgvalue

import (
	"encoding/binary"
	"math"
	"strconv"

	"github.com/pgshard/pgshard/proxy/internal/pgwire"
)

// Sums and averages of intervals, merged from the shards' partial sums
// (binary) and written as interval_out writes them in the shards'
// IntervalStyle. Postgres adds intervals field by field (interval_pl:
// months, days and microseconds apart, an overflow of any is an error),
// so partial sums add up exactly in any order; avg divides the sum by the
// count as interval_div does (fractions of a month cascade into days, of
// a day into microseconds).

// Interval is an interval's fields, as Postgres keeps them.
type Interval struct {
	Months, Days int32
	Usec         int64
}

// DecodeInterval reads an interval's binary value.
func DecodeInterval(v []byte) (Interval, bool) {
	if len(v) != 16 {
		return Interval{}, false
	}
	return Interval{Usec: int64(binary.BigEndian.Uint64(v)), Days: int32(binary.BigEndian.Uint32(v[8:])), Months: int32(binary.BigEndian.Uint32(v[12:]))}, true
}

// errIntervalRange is interval_pl's error.
var errIntervalRange = &pgwire.Error{Code: "22008", Message: "interval out of range"}

// Add is a + b as interval_pl computes it.
func (a Interval) Add(b Interval) (Interval, *pgwire.Error) {
	m := a.Months + b.Months
	d := a.Days + b.Days
	u := a.Usec + b.Usec
	if (a.Months < 0) == (b.Months < 0) && (m < 0) != (a.Months < 0) ||
		(a.Days < 0) == (b.Days < 0) && (d < 0) != (a.Days < 0) ||
		(a.Usec < 0) == (b.Usec < 0) && (u < 0) != (a.Usec < 0) {
		return Interval{}, errIntervalRange
	}
	return Interval{Months: m, Days: d, Usec: u}, nil
}

// Div is a / n as interval_div computes it (n as a float8), the average
// of n intervals summing to a.
func (a Interval) Div(n int64) Interval {
	const daysPerMonth, secsPerDay = 30, 86400
	tsround := func(x float64) float64 { return math.RoundToEven(x*1e6) / 1e6 }
	factor := float64(n)
	r := Interval{Months: int32(float64(a.Months) / factor), Days: int32(float64(a.Days) / factor)}
	monthDays := tsround((float64(a.Months)/factor - float64(r.Months)) * daysPerMonth)
	secRem := tsround((float64(a.Days)/factor - float64(r.Days) + monthDays - float64(int32(monthDays))) * secsPerDay)
	if math.Abs(secRem) >= secsPerDay {
		r.Days += int32(secRem / secsPerDay)
		secRem -= float64(int32(secRem/secsPerDay)) * secsPerDay
	}
	r.Days += int32(monthDays)
	r.Usec = int64(math.RoundToEven(float64(a.Usec)/factor + secRem*1e6))
	return r
}

// AppendInterval writes iv in format (1 binary) or as text in
// IntervalStyle style (postgres, postgres_verbose, sql_standard,
// iso_8601); false for a style it does not know.
func AppendInterval(dst []byte, iv Interval, format int16, style string) ([]byte, bool) {
	if format == 1 {
		dst = binary.BigEndian.AppendUint64(dst, uint64(iv.Usec))
		dst = binary.BigEndian.AppendUint32(dst, uint32(iv.Days))
		return binary.BigEndian.AppendUint32(dst, uint32(iv.Months)), true
	}
	// interval2itm: C's division truncates toward zero, as Go's does.
	f := ivFields{year: int64(iv.Months / 12), mon: int64(iv.Months % 12), day: int64(iv.Days)}
	t := iv.Usec
	f.hour = t / 3_600_000_000
	t -= f.hour * 3_600_000_000
	f.min = t / 60_000_000
	t -= f.min * 60_000_000
	f.sec = t / 1_000_000
	f.usec = t - f.sec*1_000_000
	switch style {
	case "postgres":
		return f.postgres(dst), true
	case "postgres_verbose":
		return f.verbose(dst), true
	case "sql_standard":
		return f.sqlStandard(dst), true
	case "iso_8601":
		return f.iso8601(dst), true
	}
	return dst, false
}

// ivFields are an interval's fields as interval_out writes them, each
// signed.
type ivFields struct{ year, mon, day, hour, min, sec, usec int64 }

func (f ivFields) timeNonZero() bool { return f.hour != 0 || f.min != 0 || f.sec != 0 || f.usec != 0 }

func (f ivFields) timeNegative() bool { return f.hour < 0 || f.min < 0 || f.sec < 0 || f.usec < 0 }

// appendSeconds writes |sec| (two digits if pad) and |usec| as a fraction
// without trailing zeros.
func appendSeconds(dst []byte, sec, usec int64, pad bool) []byte {
	sec, usec = abs64(sec), abs64(usec)
	if pad && sec < 10 {
		dst = append(dst, '0')
	}
	dst = strconv.AppendInt(dst, sec, 10)
	if usec == 0 {
		return dst
	}
	var frac [6]byte
	for i := 5; i >= 0; i-- {
		frac[i] = byte('0' + usec%10)
		usec /= 10
	}
	n := 6
	for n > 0 && frac[n-1] == '0' {
		n--
	}
	return append(append(dst, '.'), frac[:n]...)
}

func appendPad2(dst []byte, v int64) []byte {
	if v < 10 {
		dst = append(dst, '0')
	}
	return strconv.AppendInt(dst, v, 10)
}

// postgres: "1 year -2 mons +3 days -04:05:06.5"; a field after a
// negative one is written with its sign; "00:00:00" for zero.
func (f ivFields) postgres(dst []byte) []byte {
	isZero, isBefore := true, false
	part := func(v int64, unit string) {
		if v == 0 {
			return
		}
		if !isZero {
			dst = append(dst, ' ')
		}
		if isBefore && v > 0 {
			dst = append(dst, '+')
		}
		dst = strconv.AppendInt(dst, v, 10)
		dst = append(append(dst, ' '), unit...)
		if v != 1 {
			dst = append(dst, 's')
		}
		isBefore, isZero = v < 0, false
	}
	part(f.year, "year")
	part(f.mon, "mon")
	part(f.day, "day")
	if isZero || f.timeNonZero() {
		if !isZero {
			dst = append(dst, ' ')
		}
		if f.timeNegative() {
			dst = append(dst, '-')
		} else if isBefore {
			dst = append(dst, '+')
		}
		dst = appendPad2(dst, abs64(f.hour))
		dst = appendPad2(append(dst, ':'), abs64(f.min))
		dst = appendSeconds(append(dst, ':'), f.sec, f.usec, true)
	}
	return dst
}

// verbose: "@ 1 year 2 mons 3 days 4 hours 5 mins 6.5 secs ago"; the
// first nonzero field's sign is the "ago", the others are written
// relative to it.
func (f ivFields) verbose(dst []byte) []byte {
	dst = append(dst, '@')
	isZero, isBefore := true, false
	part := func(v int64, unit string) {
		if v == 0 {
			return
		}
		if isZero {
			isBefore = v < 0
			v = abs64(v)
		} else if isBefore {
			v = -v
		}
		dst = strconv.AppendInt(append(dst, ' '), v, 10)
		dst = append(append(dst, ' '), unit...)
		if v != 1 {
			dst = append(dst, 's')
		}
		isZero = false
	}
	part(f.year, "year")
	part(f.mon, "mon")
	part(f.day, "day")
	part(f.hour, "hour")
	part(f.min, "min")
	if f.sec != 0 || f.usec != 0 {
		dst = append(dst, ' ')
		if f.sec < 0 || f.sec == 0 && f.usec < 0 {
			if isZero {
				isBefore = true
			} else if !isBefore {
				dst = append(dst, '-')
			}
		} else if isBefore {
			dst = append(dst, '-')
		}
		dst = appendSeconds(dst, f.sec, f.usec, false)
		dst = append(dst, " sec"...)
		if abs64(f.sec) != 1 || f.usec != 0 {
			dst = append(dst, 's')
		}
		isZero = false
	}
	if isZero {
		dst = append(dst, " 0"...)
	}
	if isBefore {
		dst = append(dst, " ago"...)
	}
	return dst
}

// sqlStandard: "1-2", "3 4:05:06", "-4:05:06" (one sign for all), or
// "+1-2 -3 +4:05:06" (mixed signs, or both a year-month and a day-time
// part); "0" for zero.
func (f ivFields) sqlStandard(dst []byte) []byte {
	neg := f.year < 0 || f.mon < 0 || f.day < 0 || f.timeNegative()
	pos := f.year > 0 || f.mon > 0 || f.day > 0 || f.hour > 0 || f.min > 0 || f.sec > 0 || f.usec > 0
	yearMonth := f.year != 0 || f.mon != 0
	dayTime := f.day != 0 || f.timeNonZero()
	standard := !(neg && pos) && !(yearMonth && dayTime)
	if neg && standard {
		dst = append(dst, '-')
		f = ivFields{-f.year, -f.mon, -f.day, -f.hour, -f.min, -f.sec, -f.usec}
	}
	clock := func() {
		dst = strconv.AppendInt(dst, abs64(f.hour), 10)
		dst = appendPad2(append(dst, ':'), abs64(f.min))
		dst = appendSeconds(append(dst, ':'), f.sec, f.usec, true)
	}
	sign := func(neg bool) {
		if neg {
			dst = append(dst, '-')
		} else {
			dst = append(dst, '+')
		}
	}
	switch {
	case !neg && !pos:
		dst = append(dst, '0')
	case !standard:
		sign(f.year < 0 || f.mon < 0)
		dst = strconv.AppendInt(dst, abs64(f.year), 10)
		dst = strconv.AppendInt(append(dst, '-'), abs64(f.mon), 10)
		dst = append(dst, ' ')
		sign(f.day < 0)
		dst = strconv.AppendInt(dst, abs64(f.day), 10)
		dst = append(dst, ' ')
		sign(f.timeNegative())
		clock()
	case yearMonth:
		dst = strconv.AppendInt(dst, f.year, 10)
		dst = strconv.AppendInt(append(dst, '-'), f.mon, 10)
	case f.day != 0:
		dst = strconv.AppendInt(dst, f.day, 10)
		dst = append(dst, ' ')
		clock()
	default:
		clock()
	}
	return dst
}

// iso8601: "P1Y2M3DT4H5M6.5S", each field signed; "PT0S" for zero.
func (f ivFields) iso8601(dst []byte) []byte {
	if f.year == 0 && f.mon == 0 && f.day == 0 && !f.timeNonZero() {
		return append(dst, "PT0S"...)
	}
	dst = append(dst, 'P')
	part := func(v int64, unit byte) {
		if v != 0 {
			dst = append(strconv.AppendInt(dst, v, 10), unit)
		}
	}
	part(f.year, 'Y')
	part(f.mon, 'M')
	part(f.day, 'D')
	if f.timeNonZero() {
		dst = append(dst, 'T')
	}
	part(f.hour, 'H')
	part(f.min, 'M')
	if f.sec != 0 || f.usec != 0 {
		if f.sec < 0 || f.usec < 0 {
			dst = append(dst, '-')
		}
		dst = append(appendSeconds(dst, f.sec, f.usec, false), 'S')
	}
	return dst
}
