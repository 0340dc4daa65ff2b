package cluster

import (
	"fmt"
	"io"
	"maps"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/pgshard/pgshard/shardmap"
)

// Defaults applied to a zero Spec field.
const (
	DefaultShards       = 4
	DefaultDatabase     = "pgshard"
	DefaultUser         = "postgres"
	DefaultStartTimeout = 60 * time.Second
)

// MaxShards bounds Spec.Shards: a shard's ordinal strides the global
// sequences, so a cluster can never have more than shardmap.SeqStride shards.
const MaxShards = shardmap.MaxOrdinal + 1

// Spec describes a cluster. The zero value is valid: 4 shards without
// PgBouncer, database "pgshard", user "postgres", fsync off.
type Spec struct {
	// Shards is the number of PostgreSQL servers (default 4).
	Shards int `json:"shards"`
	// PgBouncer adds one PgBouncer per shard in transaction pooling mode.
	PgBouncer bool `json:"pgbouncer"`
	// CatalogServer adds one more PostgreSQL, no shard's, for a catalog
	// of the shard map to live on (Cluster.Catalog): the shards' servers
	// can then all crash without taking the catalog along. It has the
	// cluster's settings, User and Roles but not Database (whoever puts a
	// catalog there creates its database), and no PgBouncer. A reused
	// cluster keeps the one it has (Up with false does not remove it);
	// the testcontainers provider does not support it.
	CatalogServer bool `json:"catalog_server,omitempty"`
	// Database is created on every shard (default "pgshard").
	Database string `json:"database"`
	// User owns Database and is the PgBouncer admin user (default
	// "postgres", the bootstrap superuser; another name is created as a
	// superuser).
	User string `json:"user"`
	// Roles are extra login roles created (trust auth) on every shard and
	// listed in PgBouncer's auth_file.
	Roles []string `json:"roles,omitempty"`
	// Fsync turns fsync and full_page_writes on. When false (the usual
	// choice for tests) both are off; synchronous_commit always stays on,
	// so commits acknowledged to a client survive a process crash (not an
	// OS crash).
	Fsync bool `json:"fsync"`
	// Settings are extra postgresql.conf settings; they override the
	// cluster's defaults except listen_addresses, port and
	// unix_socket_directories, which the cluster owns.
	Settings map[string]string `json:"settings,omitempty"`
	// BinDir is the PostgreSQL bin directory; "" discovers it (see
	// FindBinaries).
	BinDir string `json:"bin_dir,omitempty"`
	// PgBouncerBin is the pgbouncer executable; "" discovers it.
	PgBouncerBin string `json:"pgbouncer_bin,omitempty"`
	// StartTimeout bounds the wait for each server to accept connections
	// (default 60s).
	StartTimeout time.Duration `json:"start_timeout"`
	// Log receives progress lines such as "starting shard0 on
	// 127.0.0.1:PORT"; nil is silent. It may be called from several
	// goroutines, one line per Write.
	Log io.Writer `json:"-"`
}

// Settings the cluster owns; Spec.Settings may not override them.
var ownedSettings = []string{"listen_addresses", "port", "unix_socket_directories"}

var (
	identRe   = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,62}$`)
	settingRe = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_.]*$`)
)

// withDefaults returns s with zero fields defaulted and Roles deduplicated
// and sorted. It does not validate.
func (s Spec) withDefaults() Spec {
	if s.Shards == 0 {
		s.Shards = DefaultShards
	}
	if s.Database == "" {
		s.Database = DefaultDatabase
	}
	if s.User == "" {
		s.User = DefaultUser
	}
	if s.StartTimeout <= 0 {
		s.StartTimeout = DefaultStartTimeout
	}
	roles := slices.Clone(s.Roles)
	slices.Sort(roles)
	s.Roles = slices.Compact(roles)
	s.Settings = maps.Clone(s.Settings)
	return s
}

// Validate reports every problem of a (defaulted) spec at once, each naming
// the field at fault.
func (s Spec) Validate() error {
	roles := s.Roles
	s = s.withDefaults()
	var p []string
	add := func(format string, args ...any) { p = append(p, fmt.Sprintf(format, args...)) }
	if s.Shards < 1 || s.Shards > MaxShards {
		add("Shards: %d is outside 1..%d", s.Shards, MaxShards)
	}
	if !identRe.MatchString(s.Database) {
		add("Database: %q is not a plain identifier (letters, digits, '_', at most 63 bytes)", s.Database)
	}
	if !identRe.MatchString(s.User) {
		add("User: %q is not a plain identifier (letters, digits, '_', at most 63 bytes)", s.User)
	}
	for i, r := range roles {
		if !identRe.MatchString(r) {
			add("Roles[%d]: %q is not a plain identifier (letters, digits, '_', at most 63 bytes)", i, r)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(s.Settings)) {
		v := s.Settings[k]
		switch {
		case !settingRe.MatchString(k):
			add("Settings: %q is not a setting name", k)
		case slices.Contains(ownedSettings, strings.ToLower(k)):
			add("Settings[%s]: set by the cluster itself and may not be overridden", k)
		case strings.ContainsAny(v, "\n\r\x00"):
			add("Settings[%s]: value contains a line break or NUL", k)
		}
	}
	if len(p) > 0 {
		return fmt.Errorf("invalid cluster spec: %s", strings.Join(p, "; "))
	}
	return nil
}

// logf writes one progress line to s.Log.
func (s Spec) logf(format string, args ...any) {
	if s.Log != nil {
		_, _ = fmt.Fprintf(s.Log, format+"\n", args...)
	}
}

// postgresConf renders the settings file included by every shard's
// postgresql.conf.
func (s Spec) postgresConf(port int) string {
	onOff := func(b bool) string {
		if b {
			return "on"
		}
		return "off"
	}
	var b strings.Builder
	b.WriteString("# Written by pgshard's cluster package on every start; edits are lost.\n")
	set := func(k, v string) { fmt.Fprintf(&b, "%s = '%s'\n", k, strings.ReplaceAll(v, "'", "''")) }
	set("listen_addresses", "127.0.0.1")
	set("port", fmt.Sprint(port))
	set("unix_socket_directories", "")
	set("max_connections", "300")
	set("shared_buffers", "128MB")
	set("fsync", onOff(s.Fsync))
	set("full_page_writes", onOff(s.Fsync))
	set("synchronous_commit", "on")
	// Crash recovery starts by syncing the data directory: one syncfs
	// call instead of an fsync per file shortens every restart after a
	// crash (chaos crashes shards every few seconds).
	set("recovery_init_sync_method", "syncfs")
	set("logging_collector", "off")
	set("log_destination", "stderr")
	set("log_line_prefix", "%m [%p] %q%u@%d ")
	set("log_timezone", "UTC")
	for _, k := range slices.Sorted(maps.Keys(s.Settings)) {
		set(k, s.Settings[k])
	}
	return b.String()
}

// shape describes what cannot change in an existing cluster.
func (s Spec) shape() string {
	with := "without"
	if s.PgBouncer {
		with = "with"
	}
	return fmt.Sprintf("%d shards %s PgBouncer", s.Shards, with)
}

// sameShape reports why a cluster built from old cannot serve s, or "".
func sameShape(old, s Spec) string {
	if old.Shards == s.Shards && old.PgBouncer == s.PgBouncer {
		return ""
	}
	return fmt.Sprintf("%s, but the spec asks for %s", old.shape(), s.shape())
}
