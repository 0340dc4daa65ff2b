// Package config loads pgshard's configuration with one viper instance per
// run. Precedence: flags > PGSHARD_* environment > config file > defaults.
// Unknown keys (in the file or as PGSHARD_* variables) are errors that name
// the key, and so are invalid values.
//
// Adding a setting: add a field with a `mapstructure` tag to Config (or one
// of its sections), give it a default in Defaults, and check it in Validate.
// Every key has a default, so PGSHARD_* variables always reach Unmarshal
// (viper's AutomaticEnv only sees keys it knows).
package config

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/go-viper/mapstructure/v2"
	"github.com/spf13/pflag"
	"github.com/spf13/viper"
	"go.yaml.in/yaml/v3"

	"github.com/pgshard/pgshard/shardmap"
)

// EnvPrefix prefixes every environment variable that sets a key:
// store.trace_max is PGSHARD_STORE_TRACE_MAX.
const EnvPrefix = "PGSHARD"

// EnvConfig names the config file when --config is not given.
const EnvConfig = "PGSHARD_CONFIG"

// DefaultDevDir is where `pgshard dev up` keeps its cluster and config.
const DefaultDevDir = ".pgshard"

// Config is the whole configuration of a pgshard run.
type Config struct {
	// ShardMapFile names a shard map YAML file, relative to the config file.
	ShardMapFile string `mapstructure:"shardmap_file"`
	// ShardMap is an inline shard map (exclusive with ShardMapFile).
	ShardMap map[string]any `mapstructure:"shardmap"`
	// Store configures the store and the router's pools.
	Store Store `mapstructure:"store"`
	// Loadgen configures `pgshard loadgen` (flags override it).
	Loadgen Loadgen `mapstructure:"loadgen"`
	// Proxy configures `pgshard proxy`.
	Proxy Proxy `mapstructure:"proxy"`
	// Catalog names the shard map's catalog in Postgres (package catalog).
	Catalog Catalog `mapstructure:"catalog"`

	// Map is the validated shard map, nil when the config has none.
	Map *shardmap.Map `mapstructure:"-"`
	// Path is the file the config was read from ("" for defaults only).
	Path string `mapstructure:"-"`
}

// Store configures connections to the shards.
type Store struct {
	// UsePooler connects through each shard's PgBouncer when it has one.
	UsePooler bool `mapstructure:"use_pooler"`
	// ConnectAttempts is how many times connecting is tried before giving up.
	ConnectAttempts int `mapstructure:"connect_attempts"`
	// ConnectInterval is the pause between connection attempts.
	ConnectInterval time.Duration `mapstructure:"connect_interval"`
	// StatementTimeout, when set, applies SET LOCAL statement_timeout to
	// every transaction.
	StatementTimeout time.Duration `mapstructure:"statement_timeout"`
	// TraceMax caps each execution's trace ring: 0 is the store's default
	// (store.DefaultTraceMax, 200 entries, as in the seed), -1 keeps every
	// entry.
	TraceMax int `mapstructure:"trace_max"`
	// MaxConns bounds each shard's pool.
	MaxConns int `mapstructure:"max_conns"`
}

// Catalog names the catalog that holds the shard map in Postgres.
type Catalog struct {
	// DSN connects to the catalog database (directly or through a
	// transaction-pooling PgBouncer). Empty: no catalog; the shard map
	// comes from shardmap_file or shardmap. Used by `pgshard map push`,
	// `map show`, `reshard`, `dev add-shard`; the commands on the router
	// and the proxy follow it (the proxy unless proxy.catalog says
	// otherwise: the rule is on Proxy.Catalog). A map beside it in the
	// config is a copy for the commands that read the map from the file.
	DSN string `mapstructure:"dsn"`
}

// Loadgen configures the load generator; see `pgshard loadgen run --help`
// for each setting's meaning (each key has the flag of the same name, with
// dashes).
type Loadgen struct {
	// Target is direct (router to the shards), pgbouncer (router to each
	// shard's PgBouncer) or proxy (one DSN to pgshard proxy).
	Target string `mapstructure:"target"`
	// DSN is the proxy's DSN (target proxy).
	DSN string `mapstructure:"dsn"`
	// Duration is the measured period; Warmup precedes it.
	Duration time.Duration `mapstructure:"duration"`
	Warmup   time.Duration `mapstructure:"warmup"`
	// Ops, when > 0, ends the run after that many measured operations.
	Ops int64 `mapstructure:"ops"`
	// Concurrency is the closed loop's workers.
	Concurrency int `mapstructure:"concurrency"`
	// Rate, when > 0, runs the open loop at that many operations/s.
	Rate float64 `mapstructure:"rate"`
	// MaxOutstanding bounds the open loop's operations in flight.
	MaxOutstanding int `mapstructure:"max_outstanding"`
	// LateThreshold: open-loop operations starting later than this after
	// their intended time are counted late.
	LateThreshold time.Duration `mapstructure:"late_threshold"`
	// Executions is how many executions the setup phase creates.
	Executions int `mapstructure:"executions"`
	// Seed makes the workload reproducible.
	Seed uint64 `mapstructure:"seed"`
	// Keys is uniform, zipfian[:theta] or hotset[:share:fraction].
	Keys string `mapstructure:"keys"`
	// Mix is what the commits write.
	Mix LoadgenMix `mapstructure:"mix"`
	// Redelivery is the share of operations that resend a processed event.
	Redelivery float64 `mapstructure:"redelivery"`
	// RetryCap bounds reload-and-retry after conflicts.
	RetryCap int `mapstructure:"retry_cap"`
	// PayloadBytes pads each execution's stored state.
	PayloadBytes int `mapstructure:"payload_bytes"`
	// OpTimeout bounds every call to the target (0: no bound).
	OpTimeout time.Duration `mapstructure:"op_timeout"`
	// Relays runs the outbox relay and timer sweeper during the run.
	Relays bool `mapstructure:"relays"`
	// RelayWorkers is how many deliveries each relay runs at once.
	RelayWorkers int `mapstructure:"relay_workers"`
	// Out is the report directory ("" = loadgen-out/<target>-<time>).
	Out string `mapstructure:"out"`
	// FailIf lists CI thresholds, e.g. "p99(commit)>50ms".
	FailIf []string `mapstructure:"fail_if"`
	// SLO is the latency objective of sweeps, e.g. "p99=50ms".
	SLO string `mapstructure:"slo"`
	// Steps lists a sweep's concurrencies (or rates), e.g. "1,2,4,8,16".
	Steps string `mapstructure:"steps"`
	// TargetRate is the commits/s the capacity model plans for.
	TargetRate float64 `mapstructure:"target_rate"`
	// Headroom is the share of each shard's capacity kept free.
	Headroom float64 `mapstructure:"headroom"`
}

