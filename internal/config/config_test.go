package config_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/pgshard/pgshard/internal/config"
)

const mapYAML = `epoch: 3
buckets: 16
shards:
  - {name: a, ordinal: 0, dsn: "postgres://a/db"}
  - {name: b, ordinal: 1, dsn: "postgres://b/db", pooler_dsn: "postgres://pb/db"}
ranges:
  - {lo: 0, hi: 7, shard: a}
  - {lo: 8, hi: 15, shard: b}
`

func write(t *testing.T, dir, name, body string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func indent(s string) string {
	var b strings.Builder
	for _, l := range strings.SplitAfter(s, "\n") {
		if l != "" {
			b.WriteString("  " + l)
		}
	}
	return b.String()
}

func TestDefaults(t *testing.T) {
	c, err := config.Load(config.Options{Path: write(t, t.TempDir(), "c.yaml", "{}\n"), Environ: []string{}})
	if err != nil {
		t.Fatal(err)
	}
	want := config.Defaults().Store
	if c.Store != want {
		t.Errorf("store = %+v, want defaults %+v", c.Store, want)
	}
	if c.Store.ConnectAttempts != 15 || c.Store.ConnectInterval != time.Second {
		t.Errorf("seed defaults changed: %+v", c.Store)
	}
	if c.Map != nil {
		t.Error("map without a shardmap key")
	}
	// One CPU runs the proxy's Go code unless the config says otherwise
	// (DefaultProxyProcs says why).
	if c.Proxy.Procs != 1 || config.DefaultProxyProcs != 1 {
		t.Errorf("proxy.procs = %d (default %d), want 1", c.Proxy.Procs, config.DefaultProxyProcs)
	}
}

// flags > PGSHARD_* environment > file > defaults, key by key.
func TestPrecedence(t *testing.T) {
	dir := t.TempDir()
	path := write(t, dir, "c.yaml", "store:\n  trace_max: 10\n  max_conns: 20\n  connect_attempts: 30\n")
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	fs.Int("trace-max", 0, "")
	fs.Int("max-conns", 0, "")
	if err := fs.Parse([]string{"--trace-max=99"}); err != nil {
		t.Fatal(err)
	}
	c, err := config.Load(config.Options{
		Path:    path,
		Flags:   fs,
		Bind:    map[string]string{"store.trace_max": "trace-max", "store.max_conns": "max-conns"},
		Environ: []string{"PGSHARD_STORE_TRACE_MAX=50", "PGSHARD_STORE_MAX_CONNS=40", "PGSHARD_STORE_CONNECT_INTERVAL=250ms"},
	})
	if err != nil {
		t.Fatal(err)
	}
	s := c.Store
	if s.TraceMax != 99 { // flag set
		t.Errorf("trace_max = %d, want the flag's 99", s.TraceMax)
	}
	if s.MaxConns != 40 { // flag bound but not set: env wins
		t.Errorf("max_conns = %d, want the environment's 40", s.MaxConns)
	}
	if s.ConnectAttempts != 30 { // file only
		t.Errorf("connect_attempts = %d, want the file's 30", s.ConnectAttempts)
	}
	if s.ConnectInterval != 250*time.Millisecond { // env only
		t.Errorf("connect_interval = %s, want 250ms", s.ConnectInterval)
	}
	if !s.UsePooler { // default
		t.Error("use_pooler lost its default")
	}
}

// catalog.dsn is a key like any other: file, PGSHARD_CATALOG_DSN, flag.
func TestCatalogDSN(t *testing.T) {
	dir := t.TempDir()
	path := write(t, dir, "c.yaml", "catalog:\n  dsn: postgres://file/cat\n")
	for _, tc := range []struct {
		env  []string
		flag string
		want string
	}{
		{nil, "", "postgres://file/cat"},
		{[]string{"PGSHARD_CATALOG_DSN=postgres://env/cat"}, "", "postgres://env/cat"},
		{[]string{"PGSHARD_CATALOG_DSN=postgres://env/cat"}, "postgres://flag/cat", "postgres://flag/cat"},
	} {
		fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
		fs.String("catalog", "", "")
		if tc.flag != "" {
			if err := fs.Parse([]string{"--catalog=" + tc.flag}); err != nil {
				t.Fatal(err)
			}
		}
		c, err := config.Load(config.Options{Path: path, Flags: fs, Bind: map[string]string{"catalog.dsn": "catalog"}, Environ: append([]string{}, tc.env...)})
		if err != nil {
			t.Fatal(err)
		}
		if c.Catalog.DSN != tc.want {
			t.Errorf("env %v flag %q: catalog.dsn = %q, want %q", tc.env, tc.flag, c.Catalog.DSN, tc.want)
		}
	}
	c, err := config.Load(config.Options{Environ: []string{}})
	if err != nil || c.Catalog.DSN != "" {
		t.Errorf("default: %q, %v; want no catalog", c.Catalog.DSN, err)
	}
}

func TestShardMapInlineAndFile(t *testing.T) {
	dir := t.TempDir()
	inline := write(t, dir, "inline.yaml", "shardmap:\n"+indent(mapYAML))
	write(t, dir, "map.yaml", mapYAML)
	byFile := write(t, dir, "byfile.yaml", "shardmap_file: map.yaml\n")
	for _, p := range []string{inline, byFile} {
		c, err := config.Load(config.Options{Path: p, Environ: []string{}, RequireMap: true})
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		if c.Map.Epoch != 3 || len(c.Map.Shards) != 2 || c.Map.Lookup("x") == nil {
			t.Errorf("%s: map %+v", p, c.Map)
		}
	}
}

// Every bad config is one line that names the key at fault.
func TestErrorsNameTheKey(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "gap.yaml", strings.Replace(mapYAML, "lo: 8", "lo: 9", 1))
	for _, tc := range []struct {
		name, body string
		env        []string
		want       []string
	}{
		{"unknown top-level key", "shardmapp_file: x\n", nil, []string{`unknown key "shardmapp_file"`, `did you mean "shardmap_file"`}},
		{"unknown nested key", "store:\n  trace_maxx: 3\n", nil, []string{`unknown key "store.trace_maxx"`, `did you mean "store.trace_max"`}},
		{"unknown section", "routerr:\n  x: 1\n", nil, []string{`unknown key "routerr"`}},
		{"wrong type", "store:\n  max_conns: lots\n", nil, []string{"store.max_conns"}},
		{"bad duration", "store:\n  connect_interval: soon\n", nil, []string{"store.connect_interval"}},
		{"invalid value", "store:\n  connect_attempts: 0\n", nil, []string{"store.connect_attempts: must be at least 1"}},
		{"negative timeout", "store:\n  statement_timeout: -1s\n", nil, []string{"store.statement_timeout"}},
		{"trace_max below -1", "store:\n  trace_max: -2\n", nil, []string{"store.trace_max: must be positive, 0 (the default, 200) or -1 (unbounded)"}},
		{"both map sources", "shardmap_file: gap.yaml\nshardmap:\n" + indent(mapYAML), nil, []string{"shardmap_file and shardmap"}},
		{"bad map file", "shardmap_file: gap.yaml\n", nil, []string{"shardmap_file", "bucket 8 is not assigned"}},
		{"missing map file", "shardmap_file: nope.yaml\n", nil, []string{"shardmap_file", "nope.yaml"}},
		{"unknown key in inline map", "shardmap:\n" + indent(mapYAML+"extra: 1\n"), nil, []string{"shardmap", "extra"}},
		{"not yaml", "store: [\n", nil, []string{"c.yaml"}},
		{"unknown env var", "{}\n", []string{"PGSHARD_STORE_TRACEMAX=3"}, []string{"PGSHARD_STORE_TRACEMAX (did you mean PGSHARD_STORE_TRACE_MAX?)"}},
		{"bad env value", "{}\n", []string{"PGSHARD_STORE_MAX_CONNS=many"}, []string{"store.max_conns"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := write(t, dir, "c.yaml", tc.body)
			env := tc.env
			if env == nil {
				env = []string{}
			}
			_, err := config.Load(config.Options{Path: p, Environ: env})
			if err == nil {
				t.Fatal("no error")
			}
			msg := err.Error()
			if strings.Contains(msg, "\n") {
				t.Errorf("error spans lines: %q", msg)
			}
			for _, w := range tc.want {
				if !strings.Contains(msg, w) {
					t.Errorf("error %q does not contain %q", msg, w)
				}
			}
		})
	}
}

