package store_test

import (
	"net/url"
	"strings"
	"testing"

	"github.com/pgshard/pgshard/store"
)

// FuzzRedactDSN: RedactDSN puts the mask where a DSN's password was and
// changes nothing else, in URL or keyword=value form. The property is
// stated on the parsed result, not on substrings: a user or database
// spelled like the password (postgres://0:000000@h/000000) is not a leak,
// and a password that only looks like another part is still caught.
func FuzzRedactDSN(f *testing.F) {
	f.Add("s3cret-pw", "postgres", "db")
	f.Add("p@ss:w/rd?x=1", "u", "d b")
	f.Add("with space's", "app", "pgshard")
	f.Fuzz(func(t *testing.T, pw, user, db string) {
		if len(pw) < 6 || strings.ContainsAny(pw, "\x00") {
			return
		}
		u := url.URL{Scheme: "postgres", User: url.UserPassword(user, pw), Host: "127.0.0.1:5432", Path: "/" + db, RawQuery: "sslmode=disable"}
		in := u.String()
		out := store.RedactDSN(in)
		if _, err := url.Parse(in); err != nil {
			if out != "[unparsable DSN]" {
				t.Fatalf("RedactDSN(%q) = %q for a DSN url.Parse rejects (%v)", in, out, err)
			}
		} else {
			// The mask is not valid user info: swap it for a plain token to parse.
			back, err := url.Parse(strings.Replace(out, ":"+redacted+"@", ":MASK@", 1))
			if err != nil {
				t.Fatalf("RedactDSN(%q) = %q does not parse: %v", in, out, err)
			}
			got, has := back.User.Password()
			if !has || got != "MASK" {
				t.Fatalf("RedactDSN(%q) = %q: password position holds %q, want the mask", in, out, got)
			}
			if back.Scheme != u.Scheme || back.User.Username() != user || back.Host != u.Host || back.Path != u.Path || back.RawQuery != u.RawQuery || back.Fragment != "" {
				t.Fatalf("RedactDSN(%q) = %q changed more than the password: %#v", in, out, back)
			}
		}
		kv := "host=127.0.0.1 port=5432 user=app password='" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(pw) + "' dbname=x"
		if got, want := store.RedactDSN(kv), "host=127.0.0.1 port=5432 user=app password="+redacted+" dbname=x"; got != want {
			t.Fatalf("RedactDSN(%q) = %q, want %q", kv, got, want)
		}
	})
}

// redacted is the mask RedactDSN puts where a password was.
const redacted = "[redacted]"