// LoadgenMix is the load generator's commit mix.
type LoadgenMix struct {
	// Fast is the share of state-only (fast path) commits.
	Fast float64 `mapstructure:"fast"`
	// MaxEmits bounds a complex commit's outbox emits.
	MaxEmits int `mapstructure:"max_emits"`
	// Timer is the chance a complex commit schedules or cancels a timer.
	Timer float64 `mapstructure:"timer"`
	// Spawn is the chance a complex commit records a spawn.
	Spawn float64 `mapstructure:"spawn"`
}

// Defaults returns the configuration used for every key nothing else sets.
func Defaults() Config {
	return Config{
		Store: Store{
			UsePooler:       true,
			ConnectAttempts: 15,
			ConnectInterval: time.Second,
			MaxConns:        16,
		},
		Loadgen: Loadgen{
			Target:         "direct",
			Duration:       10 * time.Second,
			Warmup:         2 * time.Second,
			Concurrency:    16,
			MaxOutstanding: 1024,
			LateThreshold:  10 * time.Millisecond,
			Executions:     10000,
			Seed:           1,
			Keys:           "uniform",
			Mix:            LoadgenMix{Fast: 0.6, MaxEmits: 2, Timer: 0.3, Spawn: 0.05},
			Redelivery:     0.05,
			RetryCap:       10,
			PayloadBytes:   256,
			OpTimeout:      30 * time.Second,
			Relays:         true,
			RelayWorkers:   8,
			FailIf:         []string{},
			SLO:            "p99=50ms",
			Steps:          "1,2,4,8,16,32",
			Headroom:       0.3,
		},
		Proxy: DefaultProxy(),
	}
}

// Validate checks every value and names the key of each problem.
func (c *Config) Validate() error {
	var p []string
	if c.ShardMapFile != "" && c.ShardMap != nil {
		p = append(p, "shardmap_file and shardmap: set one of them, not both")
	}
	if c.Proxy.Catalog != "" && !strings.EqualFold(c.Proxy.Catalog, ProxyCatalogOff) && (c.ShardMapFile != "" || c.ShardMap != nil) {
		p = append(p, "proxy.catalog and shardmap_file/shardmap: the proxy takes its shard map from one source; remove shardmap_file and shardmap (`pgshard map push` puts a map file into the catalog), unset proxy.catalog, or name the catalog with catalog.dsn instead (a map beside catalog.dsn is a copy the proxy does not route by)")
	}
	if c.Store.ConnectAttempts < 1 {
		p = append(p, fmt.Sprintf("store.connect_attempts: must be at least 1 (got %d)", c.Store.ConnectAttempts))
	}
	if c.Store.ConnectInterval < 0 {
		p = append(p, fmt.Sprintf("store.connect_interval: must not be negative (got %s)", c.Store.ConnectInterval))
	}
	if c.Store.StatementTimeout < 0 {
		p = append(p, fmt.Sprintf("store.statement_timeout: must not be negative (got %s)", c.Store.StatementTimeout))
	}
	if c.Store.TraceMax < -1 {
		p = append(p, fmt.Sprintf("store.trace_max: must be positive, 0 (the default, 200) or -1 (unbounded) (got %d)", c.Store.TraceMax))
	}
	if c.Store.MaxConns < 1 {
		p = append(p, fmt.Sprintf("store.max_conns: must be at least 1 (got %d)", c.Store.MaxConns))
	}
	p = append(p, c.Loadgen.problems()...)
	p = append(p, c.Proxy.problems()...)
	if len(p) > 0 {
		return errors.New(strings.Join(p, "; "))
	}
	return nil
}

// problems checks the loadgen section (the CLI parses keys, slo, steps
// and fail_if, naming the key on error).
func (l *Loadgen) problems() []string {
	var p []string
	bad := func(key, format string, args ...any) {
		p = append(p, "loadgen."+key+": "+fmt.Sprintf(format, args...))
	}
	switch l.Target {
	case "direct", "pgbouncer", "proxy":
	default:
		bad("target", "want direct, pgbouncer or proxy (got %q)", l.Target)
	}
	if l.Duration <= 0 {
		bad("duration", "must be positive: every run is bounded (got %s)", l.Duration)
	}
	if l.Warmup < 0 {
		bad("warmup", "must not be negative (got %s)", l.Warmup)
	}
	if l.Ops < 0 {
		bad("ops", "must not be negative (got %d)", l.Ops)
	}
	if l.Concurrency < 1 || l.Concurrency > 10000 {
		bad("concurrency", "must be in [1, 10000] (got %d)", l.Concurrency)
	}
	if l.Rate < 0 || l.Rate > 1e7 {
		bad("rate", "must be in [0, 1e7] (got %g)", l.Rate)
	}
	if l.MaxOutstanding < 1 || l.MaxOutstanding > 100000 {
		bad("max_outstanding", "must be in [1, 100000] (got %d)", l.MaxOutstanding)
	}
	if l.LateThreshold <= 0 {
		bad("late_threshold", "must be positive (got %s)", l.LateThreshold)
	}
	if l.Executions < 1 {
		bad("executions", "must be at least 1 (got %d)", l.Executions)
	}
	for key, v := range map[string]float64{"mix.fast": l.Mix.Fast, "mix.timer": l.Mix.Timer, "mix.spawn": l.Mix.Spawn, "redelivery": l.Redelivery} {
		if v < 0 || v > 1 {
			bad(key, "must be in [0, 1] (got %g)", v)
		}
	}
	if l.Mix.MaxEmits < 0 || l.Mix.MaxEmits > 100 {
		bad("mix.max_emits", "must be in [0, 100] (got %d)", l.Mix.MaxEmits)
	}
	if l.OpTimeout < 0 {
		bad("op_timeout", "must not be negative (got %s)", l.OpTimeout)
	}
	if l.RelayWorkers < 1 || l.RelayWorkers > 1000 {
		bad("relay_workers", "must be in [1, 1000] (got %d)", l.RelayWorkers)
	}
	if l.RetryCap < 0 {
		bad("retry_cap", "must not be negative (got %d)", l.RetryCap)
	}
	if l.PayloadBytes < 0 || l.PayloadBytes > 1<<20 {
		bad("payload_bytes", "must be in [0, 1048576] (got %d)", l.PayloadBytes)
	}
	if l.TargetRate < 0 {
		bad("target_rate", "must not be negative (got %g)", l.TargetRate)
	}
	if l.Headroom < 0 || l.Headroom >= 1 {
		bad("headroom", "must be in [0, 1) (got %g)", l.Headroom)
	}
	sort.Strings(p)
	return p
}

