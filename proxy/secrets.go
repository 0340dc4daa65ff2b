package proxy

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/pgshard/pgshard/proxy/internal/auth"
	"github.com/pgshard/pgshard/store"
)

// Secrets: passwords (plain or SCRAM verifiers), DSN passwords and the
// PgBouncer admin password never appear in logs, the admin console, errors
// or metrics. Two layers:
//
//   - what the proxy shows of a DSN goes through store.RedactDSN (the
//     one redaction of a DSN, shared with the store);
//   - the logger is wrapped in a handler that replaces every configured
//     secret in messages and attributes by "[redacted]" (secretSet), so a
//     library error that quotes a DSN cannot leak one either.

// redacted replaces a secret.
const redacted = "[redacted]"

// secretSet holds the strings to redact from logs.
type secretSet struct {
	list atomic.Pointer[[]string]
}

// set replaces the secrets by those of cfg (called at New and each reload).
func (ss *secretSet) set(cfg *Config) {
	var out []string
	add := func(s string) {
		if len(s) >= 4 && !slices.Contains(out, s) { // shorter strings would redact ordinary words
			out = append(out, s)
		}
	}
	for _, u := range cfg.Users {
		add(u.Password)
		if v, err := auth.ParseVerifier(u.Password); err == nil {
			_ = v
			// A verifier's parts (salt, keys) are secrets on their own.
			if i := strings.IndexByte(u.Password, '$'); i >= 0 {
				for _, part := range strings.FieldsFunc(u.Password[i+1:], func(r rune) bool { return r == '$' || r == ':' }) {
					add(part)
				}
			}
		}
	}
	add(cfg.PgBouncer.AdminPassword)
	if cfg.Map != nil {
		for _, sh := range cfg.Map.Shards {
			for _, dsn := range []string{sh.DSN, sh.PoolerDSN} {
				add(store.DSNPassword(dsn))
			}
		}
	}
	// Longest first, so a secret that contains another is replaced whole.
	slices.SortFunc(out, func(a, b string) int { return len(b) - len(a) })
	ss.list.Store(&out)
}

// redact replaces every secret in s.
func (ss *secretSet) redact(s string) string {
	l := ss.list.Load()
	if l == nil {
		return s
	}
	for _, sec := range *l {
		if strings.Contains(s, sec) {
			s = strings.ReplaceAll(s, sec, redacted)
		}
	}
	return s
}

// redactHandler is a slog.Handler that redacts secrets before passing a
// record on.
type redactHandler struct {
	next    slog.Handler
	secrets *secretSet
}

func (h *redactHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return h.next.Enabled(ctx, l)
}

func (h *redactHandler) Handle(ctx context.Context, r slog.Record) error {
	out := slog.NewRecord(r.Time, r.Level, h.secrets.redact(r.Message), r.PC)
	r.Attrs(func(a slog.Attr) bool {
		out.AddAttrs(h.redactAttr(a))
		return true
	})
	return h.next.Handle(ctx, out)
}

func (h *redactHandler) redactAttr(a slog.Attr) slog.Attr {
	v := a.Value.Resolve()
	switch v.Kind() {
	case slog.KindString:
		return slog.String(a.Key, h.secrets.redact(v.String()))
	case slog.KindGroup:
		attrs := v.Group()
		out := make([]any, 0, len(attrs))
		for _, x := range attrs {
			out = append(out, h.redactAttr(x))
		}
		return slog.Group(a.Key, out...)
	case slog.KindAny:
		if err, ok := v.Any().(error); ok {
			return slog.String(a.Key, h.secrets.redact(err.Error()))
		}
		return slog.String(a.Key, h.secrets.redact(v.String()))
	}
	return slog.Attr{Key: a.Key, Value: v}
}

func (h *redactHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	out := make([]slog.Attr, len(attrs))
	for i, a := range attrs {
		out[i] = h.redactAttr(a)
	}
	return &redactHandler{next: h.next.WithAttrs(out), secrets: h.secrets}
}

func (h *redactHandler) WithGroup(name string) slog.Handler {
	return &redactHandler{next: h.next.WithGroup(name), secrets: h.secrets}
}

// warnPlainPasswords logs one warning per user whose password is in plain
// text in the config (never the password).
func warnPlainPasswords(users []User, log *slog.Logger) {
	for _, u := range users {
		if !u.Trust && u.Password != "" && !strings.HasPrefix(u.Password, auth.Mechanism+"$") {
			log.Warn("a plain-text password is in the config; store a SCRAM-SHA-256 verifier instead (pgshard passwd USER prints one)", "user", u.Name)
		}
	}
}
