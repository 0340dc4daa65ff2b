package route

import (
	"fmt"
	"strings"

	pg "github.com/pganalyze/pg_query_go/v6"
)

// COPY (query) TO STDOUT of a key-less query whose rows need merging
// across shards (ORDER BY, LIMIT, DISTINCT, aggregates): every shard
// runs the query as a read (Merge.SQL), the engine merges the rows as
// for the SELECT and writes them as the COPY's output itself
// (CopyOut.Rows), in the format and with the options the COPY names —
// the ones Postgres's COPY TO takes that change the bytes written.
// What it cannot write exactly (ENCODING, options of COPY FROM, an
// option Postgres would reject) is refused with the reason.

// CopyFormat is a COPY output's format.
type CopyFormat uint8

const (
	CopyText CopyFormat = iota
	CopyCSV
	CopyBinary
)

func (f CopyFormat) String() string {
	return [...]string{"text", "csv", "binary"}[f]
}

// copyRowsOptions reads a COPY TO's options into co for the engine to
// write its rows; a non-empty result says why it cannot.
func copyRowsOptions(co *CopyOut, opts []*pg.Node) string {
	co.Format, co.Delim, co.Null, co.Quote, co.Escape = CopyText, '\t', `\N`, '"', '"'
	var delim, null, quote, escape *string
	seen := map[string]bool{}
	for _, o := range opts {
		d := o.GetDefElem()
		if d == nil {
			return "an option it does not know"
		}
		if seen[d.Defname] {
			return "conflicting or redundant options"
		}
		seen[d.Defname] = true
		s := ""
		if v := d.Arg.GetString_(); v != nil {
			s = v.Sval
		}
		switch d.Defname {
		case "format":
			switch strings.ToLower(s) {
			case "text":
			case "csv":
				co.Format = CopyCSV
			case "binary":
				co.Format = CopyBinary
			default:
				return fmt.Sprintf("COPY format %q not recognized", s)
			}
		case "header":
			if strings.EqualFold(s, "match") {
				return `cannot use "match" with HEADER in COPY TO`
			}
		case "delimiter":
			delim = &s
		case "null":
			null = &s
		case "quote":
			quote = &s
		case "escape":
			escape = &s
		case "force_quote":
			if d.Arg.GetAStar() != nil {
				co.ForceQuoteAll = true
				break
			}
			for _, n := range d.Arg.GetList().GetItems() {
				co.ForceQuote = append(co.ForceQuote, n.GetString_().GetSval())
			}
		default:
			return fmt.Sprintf("the option %s (pgshard writes the merged rows itself: FORMAT, DELIMITER, NULL, HEADER, QUOTE, ESCAPE and FORCE_QUOTE)", strings.ToUpper(d.Defname))
		}
	}
	return co.check(delim, null, quote, escape, seen)
}

// check applies the options given over the format's defaults, with the
// checks Postgres makes of them.
func (co *CopyOut) check(delim, null, quote, escape *string, seen map[string]bool) string {
	csv := co.Format == CopyCSV
	if co.Format == CopyBinary {
		for _, o := range []string{"delimiter", "null", "header"} {
			if seen[o] {
				return fmt.Sprintf("cannot specify %s in BINARY mode", strings.ToUpper(o))
			}
		}
	}
	if csv {
		co.Delim, co.Null = ',', ""
	}
	for _, c := range []struct {
		name string
		v    *string
	}{{"quote", quote}, {"escape", escape}} {
		if c.v != nil && !csv {
			return "COPY " + c.name + " available only in CSV mode"
		}
		if c.v != nil && len(*c.v) != 1 {
			return "COPY " + c.name + " must be a single one-byte character"
		}
	}
	if (co.ForceQuoteAll || co.ForceQuote != nil) && !csv {
		return "COPY force quote available only in CSV mode"
	}
	if delim != nil {
		if len(*delim) != 1 {
			return "COPY delimiter must be a single one-byte character"
		}
		co.Delim = (*delim)[0]
	}
	if co.Delim == '\n' || co.Delim == '\r' {
		return "COPY delimiter cannot be newline or carriage return"
	}
	if null != nil {
		if strings.ContainsAny(*null, "\r\n") {
			return "COPY null representation cannot use newline or carriage return"
		}
		co.Null = *null
	}
	if !csv && strings.IndexByte(`\.abcdefghijklmnopqrstuvwxyz0123456789`, co.Delim) >= 0 {
		return fmt.Sprintf("COPY delimiter cannot be %q", string(co.Delim))
	}
	if quote != nil {
		co.Quote = (*quote)[0]
	}
	co.Escape = co.Quote
	if escape != nil {
		co.Escape = (*escape)[0]
	}
	switch {
	case csv && co.Delim == co.Quote:
		return "COPY delimiter and quote must be different"
	case co.Format != CopyBinary && strings.IndexByte(co.Null, co.Delim) >= 0:
		return "COPY delimiter must not appear in the NULL specification"
	case csv && strings.IndexByte(co.Null, co.Quote) >= 0:
		return "CSV quote character must not appear in the NULL specification"
	}
	return ""
}

// copyRows plans COPY (query) TO whose rows merge (mp, the query's
// merge; a, the COPY's analysis): the shards run the query, the engine
// writes the COPY. A query answered in two stages has its COPY planned
// apart (copyStagedOf), as Route finds the stages.
func copyRows(a *analyzer, co *CopyOut, mp *mergePlan) (*mergePlan, string) {
	m := &mp.merge
	if why := copyRowsOptions(co, a.copyOpts); why != "" {
		return nil, "COPY (query) TO, whose rows pgshard merges and writes itself: " + why
	}
	if m.SQL == "" && m.ShardSQL == nil {
		sql, err := deparse(a.copyQuery)
		if err != nil {
			return nil, "the per-shard statement could not be written: " + err.Error()
		}
		m.SQL = sql
		mp.litFanout = mp.litFanout || a.rd.lit != nil && a.rd.lit.inString(sql)
	}
	co.Rows = true
	m.CopyOut = co
	mp.desc += "; the merged rows written as one COPY in " + co.Format.String() + " format"
	return mp, ""
}

// copyStaged is a COPY (query) TO whose query may be answered in two
// stages: query is its text, co the COPY the engine writes of stage 2's
// rows (Rows set, the options read).
type copyStaged struct {
	query string
	co    *CopyOut
}

// copyStagedOf is the copyStaged of a COPY (query) TO analyzed by a, nil
// for any other statement or options pgshard cannot write itself.
func copyStagedOf(a *analyzer) *copyStaged {
	if a.copyQuery == nil {
		return nil
	}
	co := &CopyOut{Header: copyHeader(a.copyOpts), Rows: true}
	if copyRowsOptions(co, a.copyOpts) != "" {
		return nil
	}
	q, err := deparse(a.copyQuery)
	if err != nil {
		return nil
	}
	return &copyStaged{query: q, co: co}
}