// Options say where Load finds its inputs.
type Options struct {
	// Path is the --config flag; "" searches EnvConfig, ./pgshard.yaml and
	// ./.pgshard/pgshard.yaml, in that order.
	Path string
	// Flags holds the command's flags; Bind maps config keys to flag names
	// ("proxy.listen" → "listen"). A flag the user set overrides the key.
	Flags *pflag.FlagSet
	Bind  map[string]string
	// RequireMap makes a config without a shard map an error.
	RequireMap bool
	// CatalogMap, with RequireMap, accepts proxy.catalog instead of a map
	// (the caller loads the map from the catalog).
	CatalogMap bool
	// Environ is the environment to read (nil = os.Environ()).
	Environ []string
}

// Load reads, merges, checks and validates the configuration.
func Load(o Options) (*Config, error) {
	path, err := findFile(o)
	if err != nil {
		return nil, err
	}
	v := viper.New()
	v.SetConfigType("yaml")
	leaves := leafKeys(reflect.TypeOf(Config{}), "")
	def := Defaults()
	for _, l := range leaves {
		if val := fieldByPath(reflect.ValueOf(def), l.index); val.IsValid() && !l.skipDefault {
			v.SetDefault(l.key, val.Interface())
		}
	}
	environ := o.Environ
	if environ == nil {
		environ = os.Environ()
	}
	if err := checkEnv(environ, leaves); err != nil {
		return nil, err
	}
	for _, kv := range environ {
		name, val, _ := strings.Cut(kv, "=")
		if key := envKey(name, leaves); key != "" {
			v.Set(key, val) // explicit Set is simpler than AutomaticEnv and honours o.Environ
		}
	}
	if path != "" {
		raw, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("config: %w", err)
		}
		var doc map[string]any
		if err := yaml.Unmarshal(raw, &doc); err != nil {
			return nil, fmt.Errorf("config %s: %s", path, oneLine(err))
		}
		if IsBareMap(doc) {
			// A shard map file given where a config is expected: the config
			// is the defaults plus this map.
			doc = map[string]any{"shardmap_file": filepath.Base(path)}
		}
		keepEmptyDatabases(doc)
		if err := checkKeys(doc, "", leaves); err != nil {
			return nil, fmt.Errorf("config %s: %w", path, err)
		}
		if err := v.MergeConfigMap(doc); err != nil {
			return nil, fmt.Errorf("config %s: %s", path, oneLine(err))
		}
		// Explicit Set (used for the environment) outranks the file in viper.
	}
	if o.Flags != nil {
		for key, flag := range o.Bind {
			f := o.Flags.Lookup(flag)
			if f == nil {
				return nil, fmt.Errorf("config: key %s is bound to unknown flag --%s", key, flag)
			}
			if f.Changed {
				v.Set(key, f.Value.String())
			}
		}
	}
	var c Config
	if err := v.UnmarshalExact(&c, viper.DecodeHook(decodeHook())); err != nil {
		return nil, fmt.Errorf("config%s: %s", inFile(path), decodeError(err))
	}
	c.Path = path
	if err := c.Validate(); err != nil {
		return nil, fmt.Errorf("config%s: %w", inFile(path), err)
	}
	if err := c.loadMap(); err != nil {
		return nil, fmt.Errorf("config%s: %w", inFile(path), err)
	}
	c.Proxy.Catalog = c.proxyCatalog()
	if o.RequireMap && c.Map == nil && !(o.CatalogMap && c.Proxy.Catalog != "") {
		if path == "" {
			return nil, errors.New("no config file found: pass --config FILE, set " + EnvConfig + ", or run `pgshard dev up` to create " + filepath.Join(DefaultDevDir, "pgshard.yaml"))
		}
		if o.CatalogMap {
			return nil, fmt.Errorf("config %s: no shard map (set shardmap_file, shardmap or proxy.catalog)", path)
		}
		return nil, fmt.Errorf("config %s: no shard map (set shardmap_file or shardmap)", path)
	}
	return &c, nil
}

// ProxyCatalogOff, as proxy.catalog, keeps the proxy on the config's map
// even when catalog.dsn names a catalog.
const ProxyCatalogOff = "off"

// proxyCatalog is the catalog the proxy follows: proxy.catalog, else
// catalog.dsn; none for ProxyCatalogOff (the rule is on Proxy.Catalog).
func (c *Config) proxyCatalog() string {
	switch {
	case strings.EqualFold(c.Proxy.Catalog, ProxyCatalogOff):
		return ""
	case c.Proxy.Catalog != "":
		return c.Proxy.Catalog
	}
	return c.Catalog.DSN
}

