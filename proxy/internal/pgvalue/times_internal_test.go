package pgvalue

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
)

// TestTimeOrderAgainstPostgres has a live server write dates,
// timestamps and timestamptz values in every DateStyle and in time zones
// with daylight saving (an hour repeated each autumn), half-hour and
// negative saving, seconds-precise local mean time, BC years and years
// past 9999, and checks CompareValues against the server's own order:
// every neighbour in that order and random pairs. With the session's
// style known, only an abbreviation that names two instants may go
// unordered; with nothing known (a transaction that may have SET LOCAL
// DateStyle) a value may go unordered but is never misordered.
func TestTimeOrderAgainstPostgres(t *testing.T) {
	ctx, conn := serverConn(t, 3*time.Minute)
	exec := func(sql string) {
		t.Helper()
		if _, err := conn.Exec(ctx, sql).ReadAll(); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	zonesTried := []string{"UTC", "America/New_York", "Europe/Moscow", "Asia/Kathmandu", "Australia/Lord_Howe",
		"Europe/Dublin", "America/St_Johns", "Pacific/Chatham", "Antarctica/Troll", "Europe/Berlin"}
	rng := rand.New(rand.NewPCG(11, 12))
	instants := timeSamples(t, rng, zonesTried)

	styles := []string{"ISO, MDY", "ISO, DMY", "SQL, MDY", "SQL, DMY", "SQL, YMD", "German, DMY",
		"Postgres, MDY", "Postgres, DMY", "Postgres, YMD"}
	types := []struct {
		oid  uint32
		name string
	}{{pgtype.DateOID, "date"}, {pgtype.TimestampOID, "timestamp"}, {pgtype.TimestamptzOID, "timestamptz"}}
	var compared, unorderedKnown, unorderedUnknown int
	for _, zone := range zonesTried {
		exec("SET TimeZone = '" + zone + "'")
		for _, ds := range styles {
			exec("SET DateStyle = '" + ds + "'")
			known := NewTimeStyle(ds, zone)
			if known.Zone == nil {
				t.Fatalf("time zone %s: not in this machine's time zone database", zone)
			}
			for _, ty := range types {
				texts, ranks := pgOrder(ctx, t, conn, instants, ty.name)
				f := Field{Name: "v", OID: ty.oid}
				check := func(i, j int) {
					compared++
					want := cmpInt(int64(ranks[i]), int64(ranks[j]))
					for _, ts := range []*TimeStyle{&known, {}} {
						got, e := CompareValues([]byte(texts[i]), []byte(texts[j]), &f, false, ts)
						switch {
						case e != nil && ts == &known:
							unorderedKnown++
							if ty.oid != pgtype.TimestamptzOID || isNumericZoneText(texts[i]) && isNumericZoneText(texts[j]) {
								t.Errorf("%s %s %s: %q vs %q not ordered: %s", zone, ds, ty.name, texts[i], texts[j], e.Message)
							}
						case e != nil:
							unorderedUnknown++
							if strings.HasPrefix(ds, "ISO") || strings.HasPrefix(ds, "German") && ty.oid != pgtype.TimestamptzOID {
								t.Errorf("%s %s %s: %q vs %q not ordered without a style: %s", zone, ds, ty.name, texts[i], texts[j], e.Message)
							}
						case got != want:
							t.Fatalf("%s %s %s: %q vs %q: got %d, Postgres %d (style known: %v)", zone, ds, ty.name, texts[i], texts[j], got, want, ts == &known)
						}
					}
				}
				for i := 1; i < len(texts); i++ {
					check(i-1, i)
					check(i, i-1)
				}
				for k := 0; k < 300; k++ {
					check(rng.IntN(len(texts)), rng.IntN(len(texts)))
				}
			}
		}
	}
	// Ambiguous abbreviations are rare (Moscow's MSK named both sides of
	// 2014's shift back): a handful of values, never a style.
	if unorderedKnown*200 > compared {
		t.Errorf("%d of %d comparisons unordered with the style known", unorderedKnown, compared)
	}
	t.Logf("%d comparisons; unordered: %d with the style known, %d without", compared, unorderedKnown, unorderedUnknown)
}

// isNumericZoneText reports whether a timestamptz text's zone is an
// offset (which needs no time zone to read).
func isNumericZoneText(s string) bool {
	s = strings.TrimSuffix(s, " BC")
	if i := strings.LastIndexAny(s, "+-"); i > 10 {
		return true
	}
	return false
}

// pgOrder has the server write each instant as typ (cast from its UTC
// text) in the session's style, and rank them in its own order.
func pgOrder(ctx context.Context, t *testing.T, conn *pgconn.PgConn, instants []string, typ string) ([]string, []int) {
	t.Helper()
	arr := "{" + strings.Join(instants, ",") + "}"
	cast := "v::" + typ
	if typ != "timestamptz" {
		cast = "(v::timestamptz AT TIME ZONE 'UTC')::" + typ // the UTC fields, whatever the session's zone
	}
	sql := fmt.Sprintf(`SELECT x::text, dense_rank() OVER (ORDER BY x)::text FROM (SELECT DISTINCT %s AS x FROM unnest($1::text[]) v) s ORDER BY 2`, cast)
	r := conn.ExecParams(ctx, sql, [][]byte{[]byte(arr)}, nil, nil, nil).Read()
	if r.Err != nil {
		t.Fatalf("%s: %v", typ, r.Err)
	}
	texts := make([]string, len(r.Rows))
	ranks := make([]int, len(r.Rows))
	for i, row := range r.Rows {
		texts[i] = string(row[0])
		fmt.Sscan(string(row[1]), &ranks[i])
	}
	return texts, ranks
}

// timeSamples are instants written as ISO UTC texts ('+00', ' BC'):
// random ones from 4713 BC to 200000 AD, infinities, and, in each zone,
// every quarter hour around changes of its offset (the repeated hour,
// local mean time's end).
func timeSamples(t *testing.T, rng *rand.Rand, zones []string) []string {
	t.Helper()
	iso := func(u time.Time) string {
		u = u.UTC()
		y := u.Year()
		bc := ""
		if y <= 0 {
			y, bc = 1-y, " BC"
		}
		return fmt.Sprintf(`"%04d-%02d-%02d %02d:%02d:%02d.%06d+00%s"`, y, u.Month(), u.Day(), u.Hour(), u.Minute(), u.Second(), u.Nanosecond()/1000, bc)
	}
	out := []string{`"infinity"`, `"-infinity"`}
	// one second apart only in its fraction, AD and BC
	for _, frac := range []int64{0, 9, 10, 99, 100, 999_999, 900_000, 899_999, 100_000, 90_000, 9_999, 500_000} {
		out = append(out, iso(time.Date(2024, 3, 5, 10, 11, 12, int(frac)*1000, time.UTC)), iso(time.Date(-43, 3, 15, 10, 11, 12, int(frac)*1000, time.UTC)))
	}
	lo := time.Date(-4712, 1, 2, 0, 0, 0, 0, time.UTC).Unix()
	hi := time.Date(200000, 1, 1, 0, 0, 0, 0, time.UTC).Unix()
	for i := 0; i < 250; i++ {
		var sec int64
		switch rng.IntN(4) {
		case 0:
			sec = lo + rng.Int64N(hi-lo)
		case 1:
			sec = lo + rng.Int64N(time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC).Unix()-lo) // BC
		default:
			sec = time.Date(1850, 1, 1, 0, 0, 0, 0, time.UTC).Unix() + rng.Int64N(250*365*86400)
		}
		out = append(out, iso(time.Unix(sec, rng.Int64N(1e9))))
	}
	for _, z := range zones {
		loc, err := time.LoadLocation(z)
		if err != nil {
			t.Fatal(err)
		}
		// the first changes from 1890 (local mean time's end, the first
		// saving times) and every change of 2008 to 2016 (Moscow's
		// MSK on both sides of 2014's shift back among them)
		for _, w := range [][2]int{{1890, 1990}, {2008, 2016}} {
			n := 0
			for at := time.Date(w[0], 1, 1, 0, 0, 0, 0, time.UTC); at.Year() < w[1] && n < 10; at = at.Add(7 * 24 * time.Hour) {
				_, o1 := at.In(loc).Zone()
				_, o2 := at.Add(7 * 24 * time.Hour).In(loc).Zone()
				if o1 == o2 {
					continue
				}
				ch := at // the change lies in this week: its hour, ±2h around it
				for ; ; ch = ch.Add(time.Hour) {
					if _, o := ch.In(loc).Zone(); o != o1 {
						break
					}
				}
				for q := -8; q <= 8; q++ {
					out = append(out, iso(ch.Add(time.Duration(q)*15*time.Minute)))
				}
				n++
			}
		}
	}
	return out
}

