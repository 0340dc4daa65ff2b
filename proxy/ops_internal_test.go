package proxy

import (
	"github.com/pgshard/pgshard/proxy/internal/backend"

	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/pgshard/pgshard/shardmap"
)

func TestSecretSetRedacts(t *testing.T) {
	m, err := shardmap.Even(16, []shardmap.Shard{{Name: "s0", DSN: "postgres://u:dsnsecret@h/d", PoolerDSN: "host=h password=poolsecret"}})
	if err != nil {
		t.Fatal(err)
	}
	v, err := NewSCRAMVerifier("pw-of-bob")
	if err != nil {
		t.Fatal(err)
	}
	var ss secretSet
	ss.set(&Config{Map: m, Users: []User{{Name: "a", Password: "plainpw"}, {Name: "b", Password: v}, {Name: "c", Trust: true}},
		PgBouncer: BouncerConfig{AdminPassword: "bouncerpw"}})
	in := "x dsnsecret y poolsecret plainpw bouncerpw " + v + " end"
	out := ss.redact(in)
	for _, s := range []string{"dsnsecret", "poolsecret", "plainpw", "bouncerpw", v, v[strings.LastIndexByte(v, ':')+1:]} {
		if strings.Contains(out, s) {
			t.Errorf("%q survives: %q", s, out)
		}
	}
	if !strings.HasPrefix(out, "x [redacted] y") || !strings.HasSuffix(out, " end") {
		t.Errorf("redact(%q) = %q", in, out)
	}
}

func TestQuantile(t *testing.T) {
	h := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "h", Buckets: []float64{0.001, 0.01, 0.1, 1}})
	if q := backend.Quantile(h, 0.99); q != 0 {
		t.Fatalf("empty histogram: %v", q)
	}
	for i := 0; i < 99; i++ {
		h.Observe(0.0005) // bucket ≤1ms
	}
	h.Observe(0.5) // bucket ≤1s
	if q := backend.Quantile(h, 0.5); q <= 0 || q > time.Millisecond {
		t.Errorf("p50 %v, want within the first bucket", q)
	}
	if q := backend.Quantile(h, 0.995); q < 100*time.Millisecond || q > time.Second {
		t.Errorf("p99.5 %v, want within (100ms, 1s]", q)
	}
	h.Observe(5) // above every bucket
	if q := backend.Quantile(h, 1); q != time.Second {
		t.Errorf("p100 %v, want the last bound", q)
	}
}

func TestCheckEpoch(t *testing.T) {
	base, err := shardmap.Even(16, []shardmap.Shard{{Name: "a", DSN: "postgres://h/a"}, {Name: "b", Ordinal: 1, DSN: "postgres://h/b"}})
	if err != nil {
		t.Fatal(err)
	}
	base.Epoch = 5
	mod := func(f func(m *shardmap.Map)) *shardmap.Map { m := base.Clone(); f(m); return m }
	for _, tc := range []struct {
		name string
		next *shardmap.Map
		want string
	}{
		{"same", base.Clone(), ""},
		{"higher", mod(func(m *shardmap.Map) { m.Epoch = 6 }), ""},
		{"lower", mod(func(m *shardmap.Map) { m.Epoch = 4 }), "older"},
		{"changed at the same epoch", mod(func(m *shardmap.Map) { m.Ranges[0].Shard, m.Ranges[1].Shard = "b", "a" }), "kept epoch"},
		{"other bucket count", mod(func(m *shardmap.Map) { m.Epoch = 6; m.Buckets = 32 }), "bucket count"},
	} {
		err := checkEpoch(base, tc.next)
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
}

func TestParseTLSMode(t *testing.T) {
	for in, want := range map[string]TLSMode{"": TLSDisable, "disable": TLSDisable, "Allow": TLSAllow, "require": TLSRequire} {
		got, err := ParseTLSMode(in)
		if err != nil || got != want || (in != "" && !strings.EqualFold(got.String(), in)) {
			t.Errorf("ParseTLSMode(%q) = %v, %v", in, got, err)
		}
	}
	if _, err := ParseTLSMode("verify-full"); err == nil {
		t.Error("ParseTLSMode(verify-full): no error")
	}
}

// TestValidateFenceMode: Config.validate refuses a fence mode that is none
// of auto, on, off.
func TestValidateFenceMode(t *testing.T) {
	if err := (Config{Fence: FenceMode(7)}).validate(); err == nil {
		t.Error("validate accepted fence mode 7")
	}
}

// TestKeepRestartOnlyProcs: a reload keeps the running proxy.procs (the
// GOMAXPROCS `pgshard proxy` set at start) and reports that another value
// needs a restart.
func TestKeepRestartOnlyProcs(t *testing.T) {
	var res ReloadResult
	cfg := Config{Procs: 4}
	keepRestartOnly(Config{Procs: 1}, &cfg, &res)
	if cfg.Procs != 1 || strings.Join(res.NeedRestart, ",") != "procs" {
		t.Fatalf("procs %d, need restart %q; want 1 and [procs]", cfg.Procs, res.NeedRestart)
	}
	res = ReloadResult{}
	keepRestartOnly(Config{Procs: 1}, &cfg, &res)
	if len(res.NeedRestart) != 0 {
		t.Fatalf("unchanged procs reported as needing a restart: %q", res.NeedRestart)
	}
}
