package backend

import (
	"slices"
	"strings"
)

// Client settings without leaks.
//
// Backend connections are shared by clients, so a client's settings (its
// startup parameters and session SETs) must be in effect on whichever
// backend runs its transaction and must never reach another client:
//
//   - Towards Postgres directly, every setting is a startup parameter of the
//     backend connection, and a pool keeps connections per distinct set
//     (the "pool key"). A client with default settings uses the default
//     set; nothing is ever SET on a pooled connection.
//   - Towards PgBouncer 1.18, which accepts only the five parameters it
//     tracks as startup parameters, those five form the pool key (PgBouncer
//     itself applies them on its server connection), and the rest is applied
//     with set_config(name, value, true) — transaction-local — at the start
//     of each transaction, pipelined in the same write ("preamble"). A
//     single statement outside a transaction is then wrapped in
//     BEGIN/COMMIT. Clients with default settings pay nothing.
//
// Transaction-local settings end with the transaction (COMMIT or
// ROLLBACK), so a returned connection carries no client state.

// poolerTracked are the parameters PgBouncer 1.18 tracks per client and
// accepts in the startup packet, with the spelling it expects.
var poolerTracked = map[string]string{
	"client_encoding":             "client_encoding",
	"datestyle":                   "DateStyle",
	"timezone":                    "TimeZone",
	"standard_conforming_strings": "standard_conforming_strings",
	"application_name":            "application_name",
}

// startupOnly are startup packet keys that are not settings.
var StartupOnly = map[string]bool{"user": true, "database": true, "options": true, "replication": true}

// reportedParams are Postgres 15's GUC_REPORT parameters (ParameterStatus
// is sent when they change), lowercase → canonical spelling.
var ReportedParams = map[string]string{
	"application_name":              "application_name",
	"client_encoding":               "client_encoding",
	"datestyle":                     "DateStyle",
	"default_transaction_read_only": "default_transaction_read_only",
	"in_hot_standby":                "in_hot_standby",
	"integer_datetimes":             "integer_datetimes",
	"intervalstyle":                 "IntervalStyle",
	"is_superuser":                  "is_superuser",
	"server_encoding":               "server_encoding",
	"server_version":                "server_version",
	"session_authorization":         "session_authorization",
	"standard_conforming_strings":   "standard_conforming_strings",
	"timezone":                      "TimeZone",
}

// Settings is an immutable set of settings: lowercase GUC name → value,
// sorted by name. Share freely; modify by copy (with, without).
type Settings struct {
	KV [][2]string
	// key identifies the set (names and values, and user), "" for the
	// empty set.
	Key string
	// user, when set, is the role backend connections with these startup
	// settings log in as (a client admitted through the "*" login
	// reaches the shards as itself); "" = the shard DSN's user.
	user string
}

// WithUser returns a copy whose backend connections log in as user.
func (s *Settings) WithUser(user string) *Settings {
	c := &Settings{KV: s.KV, user: user}
	c.Key = c.makeKey()
	return c
}

func (s *Settings) makeKey() string {
	if s.user == "" {
		return settingsKey(s.KV)
	}
	return settingsKey(s.KV) + "\x00user\x00" + s.user
}

var NoSettings = &Settings{}

func NewSettings(kv [][2]string) *Settings {
	s := &Settings{}
	for _, p := range kv {
		s.KV = setKV(s.KV, strings.ToLower(p[0]), p[1])
	}
	s.Key = settingsKey(s.KV)
	return s
}

func setKV(kv [][2]string, name, value string) [][2]string {
	i, found := slices.BinarySearchFunc(kv, name, func(e [2]string, n string) int { return strings.Compare(e[0], n) })
	if found {
		kv[i][1] = value
		return kv
	}
	return slices.Insert(kv, i, [2]string{name, value})
}

func settingsKey(kv [][2]string) string {
	var b strings.Builder
	for _, p := range kv {
		b.WriteString(p[0])
		b.WriteByte(0)
		b.WriteString(p[1])
		b.WriteByte(0)
	}
	return b.String()
}

// Get returns the value of name (lowercase).
func (s *Settings) Get(name string) (string, bool) {
	i, found := slices.BinarySearchFunc(s.KV, name, func(e [2]string, n string) int { return strings.Compare(e[0], n) })
	if !found {
		return "", false
	}
	return s.KV[i][1], true
}

// With returns a copy with name set to value.
func (s *Settings) With(name, value string) *Settings {
	c := &Settings{KV: setKV(slices.Clone(s.KV), name, value), user: s.user}
	c.Key = c.makeKey()
	return c
}

// Without returns a copy without name.
func (s *Settings) Without(name string) *Settings {
	c := &Settings{KV: slices.DeleteFunc(slices.Clone(s.KV), func(e [2]string) bool { return e[0] == name }), user: s.user}
	c.Key = c.makeKey()
	return c
}

