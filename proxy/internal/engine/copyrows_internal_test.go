package engine

import (
	"testing"

	"github.com/pgshard/pgshard/proxy/route"
)

// TestCopyEscaping: COPY's text escaping and CSV quoting as Postgres's
// COPY TO writes them (TestCopyOutMerged compares whole COPYs with one
// database; these are the rules one value at a time).
func TestCopyEscaping(t *testing.T) {
	text := []struct{ in, want string }{
		{"plain", "plain"},
		{"tab\there", `tab\there`},
		{"new\nline\r", `new\nline\r`},
		{`back\slash`, `back\\slash`},
		{"\b\f\v", `\b\f\v`},
		{"bell\x07", "bell\x07"},
		{"a|b", `a\|b`},
		{"ünï", "ünï"},
		{"", ""},
	}
	for _, c := range text {
		if got := string(appendCopyText(nil, []byte(c.in), '|')); got != c.want {
			t.Errorf("text %q: %q, want %q", c.in, got, c.want)
		}
	}
	co := &route.CopyOut{Format: route.CopyCSV, Delim: ',', Null: "", Quote: '"', Escape: '"'}
	csv := []struct {
		in           string
		force, alone bool
		want         string
	}{
		{"plain", false, false, "plain"},
		{"", false, false, `""`}, // the NULL string, quoted so that it is not NULL
		{`"quoted", with comma`, false, false, `"""quoted"", with comma"`},
		{"new\nline", false, false, "\"new\nline\""},
		{"cr\r", false, false, "\"cr\r\""},
		{"plain", true, false, `"plain"`},
		{`\.`, false, true, `"\."`},
		{`\.`, false, false, `\.`},
		{`back\slash`, false, false, `back\slash`},
	}
	for _, c := range csv {
		if got := string(appendCopyCSV(nil, []byte(c.in), co, c.force, c.alone)); got != c.want {
			t.Errorf("csv %q (force %v, one column %v): %q, want %q", c.in, c.force, c.alone, got, c.want)
		}
	}
	esc := &route.CopyOut{Format: route.CopyCSV, Delim: ';', Null: "NA", Quote: '\'', Escape: '\\'}
	for _, c := range []struct{ in, want string }{{"it's", `'it\'s'`}, {`a\b`, `a\b`}, {`a\b;`, `'a\\b;'`}, {"NA", "'NA'"}} {
		if got := string(appendCopyCSV(nil, []byte(c.in), esc, false, false)); got != c.want {
			t.Errorf("csv with QUOTE ' ESCAPE \\ %q: %q, want %q", c.in, got, c.want)
		}
	}
}

// TestClientOnlyEncodingNames: a client-only encoding is recognised under
// the names Postgres takes for it; UTF8 and LATIN1 are not one.
func TestClientOnlyEncodingNames(t *testing.T) {
	for name, want := range map[string]bool{"SJIS": true, "Shift_JIS": true, "shift-jis-2004": true, "WIN932": true, "Big5": true,
		"GBK": true, "CP949": true, "GB18030": true, "UTF8": false, "utf-8": false, "LATIN1": false, "EUC_JP": false} {
		if got := clientOnlyEncodings[encodingKey(name)]; got != want {
			t.Errorf("%s: client-only %v, want %v", name, got, want)
		}
	}
}