func inFile(path string) string {
	if path == "" {
		return ""
	}
	return " " + path
}

func findFile(o Options) (string, error) {
	if o.Path != "" {
		if _, err := os.Stat(o.Path); err != nil {
			return "", fmt.Errorf("config: %w", err)
		}
		return o.Path, nil
	}
	environ := o.Environ
	if environ == nil {
		environ = os.Environ()
	}
	for _, kv := range environ {
		if name, val, _ := strings.Cut(kv, "="); name == EnvConfig && val != "" {
			if _, err := os.Stat(val); err != nil {
				return "", fmt.Errorf("config (from %s): %w", EnvConfig, err)
			}
			return val, nil
		}
	}
	for _, p := range []string{"pgshard.yaml", filepath.Join(DefaultDevDir, "pgshard.yaml")} {
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	return "", nil
}

func (c *Config) loadMap() error {
	var data []byte
	var where string
	switch {
	case c.ShardMapFile != "":
		p := c.ShardMapFile
		if !filepath.IsAbs(p) && c.Path != "" {
			p = filepath.Join(filepath.Dir(c.Path), p)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return fmt.Errorf("shardmap_file: %w", err)
		}
		data, where = b, "shardmap_file "+p
	case c.ShardMap != nil:
		b, err := yaml.Marshal(c.ShardMap)
		if err != nil {
			return fmt.Errorf("shardmap: %w", err)
		}
		data, where = b, "shardmap"
	default:
		return nil
	}
	m, err := shardmap.Parse(data)
	if err != nil {
		return fmt.Errorf("%s: %w", where, err)
	}
	c.Map = m
	return nil
}

// keepEmptyDatabases gives each `proxy.databases` entry written as {} (or
// nothing) an explicit empty map key: viper drops empty maps when merging,
// and the entry would be lost.
func keepEmptyDatabases(doc map[string]any) {
	px, _ := doc["proxy"].(map[string]any)
	dbs, _ := px["databases"].(map[string]any)
	for name, v := range dbs {
		if m, ok := v.(map[string]any); v == nil || ok && len(m) == 0 {
			dbs[name] = map[string]any{"map": ""}
		}
	}
}

// IsBareMap reports whether a decoded YAML document is a shard map on its
// own (top-level shards/ranges) rather than a config file.
func IsBareMap(doc map[string]any) bool {
	_, shards := doc["shards"]
	_, ranges := doc["ranges"]
	return shards || ranges
}

// leaf is one settable key.
type leaf struct {
	key         string // dotted, lowercase
	index       []int  // field path from Config
	skipDefault bool   // free-form subtrees (the inline shard map)
}

func leafKeys(t reflect.Type, prefix string) []leaf {
	var out []leaf
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		tag := strings.Split(f.Tag.Get("mapstructure"), ",")[0]
		if tag == "-" || !f.IsExported() {
			continue
		}
		if tag == "" {
			tag = strings.ToLower(f.Name)
		}
		key := prefix + tag
		if f.Type.Kind() == reflect.Struct && f.Type != reflect.TypeOf(time.Duration(0)) {
			for _, sub := range leafKeys(f.Type, key+".") {
				sub.index = append([]int{i}, sub.index...)
				out = append(out, sub)
			}
			continue
		}
		out = append(out, leaf{key: key, index: []int{i}, skipDefault: f.Type.Kind() == reflect.Map})
	}
	return out
}

func fieldByPath(v reflect.Value, index []int) reflect.Value {
	for _, i := range index {
		v = v.Field(i)
	}
	return v
}

// checkKeys reports every key of a config document that is not a setting.
func checkKeys(doc map[string]any, prefix string, leaves []leaf) error {
	var unknown []string
	var walk func(m map[string]any, prefix string)
	walk = func(m map[string]any, prefix string) {
		for k, val := range m {
			key := prefix + k
			if isLeaf(key, leaves) {
				continue
			}
			sub, isMap := val.(map[string]any)
			if isMap && isSection(key, leaves) {
				walk(sub, key+".")
				continue
			}
			unknown = append(unknown, key)
		}
	}
	walk(doc, prefix)
	if len(unknown) == 0 {
		return nil
	}
	sort.Strings(unknown)
	var p []string
	for _, k := range unknown {
		msg := fmt.Sprintf("unknown key %q", k)
		if s := suggest(k, leaves); s != "" {
			msg += fmt.Sprintf(" (did you mean %q?)", s)
		}
		p = append(p, msg)
	}
	return errors.New(strings.Join(p, "; "))
}

func isLeaf(key string, leaves []leaf) bool {
	return slices.ContainsFunc(leaves, func(l leaf) bool { return l.key == key })
}

func isSection(key string, leaves []leaf) bool {
	return slices.ContainsFunc(leaves, func(l leaf) bool { return strings.HasPrefix(l.key, key+".") })
}

// checkEnv rejects PGSHARD_* variables that set no key (a typo would
// otherwise be silently ignored). Variables of tools and tests are exempt.
func checkEnv(environ []string, leaves []leaf) error {
	var unknown []string
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(name, EnvPrefix+"_") || name == EnvConfig || strings.HasPrefix(name, EnvPrefix+"_TEST_") {
			continue
		}
		if envKey(name, leaves) == "" {
			if s := suggestEnv(name, leaves); s != "" {
				name += fmt.Sprintf(" (did you mean %s?)", s)
			}
			unknown = append(unknown, name)
		}
	}
	if len(unknown) == 0 {
		return nil
	}
	sort.Strings(unknown)
	return fmt.Errorf("environment: %s set no configuration key (keys map to %s_SECTION_KEY, e.g. %s_STORE_TRACE_MAX)",
		strings.Join(unknown, ", "), EnvPrefix, EnvPrefix)
}