// Split divides the settings of a client into what goes into the backend
// connection's startup packet (the pool key) and what the preamble applies
// per transaction. Direct connections take everything at startup.
func (s *Settings) Split(viaPooler bool) (startup, preamble *Settings) {
	if !viaPooler || len(s.KV) == 0 {
		return s, NoSettings
	}
	var a, b [][2]string
	for _, p := range s.KV {
		if _, ok := poolerTracked[p[0]]; ok {
			a = append(a, p)
		} else {
			b = append(b, p)
		}
	}
	if len(b) == 0 {
		return s, NoSettings
	}
	st := &Settings{KV: a, user: s.user}
	st.Key = st.makeKey()
	return st, &Settings{KV: b, Key: settingsKey(b)}
}

// runtimeParams returns the settings as pgconn RuntimeParams (PgBouncer's
// spelling for the parameters it tracks).
func (s *Settings) runtimeParams(viaPooler bool) map[string]string {
	m := make(map[string]string, len(s.KV))
	for _, p := range s.KV {
		name := p[0]
		if viaPooler {
			if n, ok := poolerTracked[name]; ok {
				name = n
			}
		}
		m[name] = p[1]
	}
	return m
}

// PreambleSQL returns the statement that applies s for one transaction:
// SELECT set_config(...), ... with every value as an escape string, which
// reads the same whatever standard_conforming_strings is.
func (s *Settings) PreambleSQL() string {
	var b strings.Builder
	b.WriteString("SELECT ")
	for i, p := range s.KV {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString("pg_catalog.set_config(")
		WriteEscapeLiteral(&b, p[0])
		b.WriteString(", ")
		WriteEscapeLiteral(&b, p[1])
		b.WriteString(", true)")
	}
	if v, ok := s.Get("default_transaction_read_only"); ok && isOn(v) {
		// The transaction the preamble runs in has begun already: its own
		// read-only status follows the client's default only if set too
		// (going read-only is allowed at any point of a transaction).
		b.WriteString(", pg_catalog.set_config('transaction_read_only', 'on', true)")
	}
	return b.String()
}

// Isolation returns the client's default isolation level (its
// default_transaction_isolation, as Postgres spells the level: "read
// committed", "repeatable read", "serializable", "read uncommitted"), ""
// when it set none or a value that names no level.
func (s *Settings) Isolation() string {
	v, ok := s.Get("default_transaction_isolation")
	if !ok {
		return ""
	}
	v = strings.Join(strings.Fields(strings.ToLower(strings.Trim(strings.TrimSpace(v), `'"`))), " ")
	switch v {
	case "read committed", "repeatable read", "serializable", "read uncommitted":
		return v
	}
	return ""
}

// TxnModes returns the transaction modes of s that must be fixed before a
// transaction's first query — the default isolation level and
// deferrable — as the mode list of a BEGIN or SET TRANSACTION
// ("ISOLATION LEVEL SERIALIZABLE, DEFERRABLE"), leaving out the isolation
// when noIso and deferrable when noDeferrable (the client's own BEGIN
// names them); "" when there is none. The preamble (a query, so too late
// for them: check_XactIsoLevel refuses a level once a snapshot is taken)
// cannot carry them, and through PgBouncer nothing is SET on a pooled
// connection: a transaction the proxy begins for a client through a
// pooler names them, so it runs at the client's level as directly.
func (s *Settings) TxnModes(noIso, noDeferrable bool) string {
	var m []string
	if iso := s.Isolation(); iso != "" && !noIso {
		m = append(m, "ISOLATION LEVEL "+strings.ToUpper(iso))
	}
	if v, ok := s.Get("default_transaction_deferrable"); ok && !noDeferrable {
		if isOn(v) {
			m = append(m, "DEFERRABLE")
		} else {
			m = append(m, "NOT DEFERRABLE")
		}
	}
	return strings.Join(m, ", ")
}

// BeginSQL is the BEGIN of a transaction the proxy begins for a client
// with settings s through a pooler (TxnModes).
func (s *Settings) BeginSQL() string {
	if m := s.TxnModes(false, false); m != "" {
		return "BEGIN " + m
	}
	return "BEGIN"
}

// isOn reports whether a boolean setting's value means on.
func isOn(v string) bool {
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "on", "true", "yes", "1", "t", "y":
		return true
	}
	return false
}

func WriteEscapeLiteral(b *strings.Builder, s string) {
	b.WriteString("E'")
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '\'':
			b.WriteString(`\'`)
		case '\\':
			b.WriteString(`\\`)
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('\'')
}

// QuoteLiteral quotes s as a standard SQL string literal.
func QuoteLiteral(s string) string {
	var b strings.Builder
	WriteEscapeLiteral(&b, s)
	return b.String()
}
