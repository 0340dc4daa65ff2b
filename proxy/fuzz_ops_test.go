package proxy

import (
	"net/url"
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
		cmds := parseAdminQuery(sql)
		again := parseAdminQuery(stripComments(sql))
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

// FuzzRedactDSN: a DSN's password never survives RedactDSN, in URL or
// keyword=value form.
func FuzzRedactDSN(f *testing.F) {
	f.Add("s3cret-pw", "postgres", "db")
	f.Add("p@ss:w/rd?x=1", "u", "d b")
	f.Add("with space's", "app", "pgshard")
	f.Fuzz(func(t *testing.T, pw, user, db string) {
		if len(pw) < 6 || strings.ContainsAny(pw, "\x00") {
			return
		}
		u := url.URL{Scheme: "postgres", User: url.UserPassword(user, pw), Host: "127.0.0.1:5432", Path: "/" + db, RawQuery: "sslmode=disable"}
		kv := "host=127.0.0.1 port=5432 user=app password='" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(pw) + "' dbname=x"
		for _, dsn := range []string{u.String(), kv} {
			out := RedactDSN(dsn)
			rest := strings.ReplaceAll(out, redacted, "")
			// The password may also be spelled by the rest of the DSN
			// (a user or database of the same letters): not a leak.
			other := strings.ReplaceAll(strings.ReplaceAll(dsn, pw, ""), url.PathEscape(pw), "")
			if strings.Contains(rest, pw) && !strings.Contains(other, pw) {
				t.Fatalf("RedactDSN(%q) = %q keeps the password", dsn, out)
			}
			if esc := url.QueryEscape(pw); esc != pw && strings.Contains(rest, esc) && !strings.Contains(other, esc) {
				t.Fatalf("RedactDSN(%q) = %q keeps the escaped password", dsn, out)
			}
		}
	})
}
