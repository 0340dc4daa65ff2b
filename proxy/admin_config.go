package proxy

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/pgshard/pgshard/proxy/internal/admin"
	"github.com/pgshard/pgshard/proxy/internal/auth"
)

// SHOW CONFIG: the running settings, named as the config file's proxy
// section names them, with the default and whether RELOAD applies a
// change (changeable) or only a restart does. Secrets never appear: a
// password is "[redacted]" when set, users are listed without theirs, DSNs
// are redacted.

// configRow is one SHOW CONFIG row.
type configRow struct {
	key, value, def string
	changeable      bool
}

func configRows(cfg Config, ts *auth.TLSSetup, generation uint64) []configRow {
	d := Config{}.withDefaults()
	str := func(v any) string {
		switch x := v.(type) {
		case time.Duration:
			return x.String()
		case bool:
			return strconv.FormatBool(x)
		case []string:
			return strings.Join(x, ",")
		}
		return fmt.Sprint(v)
	}
	secret := func(s string) string {
		if s == "" {
			return ""
		}
		return redacted
	}
	var users []string
	for _, u := range cfg.Users {
		auth := "scram-sha-256"
		if u.Trust {
			auth = "trust"
		}
		users = append(users, u.Name+" ("+auth+")")
	}
	notAfter := ""
	if ts != nil && !ts.NotAfter.IsZero() {
		notAfter = ts.NotAfter.UTC().Format(time.RFC3339)
	}
	rows := []configRow{
		{"listen", cfg.Listen, d.Listen, false},
		// use_pooler and verify_identity: the config file's defaults
		// (true); a Config's zero value, false, is only a Go default.
		{"use_pooler", str(cfg.UsePooler), "true", true},
		{"users", strings.Join(users, ", "), "", true},
		{"admin_users", str(cfg.AdminUsers), "", true},
		{"admin_database", cfg.AdminDatabase, d.AdminDatabase, true},
		{"databases", str(cfg.Databases), "", true},
		{"pool_size", str(cfg.PoolSize), str(d.PoolSize), true},
		{"max_clients", str(cfg.MaxClients), str(d.MaxClients), true},
		{"max_message_size", str(cfg.MaxMessageSize), str(d.MaxMessageSize), true},
		{"max_pipeline_bytes", str(cfg.MaxPipelineBytes), str(4 * d.MaxMessageSize), true},
		{"connect_timeout", str(cfg.ConnectTimeout), str(d.ConnectTimeout), true},
		{"pool_timeout", str(cfg.PoolTimeout), str(d.PoolTimeout), true},
		{"idle_timeout", str(cfg.IdleTimeout), str(d.IdleTimeout), true},
		{"idle_in_transaction_timeout", str(cfg.IdleInTransactionTimeout), str(d.IdleInTransactionTimeout), true},
		{"health_interval", str(cfg.HealthInterval), str(d.HealthInterval), true},
		{"startup_timeout", str(cfg.StartupTimeout), str(d.StartupTimeout), true},
		{"default_shard", cfg.DefaultShard, "", true},
		{"statement_cache_size", str(cfg.StatementCacheSize), str(d.StatementCacheSize), true},
		{"cache_unnamed_statements", str(cfg.UnnamedStatements == UnnamedCached), "true", true},
		{"verify_identity", str(cfg.VerifyIdentity), "true", true},
		{"metrics_listen", cfg.MetricsListen, "", false},
		{"tls.mode", cfg.TLS.Mode.String(), "disable", true},
		{"tls.cert_file", cfg.TLS.CertFile, "", true},
		{"tls.key_file", cfg.TLS.KeyFile, "", true},
		{"tls.cert_not_after", notAfter, "", false},
		{"pgbouncer.admin_user", cfg.PgBouncer.AdminUser, "", true},
		{"pgbouncer.admin_password", secret(cfg.PgBouncer.AdminPassword), "", true},
		{"pgbouncer.poll_interval", str(cfg.PgBouncer.PollInterval), str(d.PgBouncer.PollInterval), true},
		{"pgbouncer.max_waiting", str(cfg.PgBouncer.MaxWaiting), "0", true},
		{"pgbouncer.max_wait", str(cfg.PgBouncer.MaxWait), "0s", true},
		{"shutdown_timeout", str(cfg.ShutdownTimeout), str(d.ShutdownTimeout), true},
		{"pause_timeout", str(cfg.PauseTimeout), str(d.PauseTimeout), true},
		{"reuse_port", str(cfg.ReusePort), "false", false},
		{"handover_socket", cfg.HandoverSocket, "", false},
		// procs: the config file's default (1); 0 leaves Go's own
		// GOMAXPROCS.
		{"procs", str(cfg.Procs), "1", false},
		{"shardmap", fmt.Sprintf("epoch %d, %d buckets, %d shards", cfg.Map.Epoch, cfg.Map.Buckets, len(cfg.Map.Shards)), "", true},
		{"generation", str(generation), "1", false},
		{"fence", cfg.Fence.String(), "auto", true},
		{"catalog", cfg.CatalogName, "", false},
		{"catalog_lease", leaseState(cfg.Follow), "none", false},
	}
	return rows
}

// Config is SHOW CONFIG's rows (admin.Host), values redacted.
func (h *adminHost) Config() []admin.ConfigRow {
	srv := h.srv()
	var out []admin.ConfigRow
	for _, row := range configRows(srv.cfg, srv.srv.tls.Load(), srv.number) {
		out = append(out, admin.ConfigRow{Key: row.key, Value: srv.srv.secrets.redact(row.value), Default: row.def, Changeable: row.changeable})
	}
	return out
}
