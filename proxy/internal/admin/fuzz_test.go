package admin

import (
	"strings"
	"testing"
	"unicode"
)

// FuzzAdminQuery: any console query splits into commands without a panic;
// verbs are upper case, no word holds a separator or a blank, and comments
// are gone (stripping them again changes nothing).
func FuzzAdminQuery(f *testing.F) {
	for _, s := range []string{"SHOW POOLS", "show stats; SHOW LISTS;", "PAUSE shard0", "-- ping", "/* c */ RELOAD",
		"KILL shard1 -- now\nRESUME", "/* unterminated", "SHOW;;;", "wait_close\tshard0"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, sql string) {
		cmds := parseQuery(sql)
		again := parseQuery(stripComments(sql))
		if len(cmds) != len(again) {
			t.Fatalf("stripping comments twice changed the commands: %v vs %v", cmds, again)
		}
		for i, c := range cmds {
			if c.verb == "" || c.verb != strings.ToUpper(c.verb) {
				t.Fatalf("verb %q", c.verb)
			}
			for _, w := range append([]string{c.verb}, c.args...) {
				if w == "" || strings.ContainsRune(w, ';') || strings.IndexFunc(w, unicode.IsSpace) >= 0 {
					t.Fatalf("word %q in %q", w, sql)
				}
			}
			if c.text != again[i].text {
				t.Fatalf("%q vs %q", c.text, again[i].text)
			}
		}
	})
}