// envKey returns the key an environment variable sets, or "".
func envKey(name string, leaves []leaf) string {
	if !strings.HasPrefix(name, EnvPrefix+"_") {
		return ""
	}
	for _, l := range leaves {
		if l.skipDefault {
			continue // the shard map cannot be set piecewise from the environment
		}
		if EnvName(l.key) == name {
			return l.key
		}
	}
	return ""
}

// suggestEnv returns the known variable closest to name, if it is close.
func suggestEnv(name string, leaves []leaf) string {
	best, bestD := "", 4
	for _, l := range leaves {
		if l.skipDefault {
			continue
		}
		if d := levenshtein(name, EnvName(l.key)); d < bestD {
			best, bestD = EnvName(l.key), d
		}
	}
	return best
}

// EnvName is the environment variable that sets key.
func EnvName(key string) string {
	return EnvPrefix + "_" + strings.ToUpper(strings.ReplaceAll(key, ".", "_"))
}

// suggest returns the known key closest to k, if it is close.
func suggest(k string, leaves []leaf) string {
	best, bestD := "", 4
	for _, l := range leaves {
		if d := levenshtein(k, l.key); d < bestD {
			best, bestD = l.key, d
		}
	}
	return best
}

func levenshtein(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

func oneLine(err error) string {
	return strings.Join(strings.Fields(strings.ReplaceAll(err.Error(), "\n", "; ")), " ")
}

// decodeHook converts strings (from the environment, flags or quoted YAML)
// to the setting's type with errors that quote the bad value, and keeps
// viper's usual conversions (durations, comma-separated lists).
func decodeHook() mapstructure.DecodeHookFunc {
	durationType := reflect.TypeOf(time.Duration(0))
	return mapstructure.ComposeDecodeHookFunc(
		func(from, to reflect.Type, data any) (any, error) {
			s, ok := data.(string)
			if !ok || from.Kind() != reflect.String {
				return data, nil
			}
			s = strings.TrimSpace(s)
			switch {
			case to == durationType:
				d, err := time.ParseDuration(s)
				if err != nil {
					return nil, fmt.Errorf("%q is not a duration (write e.g. 250ms, 1s, 2m)", s)
				}
				return d, nil
			case to.Kind() >= reflect.Int && to.Kind() <= reflect.Int64:
				n, err := strconv.ParseInt(s, 10, to.Bits())
				if err != nil {
					return nil, fmt.Errorf("%q is not an integer", s)
				}
				return n, nil
			case to.Kind() >= reflect.Uint && to.Kind() <= reflect.Uint64:
				n, err := strconv.ParseUint(s, 10, to.Bits())
				if err != nil {
					return nil, fmt.Errorf("%q is not a non-negative integer", s)
				}
				return n, nil
			case to.Kind() == reflect.Float32 || to.Kind() == reflect.Float64:
				f, err := strconv.ParseFloat(s, to.Bits())
				if err != nil {
					return nil, fmt.Errorf("%q is not a number", s)
				}
				return f, nil
			case to.Kind() == reflect.Bool:
				b, err := strconv.ParseBool(s)
				if err != nil {
					return nil, fmt.Errorf("%q is not true or false", s)
				}
				return b, nil
			}
			return data, nil
		},
		mapstructure.StringToSliceHookFunc(","),
		// proxy.databases as a list of names (the older form): each is
		// the config's sharded database.
		func(from, to reflect.Type, data any) (any, error) {
			if to != reflect.TypeOf(map[string]ProxyDatabase{}) {
				return data, nil
			}
			var names []string
			switch l := data.(type) {
			case []any:
				for _, n := range l {
					names = append(names, fmt.Sprint(n))
				}
			case []string:
				names = l
			case string:
				for _, n := range strings.Split(l, ",") {
					if n = strings.TrimSpace(n); n != "" {
						names = append(names, n)
					}
				}
			default:
				return data, nil
			}
			m := map[string]any{}
			for _, n := range names {
				m[n] = map[string]any{}
			}
			return m, nil
		},
	)
}

// decodeError turns mapstructure's multi-line report into one line that
// names each key.
func decodeError(err error) string {
	s := err.Error()
	s = strings.TrimPrefix(s, "decoding failed due to the following error(s):")
	var parts []string
	for _, line := range strings.Split(s, "\n") {
		line = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(line), "*"))
		// "'store.max_conns' msg" → "store.max_conns: msg", as Validate words it.
		if rest, ok := strings.CutPrefix(line, "'"); ok {
			if key, msg, ok := strings.Cut(rest, "' "); ok && !strings.ContainsAny(key, " '") {
				line = key + ": " + msg
			}
		}
		if line != "" {
			parts = append(parts, line)
		}
	}
	return strings.Join(parts, "; ")
}

