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
	"strings"
	"time"

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
	// TraceMax caps each execution's trace ring (0 = unbounded).
	TraceMax int `mapstructure:"trace_max"`
	// MaxConns bounds each shard's pool.
	MaxConns int `mapstructure:"max_conns"`
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
	}
}

// Validate checks every value and names the key of each problem.
func (c *Config) Validate() error {
	var p []string
	if c.ShardMapFile != "" && c.ShardMap != nil {
		p = append(p, "shardmap_file and shardmap: set one of them, not both")
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
	if c.Store.TraceMax < 0 {
		p = append(p, fmt.Sprintf("store.trace_max: must not be negative (got %d)", c.Store.TraceMax))
	}
	if c.Store.MaxConns < 1 {
		p = append(p, fmt.Sprintf("store.max_conns: must be at least 1 (got %d)", c.Store.MaxConns))
	}
	if len(p) > 0 {
		return errors.New(strings.Join(p, "; "))
	}
	return nil
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
	if err := v.UnmarshalExact(&c); err != nil {
		return nil, fmt.Errorf("config%s: %s", inFile(path), decodeError(err))
	}
	c.Path = path
	if err := c.Validate(); err != nil {
		return nil, fmt.Errorf("config%s: %w", inFile(path), err)
	}
	if err := c.loadMap(); err != nil {
		return nil, fmt.Errorf("config%s: %w", inFile(path), err)
	}
	if o.RequireMap && c.Map == nil {
		if path == "" {
			return nil, errors.New("no config file found: pass --config FILE, set " + EnvConfig + ", or run `pgshard dev up` to create " + filepath.Join(DefaultDevDir, "pgshard.yaml"))
		}
		return nil, fmt.Errorf("config %s: no shard map (set shardmap_file or shardmap)", path)
	}
	return &c, nil
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

// decodeError turns mapstructure's multi-line report into one line that
// names each key.
func decodeError(err error) string {
	s := err.Error()
	s = strings.TrimPrefix(s, "decoding failed due to the following error(s):")
	var parts []string
	for _, line := range strings.Split(s, "\n") {
		line = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(line), "*"))
		if line != "" {
			parts = append(parts, line)
		}
	}
	return strings.Join(parts, "; ")
}