// TestSplitTime pins the readings of each style (golden texts as
// Postgres 15 writes them) and the refusals.
func TestSplitTime(t *testing.T) {
	ny, err := time.LoadLocation("America/New_York")
	if err != nil {
		t.Skip("no time zone database:", err)
	}
	msk, _ := time.LoadLocation("Europe/Moscow")
	mdy := &TimeStyle{Order: 'M', Zone: ny}
	dmy := &TimeStyle{Order: 'D', Zone: ny}
	for _, c := range []struct {
		a, b string
		tz   bool
		ts   *TimeStyle
		want int // -1, 0, 1; 2 = refused
	}{
		{"2020-12-05", "2020-12-06", false, nil, -1},
		{"10000-01-01", "9999-12-31", false, nil, 1},
		{"0044-03-15 BC", "0001-01-01", false, nil, -1},
		{"0002-01-01 BC", "0001-12-31 BC", false, nil, -1},
		{"12/05/2020", "11/06/2020", false, mdy, 1},
		{"12/05/2020", "11/06/2020", false, dmy, -1},
		{"12/05/2020", "11/06/2020", false, &TimeStyle{}, 2},
		{"05.12.2020", "06.11.2020", false, nil, 1},
		{"12-05-2020", "11-06-2020", false, mdy, 1},
		{"Sat Dec 05 13:04:05.5 2020", "Sat 05 Dec 13:04:05.25 2020", false, nil, 1},
		{"Fri Dec 05 13:04:05 2020", "Sat Dec 05 13:04:05 2020", false, nil, 2}, // wrong day of the week
		{"2020-11-01 01:30:00-04", "2020-11-01 01:10:00-05", true, nil, -1},
		{"11/01/2020 01:30:00 EDT", "11/01/2020 01:10:00 EST", true, mdy, -1},
		{"11/01/2020 01:30:00 EDT", "11/01/2020 01:10:00 EST", true, &TimeStyle{Order: 'M'}, 2},
		{"01.11.2020 01:30:00 EDT", "01.11.2020 01:10:00 EST", true, &TimeStyle{Zone: ny}, -1},
		{"01.11.2020 01:30:00 XST", "01.11.2020 01:10:00 EST", true, mdy, 2},
		{"Sun Nov 01 01:30:00 2020 EDT", "Sun Nov 01 01:10:00 2020 -05", true, mdy, -1},
		{"01.11.2020 01:30:00 +0545", "01.11.2020 01:30:00 +05:45", true, nil, 0},
		// Moscow went back from +04 to +03 on 2014-10-26 02:00, both MSK:
		// 01:30 MSK happened twice.
		{"26.10.2014 01:30:00 MSK", "26.10.2014 00:30:00 MSK", true, &TimeStyle{Zone: msk}, 2},
		{"26.10.2014 03:30:00 MSK", "26.10.2014 00:30:00 MSK", true, &TimeStyle{Zone: msk}, 1},
		{"infinity", "2020-01-01", false, nil, 1},
		{"-infinity", "0044-03-15 BC", false, nil, -1},
		{"2020-02-30 10:00:00+00", "2020-01-01 10:00:00+00", true, nil, 2},
		{"2020-01-01 10:00:00", "2020-01-01", true, nil, 2},
	} {
		f := Field{Name: "v", OID: pgtype.DateOID}
		switch {
		case c.tz:
			f.OID = pgtype.TimestamptzOID
		case strings.Contains(c.a, ":"):
			f.OID = pgtype.TimestampOID
		}
		got, e := CompareValues([]byte(c.a), []byte(c.b), &f, false, c.ts)
		if e != nil {
			got = 2
		}
		if got != c.want {
			t.Errorf("%q vs %q: got %d, want %d", c.a, c.b, got, c.want)
		}
	}
}