// Proxy configures `pgshard proxy`, the wire-protocol sharding proxy (see
// package proxy for what each setting does).
type Proxy struct {
	// Listen is the address clients connect to.
	Listen string `mapstructure:"listen"`
	// UsePooler connects to each shard through its PgBouncer when the map
	// has one (else directly to Postgres).
	UsePooler bool `mapstructure:"use_pooler"`
	// Users may log in: name + password (plain or a SCRAM-SHA-256
	// verifier), or trust.
	Users []ProxyUser `mapstructure:"users"`
	// Databases maps the database names clients may use (dbname) to what
	// they are, like PgBouncer's [databases]: {} is the config's sharded
	// database (the shard map above), {dsn: ...} one backend database
	// passed through unsharded, {map: FILE} a sharded database of its own.
	// Empty: the shards' own database names (each shard DSN's dbname);
	// "*": {} accepts any name as the sharded database. A list of names
	// is accepted as {name: {}} for each.
	Databases map[string]ProxyDatabase `mapstructure:"databases"`
	// PoolSize bounds the backend connections per shard.
	PoolSize int `mapstructure:"pool_size"`
	// MaxClients bounds concurrent client connections.
	MaxClients int `mapstructure:"max_clients"`
	// MaxMessageSize bounds one client message in bytes.
	MaxMessageSize int `mapstructure:"max_message_size"`
	// MaxPipelineBytes bounds the extended-protocol bytes buffered before
	// a Sync or Flush (0 = 4 × max_message_size).
	MaxPipelineBytes int `mapstructure:"max_pipeline_bytes"`
	// ConnectTimeout bounds connecting to a shard.
	ConnectTimeout time.Duration `mapstructure:"connect_timeout"`
	// PoolTimeout bounds the wait for a free backend connection.
	PoolTimeout time.Duration `mapstructure:"pool_timeout"`
	// IdleTimeout closes backend connections idle for longer.
	IdleTimeout time.Duration `mapstructure:"idle_timeout"`
	// IdleInTransactionTimeout closes clients idle inside a transaction
	// for longer (0 = never).
	IdleInTransactionTimeout time.Duration `mapstructure:"idle_in_transaction_timeout"`
	// DefaultShard runs key-less statements that must run on one fixed
	// shard ("" = the map's first shard).
	DefaultShard string `mapstructure:"default_shard"`
	// StatementCacheSize is the server-side prepared statements kept per
	// direct backend connection (-1 = none).
	StatementCacheSize int `mapstructure:"statement_cache_size"`
	// CacheUnnamedStatements lets that cache serve clients' unnamed
	// statements too, from a text's second use.
	CacheUnnamedStatements bool `mapstructure:"cache_unnamed_statements"`
	// MergeGroupLimit bounds the merged groups a read of every shard may
	// buffer to sort them (GROUP BY ordered by an aggregate).
	MergeGroupLimit int `mapstructure:"merge_group_limit"`
	// CursorBufferBytes bounds the rows a read of every shard fetched in
	// parts (JDBC's fetch size, a cursor) keeps in the proxy.
	CursorBufferBytes int `mapstructure:"cursor_buffer_bytes"`
	// VerifyIdentity checks every shard's identity record against the map.
	VerifyIdentity bool `mapstructure:"verify_identity"`
	// MetricsListen, when set, serves Prometheus metrics at /metrics.
	MetricsListen string `mapstructure:"metrics_listen"`
	// PoolMode is transaction (each transaction on a pooled backend;
	// session state pins the client) or session (every client has a
	// backend of its own); users[].pool_mode overrides it.
	PoolMode string `mapstructure:"pool_mode"`
	// MaxPinned bounds the sessions pinned in transaction pooling
	// (-1 = no bound).
	MaxPinned int `mapstructure:"max_pinned"`
	// Schema is the sharding schema: keyed tables and columns, key
	// functions, global tables. The default is the execution store's.
	Schema Schema `mapstructure:"schema"`
	// HealthInterval is how often each shard's server is probed (a TCP
	// connect); a shard that does not answer fails its transactions at once.
	HealthInterval time.Duration `mapstructure:"health_interval"`
	// AdminUsers may use the admin console (the virtual database
	// AdminDatabase); they must be users too. Empty: no console.
	AdminUsers []string `mapstructure:"admin_users"`
	// AdminDatabase is the admin console's database name.
	AdminDatabase string `mapstructure:"admin_database"`
	// TLS is TLS towards clients.
	TLS ProxyTLS `mapstructure:"tls"`
	// PgBouncer is the back-pressure from each shard's PgBouncer.
	PgBouncer ProxyPgBouncer `mapstructure:"pgbouncer"`
	// ShutdownTimeout bounds a graceful shutdown (SIGTERM, SHUTDOWN).
	ShutdownTimeout time.Duration `mapstructure:"shutdown_timeout"`
	// PauseTimeout bounds how long PAUSE holds a new transaction.
	PauseTimeout time.Duration `mapstructure:"pause_timeout"`
	// ReusePort sets SO_REUSEPORT on the listeners.
	ReusePort bool `mapstructure:"reuse_port"`
	// HandoverSocket is the unix socket on which a running proxy hands its
	// listening sockets to a new process (zero-downtime restart); relative
	// paths are relative to the config file.
	HandoverSocket string `mapstructure:"handover_socket"`
	// Catalog is the DSN of the shard-map catalog the proxy takes its map
	// from: it reads the map at start, follows each newer epoch and holds
	// a lease (kind "proxy") renewed every catalog_lease_ttl/3; while the
	// lease is not live, statements routed by a key are refused.
	//
	// The rule with catalog.dsn (both name the catalog): unset, it is
	// catalog.dsn — the proxy follows the cluster's catalog like every
	// other command, and a map beside catalog.dsn in the config is a copy
	// (what `pgshard dev up` writes) that the proxy does not route by. Set
	// to a DSN, it overrides catalog.dsn for the proxy alone (the same
	// catalog by another address) and the config must then hold no map.
	// ProxyCatalogOff keeps the proxy on the config's map although
	// catalog.dsn is set. Load applies the rule: after it, Catalog is the
	// DSN the proxy follows, "" for none.
	Catalog string `mapstructure:"catalog"`
	// CatalogLeaseTTL is the proxy's lease TTL in the catalog.
	CatalogLeaseTTL time.Duration `mapstructure:"catalog_lease_ttl"`
	// Fence is auto (assert keys on shards that have the fence, migration
	// 0008), on or off: whether a keyed transaction asserts its key
	// against the shard's fence.
	Fence string `mapstructure:"fence"`
	// Procs is how many CPUs run the proxy's Go code at once
	// (GOMAXPROCS), set once at start: 1, the default (PgBouncer's model),
	// or more; 0 keeps Go's own choice (the GOMAXPROCS environment
	// variable, else the CPUs the process may use). DefaultProxyProcs says
	// why 1.
	Procs int `mapstructure:"procs"`
}