func TestFindsConfigFile(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	if _, err := config.Load(config.Options{Environ: []string{}, RequireMap: true}); err == nil || !strings.Contains(err.Error(), "pgshard dev up") {
		t.Fatalf("no config anywhere: err = %v, want a hint to run pgshard dev up", err)
	}
	if err := os.MkdirAll(filepath.Join(dir, config.DefaultDevDir), 0o755); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(dir, config.DefaultDevDir), "pgshard.yaml", "shardmap:\n"+indent(mapYAML))
	c, err := config.Load(config.Options{Environ: []string{}, RequireMap: true})
	if err != nil || c.Path != filepath.Join(config.DefaultDevDir, "pgshard.yaml") {
		t.Fatalf("dev config: %v (path %q)", err, c.Path)
	}
	other := write(t, dir, "other.yaml", "store:\n  trace_max: 7\n")
	c, err = config.Load(config.Options{Environ: []string{config.EnvConfig + "=" + other}})
	if err != nil || c.Path != other || c.Store.TraceMax != 7 {
		t.Fatalf("%s: %v %+v", config.EnvConfig, err, c)
	}
	if _, err := config.Load(config.Options{Environ: []string{config.EnvConfig + "=/nope.yaml"}}); err == nil || !strings.Contains(err.Error(), config.EnvConfig) {
		t.Fatalf("missing %s file: %v", config.EnvConfig, err)
	}
}