// TestIntervalAndClockOrderAgainstPostgres has a live server write
// intervals in each IntervalStyle, in text and binary — mixed signs,
// spans equal in different units ('1 mon' and '30 days'), fractions of a
// second, years past the thousands — and times and times with time zone
// (offsets to the second), and checks CompareValues against the
// server's order: every neighbour and random pairs, none unordered.
func TestIntervalAndClockOrderAgainstPostgres(t *testing.T) {
	ctx, conn := serverConn(t, 3*time.Minute)
	rng := rand.New(rand.NewPCG(21, 22))
	var ivs, clocks []string
	for i := 0; i < 400; i++ {
		m := int64(rng.IntN(61) - 30)
		d := int64(rng.IntN(121) - 60)
		us := rng.Int64N(200*86400*1_000_000) - 100*86400*1_000_000
		switch rng.IntN(6) {
		case 0: // a span written in other units: '1 mon' = '30 days' = '720 hours'
			m, d, us = int64(rng.IntN(5)), int64(rng.IntN(5)*30), int64(rng.IntN(5))*86400*1_000_000
		case 1:
			us = int64(rng.IntN(7)-3) * 1_000_000 / int64(1+rng.IntN(9))
		case 2:
			m = rng.Int64N(2_000_000_000) - 1_000_000_000
			us = rng.Int64N(1<<62) - 1<<61
		case 3:
			m, d = 0, 0
		}
		ivs = append(ivs, fmt.Sprintf(`"%d mons %d days %d microseconds"`, m, d, us))
		h, mi, s := rng.IntN(24), rng.IntN(60), rng.IntN(60)
		frac := ""
		if rng.IntN(2) == 0 {
			frac = fmt.Sprintf(".%d", rng.IntN(1_000_000))
		}
		off := []string{"+00", "-05", "+05:30", "+05:53:28", "-00:30", "+14", "-12", "+01"}[rng.IntN(8)]
		clocks = append(clocks, fmt.Sprintf(`"%02d:%02d:%02d%s%s"`, h, mi, s, frac, off))
	}
	ivs = append(ivs, `"0"`, `"-1 mons"`, `"30 days"`, `"1 mon"`, `"-720 hours"`, `"00:00:00.000001"`, `"-00:00:00.000001"`)
	clocks = append(clocks, `"24:00:00+00"`, `"00:00:00+00"`, `"00:00:00-14"`, `"23:59:59.999999+14"`,
		`"10:00:00+02"`, `"08:00:00+00"`, `"13:30:00+05:30"`, `"03:00:00-05"`) // one UTC time, four zones
	rank := func(sql string, arr []string, format int16) ([][]byte, []int) {
		t.Helper()
		r := conn.ExecParams(ctx, sql, [][]byte{[]byte("{" + strings.Join(arr, ",") + "}")}, nil, nil, []int16{format, 0}).Read()
		if r.Err != nil {
			t.Fatalf("%s: %v", sql, r.Err)
		}
		vals := make([][]byte, len(r.Rows))
		ranks := make([]int, len(r.Rows))
		for i, row := range r.Rows {
			vals[i] = row[0]
			fmt.Sscan(string(row[1]), &ranks[i])
		}
		return vals, ranks
	}
	check := func(what string, f Field, vals [][]byte, ranks []int) {
		t.Helper()
		pair := func(i, j int) {
			got, e := CompareValues(vals[i], vals[j], &f, false, nil)
			if e != nil {
				t.Fatalf("%s: %q vs %q not ordered: %s", what, vals[i], vals[j], e.Message)
			}
			if want := cmpInt(int64(ranks[i]), int64(ranks[j])); got != want {
				t.Fatalf("%s: %q vs %q: got %d, Postgres %d", what, vals[i], vals[j], got, want)
			}
		}
		for i := 1; i < len(vals); i++ {
			pair(i-1, i)
			pair(i, i-1)
		}
		for k := 0; k < 2000; k++ {
			pair(rng.IntN(len(vals)), rng.IntN(len(vals)))
		}
	}
	for _, style := range []string{"postgres", "postgres_verbose", "sql_standard", "iso_8601"} {
		if _, err := conn.Exec(ctx, "SET IntervalStyle = "+style).ReadAll(); err != nil {
			t.Fatal(err)
		}
		for _, format := range []int16{0, 1} {
			vals, ranks := rank(`SELECT x, dense_rank() OVER (ORDER BY x)::text FROM (SELECT DISTINCT v::interval AS x FROM unnest($1::text[]) v) s ORDER BY 2`, ivs, format)
			check(fmt.Sprintf("interval %s format %d", style, format), Field{OID: pgtype.IntervalOID, Format: format}, vals, ranks)
		}
	}
	for _, format := range []int16{0, 1} {
		vals, ranks := rank(`SELECT x, dense_rank() OVER (ORDER BY x)::text FROM (SELECT DISTINCT v::timetz AS x FROM unnest($1::text[]) v) s ORDER BY 2`, clocks, format)
		check(fmt.Sprintf("timetz format %d", format), Field{OID: pgtype.TimetzOID, Format: format}, vals, ranks)
		vals, ranks = rank(`SELECT x, dense_rank() OVER (ORDER BY x)::text FROM (SELECT DISTINCT v::timetz::time AS x FROM unnest($1::text[]) v) s ORDER BY 2`, clocks, format)
		check(fmt.Sprintf("time format %d", format), Field{OID: pgtype.TimeOID, Format: format}, vals, ranks)
	}
}