// DefaultProxyProcs is proxy.procs's default: 1. With 1,
// one CPU runs the proxy's Go code, as one thread runs PgBouncer (PgDog's workers setting is the same
// knob): a keyed point SELECT spends about 70 % of the proxy's CPU in the
// kernel's loopback reads and writes, and with more than one P the Go
// scheduler adds its own cost per round trip (threads spinning for work,
// futex wake-ups, work stealing: findRunnable was 19 % of the CPU profile
// with 2 Ps, 9 % with 1; 4.61 system calls per transaction, 4.38 with 1,
// PgBouncer 4.15). Measured with `make bench-proxy`'s load (pgbench -M
// extended, keyed point SELECT, 16 and 64 clients, a 2-core machine shared
// with other work; procs 1, Go's default (2 here) and PgBouncer
// interleaved in each run; 10 comparisons in 6 runs, load average 1–29):
// procs 1 spent 0.82–1.05× (mean 0.95×) the CPU per transaction of Go's
// default, the gain largest with a core to spare; its tps was 0.73–1.30×
// the default's and 1.17–1.81× PgBouncer's, above it in every run. A proxy
// that must serve more than one core's worth of transactions sets procs
// higher (or 0, every CPU) and pays for the throughput in CPU per
// transaction. A fresh-clone chaos run with 1 once corroborated 6 of 21
// lost acknowledgements (VACUOUS); that was the machine's wall clock, not
// procs (the relay timed dropped replies on the wall clock, which ran
// 0.5 % ahead of the monotonic one and jumped 26 s; chaos now times them
// on the history's monotonic clock), and chaos runs at procs 1 have
// landed every lost ack since.
const DefaultProxyProcs = 1

// MaxProxyProcs bounds proxy.procs.
const MaxProxyProcs = 1024

// ProxyTLS is TLS towards the proxy's clients.
type ProxyTLS struct {
	// Mode is disable, allow or require (plain-text clients refused).
	Mode string `mapstructure:"mode"`
	// CertFile and KeyFile are PEM files (relative paths are relative to
	// the config file), read at start and at each reload.
	CertFile string `mapstructure:"cert_file"`
	KeyFile  string `mapstructure:"key_file"`
}

// ProxyPgBouncer configures reading each shard's PgBouncer admin console
// and the back-pressure it drives.
type ProxyPgBouncer struct {
	// AdminUser is in PgBouncer's admin_users or stats_users ("" = off).
	AdminUser string `mapstructure:"admin_user"`
	// AdminPassword is its password (plain text; "" for trust).
	AdminPassword string `mapstructure:"admin_password"`
	// PollInterval is how often each PgBouncer is read.
	PollInterval time.Duration `mapstructure:"poll_interval"`
	// MaxWaiting fails new transactions for a shard while its PgBouncer's
	// cl_waiting is at least this (0 = never).
	MaxWaiting int `mapstructure:"max_waiting"`
	// MaxWait does the same while PgBouncer's maxwait is at least this.
	MaxWait time.Duration `mapstructure:"max_wait"`
}

// ProxyDatabase is one logical database of the proxy (proxy.databases).
type ProxyDatabase struct {
	// DSN, when set, makes the database an unsharded passthrough to this
	// one backend database (its PgBouncer: PoolerDSN, with use_pooler).
	DSN       string `mapstructure:"dsn"`
	PoolerDSN string `mapstructure:"pooler_dsn"`
	// Map is a shard map file (relative to the config file) for a
	// sharded database of its own; "" with no DSN: the config's map.
	Map string `mapstructure:"map"`
	// DefaultShard is where its unsharded tables live ("" = proxy.default_shard
	// for the config's map, else the map's first shard).
	DefaultShard string `mapstructure:"default_shard"`
	// PoolMode overrides proxy.pool_mode for this database.
	PoolMode string `mapstructure:"pool_mode"`
}

// ProxyUser is a client login of the proxy.
type ProxyUser struct {
	Name string `mapstructure:"name"`
	// Password is plain text or "SCRAM-SHA-256$<iterations>:<salt>$<StoredKey>:<ServerKey>".
	Password string `mapstructure:"password"`
	// Trust admits the user without a password (development only).
	Trust bool `mapstructure:"trust"`
	// PoolMode overrides proxy.pool_mode for this user ("" = inherit).
	PoolMode string `mapstructure:"pool_mode"`
}

// DefaultProxy is the proxy section's defaults.
func DefaultProxy() Proxy {
	return Proxy{
		Listen:                 "127.0.0.1:6543",
		UsePooler:              true,
		Users:                  []ProxyUser{},
		Databases:              map[string]ProxyDatabase{},
		PoolSize:               20,
		MaxClients:             1000,
		MaxMessageSize:         64 << 20,
		ConnectTimeout:         5 * time.Second,
		PoolTimeout:            10 * time.Second,
		IdleTimeout:            5 * time.Minute,
		StatementCacheSize:     256,
		CacheUnnamedStatements: true,
		MergeGroupLimit:        100000,
		CursorBufferBytes:      64 << 20,
		PoolMode:               "transaction",
		MaxPinned:              100,
		VerifyIdentity:         true,
		Schema:                 DefaultSchema(),
		HealthInterval:         time.Second,
		AdminUsers:             []string{},
		AdminDatabase:          "pgshard",
		TLS:                    ProxyTLS{Mode: "disable"},
		PgBouncer:              ProxyPgBouncer{PollInterval: time.Second},
		ShutdownTimeout:        10 * time.Second,
		PauseTimeout:           2 * time.Minute,
		Catalog:                "",
		CatalogLeaseTTL:        10 * time.Second,
		Fence:                  "auto",
		Procs:                  DefaultProxyProcs,
	}
}