func TestEnvName(t *testing.T) {
	if got := config.EnvName("store.trace_max"); got != "PGSHARD_STORE_TRACE_MAX" {
		t.Errorf("EnvName = %s", got)
	}
}

// TestProxyDatabasesAndPoolMode: proxy.databases is a map (or the older
// list of names), pool modes are checked, each problem names its key.
func TestProxyDatabasesAndPoolMode(t *testing.T) {
	for _, tc := range []struct {
		name, body string
		want       map[string]config.ProxyDatabase
		errs       []string
	}{
		{"list form", "proxy:\n  databases: [app, other]\n", map[string]config.ProxyDatabase{"app": {}, "other": {}}, nil},
		{"map form", "proxy:\n  pool_mode: session\n  databases:\n    app: {}\n    rep: {dsn: \"postgres://h/rep\", pool_mode: transaction}\n",
			map[string]config.ProxyDatabase{"app": {}, "rep": {DSN: "postgres://h/rep", PoolMode: "transaction"}}, nil},
		{"bad", "proxy:\n  pool_mode: statement\n  max_pinned: 0\n  databases:\n    x: {dsn: \"postgres://h/x\", map: m.yaml, pool_mode: nope}\n", nil,
			[]string{"proxy.pool_mode", "proxy.max_pinned", "proxy.databases.x: set dsn", "proxy.databases.x.pool_mode"}},
		{"unknown key in a database", "proxy:\n  databases:\n    x: {dns: \"postgres://h/x\"}\n", nil, []string{"dns"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			c, err := config.Load(config.Options{Path: write(t, dir, "c.yaml", tc.body), Environ: []string{}})
			if tc.errs != nil {
				if err == nil {
					t.Fatal("no error")
				}
				for _, w := range tc.errs {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("error %q lacks %q", err, w)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(c.Proxy.Databases) != len(tc.want) {
				t.Fatalf("databases %+v, want %+v", c.Proxy.Databases, tc.want)
			}
			for k, v := range tc.want {
				if c.Proxy.Databases[k] != v {
					t.Errorf("databases[%s] = %+v, want %+v", k, c.Proxy.Databases[k], v)
				}
			}
		})
	}
}