// problems checks the proxy section, naming each key.
func (x *Proxy) problems() []string {
	var p []string
	bad := func(key, format string, args ...any) {
		p = append(p, "proxy."+key+": "+fmt.Sprintf(format, args...))
	}
	if x.Listen == "" {
		bad("listen", "must not be empty (host:port)")
	}
	if x.PoolSize < 1 || x.PoolSize > 10000 {
		bad("pool_size", "must be in [1, 10000] (got %d)", x.PoolSize)
	}
	if x.MaxClients < 1 || x.MaxClients > 1000000 {
		bad("max_clients", "must be in [1, 1000000] (got %d)", x.MaxClients)
	}
	if x.MaxMessageSize < 1024 || x.MaxMessageSize > 1<<30 {
		bad("max_message_size", "must be between 1024 and 1073741824 bytes (got %d)", x.MaxMessageSize)
	}
	if x.MaxPipelineBytes != 0 && x.MaxPipelineBytes < x.MaxMessageSize {
		bad("max_pipeline_bytes", "must be 0 or at least max_message_size (got %d)", x.MaxPipelineBytes)
	}
	for key, d := range map[string]time.Duration{"connect_timeout": x.ConnectTimeout, "pool_timeout": x.PoolTimeout, "idle_timeout": x.IdleTimeout} {
		if d <= 0 {
			bad(key, "must be positive (got %s)", d)
		}
	}
	if x.IdleInTransactionTimeout < 0 {
		bad("idle_in_transaction_timeout", "must not be negative (got %s)", x.IdleInTransactionTimeout)
	}
	if x.Procs < 0 || x.Procs > MaxProxyProcs {
		bad("procs", "must be in [0, %d]: 0 keeps Go's default (GOMAXPROCS, else the CPU count) (got %d)", MaxProxyProcs, x.Procs)
	}
	if x.StatementCacheSize < -1 {
		bad("statement_cache_size", "must be -1 (off) or more (got %d)", x.StatementCacheSize)
	}
	if m := strings.ToLower(x.PoolMode); m != "transaction" && m != "session" {
		bad("pool_mode", "want transaction or session (got %q)", x.PoolMode)
	}
	switch strings.ToLower(x.Fence) {
	case "auto", "on", "off":
	default:
		bad("fence", "want auto, on or off (got %q)", x.Fence)
	}
	if x.CatalogLeaseTTL < 30*time.Millisecond {
		bad("catalog_lease_ttl", "must be at least 30ms (renewed every ttl/3; got %s)", x.CatalogLeaseTTL)
	}
	if x.MaxPinned < -1 || x.MaxPinned == 0 {
		bad("max_pinned", "must be -1 (no bound) or at least 1 (got %d)", x.MaxPinned)
	}
	for name, d := range x.Databases {
		key := "databases." + name
		switch {
		case name == "":
			bad("databases", "a database name is empty")
		case d.DSN != "" && d.Map != "":
			bad(key, "set dsn (unsharded passthrough) or map (sharded), not both")
		case d.DSN == "" && d.PoolerDSN != "":
			bad(key+".pooler_dsn", "needs dsn")
		}
		if m := strings.ToLower(d.PoolMode); m != "" && m != "transaction" && m != "session" {
			bad(key+".pool_mode", "want transaction, session or empty (got %q)", d.PoolMode)
		}
	}
	if x.MergeGroupLimit < 1 {
		bad("merge_group_limit", "must be at least 1 (got %d)", x.MergeGroupLimit)
	}
	if x.CursorBufferBytes < 1 {
		bad("cursor_buffer_bytes", "must be at least 1 (got %d)", x.CursorBufferBytes)
	}
	seen := map[string]bool{}
	for i, u := range x.Users {
		switch {
		case u.Name == "":
			bad(fmt.Sprintf("users[%d].name", i), "must not be empty")
		case seen[u.Name]:
			bad(fmt.Sprintf("users[%d].name", i), "duplicate user %q", u.Name)
		}
		seen[u.Name] = true
		if !u.Trust && u.Password == "" {
			bad(fmt.Sprintf("users[%d]", i), "user %q needs a password or trust: true", u.Name)
		}
		if m := strings.ToLower(u.PoolMode); m != "" && m != "transaction" && m != "session" {
			bad(fmt.Sprintf("users[%d].pool_mode", i), "want transaction, session or empty (got %q)", u.PoolMode)
		}
		if u.Trust && u.Password != "" {
			bad(fmt.Sprintf("users[%d]", i), "user %q has both a password and trust: true; choose one", u.Name)
		}
	}
	if err := x.Schema.Validate(); err != nil {
		bad("schema", "%s", strings.TrimPrefix(err.Error(), "sharding schema: "))
	}
	for key, d := range map[string]time.Duration{"health_interval": x.HealthInterval, "shutdown_timeout": x.ShutdownTimeout,
		"pause_timeout": x.PauseTimeout, "pgbouncer.poll_interval": x.PgBouncer.PollInterval} {
		if d <= 0 {
			bad(key, "must be positive (got %s)", d)
		}
	}
	if x.PgBouncer.MaxWait < 0 {
		bad("pgbouncer.max_wait", "must not be negative (got %s)", x.PgBouncer.MaxWait)
	}
	if x.PgBouncer.MaxWaiting < 0 {
		bad("pgbouncer.max_waiting", "must not be negative (got %d)", x.PgBouncer.MaxWaiting)
	}
	if (x.PgBouncer.MaxWaiting > 0 || x.PgBouncer.MaxWait > 0) && x.PgBouncer.AdminUser == "" {
		bad("pgbouncer.admin_user", "the back-pressure thresholds need PgBouncer's admin console: set admin_user")
	}
	if x.AdminDatabase == "" {
		bad("admin_database", "must not be empty")
	}
	for i, a := range x.AdminUsers {
		if a == "" {
			bad(fmt.Sprintf("admin_users[%d]", i), "must not be empty")
		}
	}
	if _, dup := x.Databases[x.AdminDatabase]; len(x.AdminUsers) > 0 && dup {
		bad("admin_database", "%q is also in proxy.databases; the admin console needs a name of its own", x.AdminDatabase)
	}
	switch x.TLS.Mode {
	case "disable":
	case "allow", "require":
		if x.TLS.CertFile == "" || x.TLS.KeyFile == "" {
			bad("tls", "mode %s needs cert_file and key_file", x.TLS.Mode)
		}
	default:
		bad("tls.mode", "want disable, allow or require (got %q)", x.TLS.Mode)
	}
	sort.Strings(p)
	return p
}
