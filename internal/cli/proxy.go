package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strings"

	"github.com/spf13/cobra"

	"github.com/pgshard/pgshard/internal/config"
	"github.com/pgshard/pgshard/proxy"
	"github.com/pgshard/pgshard/proxy/route"
)

// proxyReady is what `pgshard proxy --ready-file` writes once it listens.
type proxyReady struct {
	PID  int    `json:"pid"`
	Addr string `json:"addr"`
}

func newProxyCmd() *cobra.Command {
	var listen, readyFile, logLevel, cpuProfile string
	var trustUsers []string
	cmd := &cobra.Command{
		Use:   "proxy",
		Short: "Run the Postgres wire-protocol sharding proxy",
		Long: `Run pgshard's proxy: clients (psql, pgbench, pgx, psycopg, JDBC, node-postgres,
...) connect to it as to one PostgreSQL database; each transaction runs on the
shard that owns the first key it touches, through each shard's PgBouncer
(proxy.use_pooler) or directly. Statements that belong to another shard than
their transaction's fail with SQLSTATE 0A000; key-less reads fan out and are
merged; key-less DDL runs on every shard.

The config's proxy section sets users (SCRAM-SHA-256 or trust), pool sizes,
limits, timeouts and the sharding schema. At start the proxy checks every
shard's identity record against the map and refuses to start on a mismatch; a
shard that is down at start only fails the transactions that need it.

Stop it with SIGINT or SIGTERM.`,
		Args: cobra.NoArgs,
	}
	cfgPath := addConfigFlag(cmd)
	cmd.Flags().StringVar(&listen, "listen", "", "address to listen on (default proxy.listen, 127.0.0.1:6543); port 0 picks a free port")
	cmd.Flags().StringArrayVar(&trustUsers, "trust-user", nil, "also admit USER without a password (local development; repeatable)")
	cmd.Flags().StringVar(&readyFile, "ready-file", "", "write {\"pid\":...,\"addr\":...} to this file once listening")
	cmd.Flags().StringVar(&logLevel, "log-level", "info", "log level: debug, info, warn or error")
	cmd.Flags().StringVar(&cpuProfile, "cpuprofile", "", "write a CPU profile of the whole run to this file")
	_ = cmd.Flags().MarkHidden("cpuprofile")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		cfg, err := config.Load(config.Options{Path: *cfgPath, Flags: cmd.Flags(), Bind: map[string]string{"proxy.listen": "listen"}, RequireMap: true})
		if err != nil {
			return err
		}
		var level slog.Level
		if err := level.UnmarshalText([]byte(logLevel)); err != nil {
			return usagef("--log-level: %v", err)
		}
		log := slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), &slog.HandlerOptions{Level: level}))
		pc, err := proxyConfig(cfg, trustUsers, log)
		if err != nil {
			return err
		}
		if cpuProfile != "" {
			f, err := os.Create(cpuProfile)
			if err != nil {
				return err
			}
			defer f.Close()
			if err := pprof.StartCPUProfile(f); err != nil {
				return err
			}
			defer pprof.StopCPUProfile()
		}
		return runProxy(cmd.Context(), pc, cfg.Proxy.VerifyIdentity, readyFile, log)
	}
	return cmd
}

// proxyConfig builds the proxy's configuration from the loaded config.
func proxyConfig(cfg *config.Config, trustUsers []string, log *slog.Logger) (proxy.Config, error) {
	x := cfg.Proxy
	schema, err := x.Schema.ToSchema()
	if err != nil {
		return proxy.Config{}, fmt.Errorf("config: proxy.schema: %w", err)
	}
	an, err := route.New(cfg.Map, schema, route.Options{})
	if err != nil {
		return proxy.Config{}, fmt.Errorf("proxy: %w", err)
	}
	pc := proxy.Config{
		Map:                      cfg.Map,
		Analyzer:                 an,
		HintKeyType:              schema.HintType,
		Listen:                   x.Listen,
		UsePooler:                x.UsePooler,
		PoolSize:                 x.PoolSize,
		MaxClients:               x.MaxClients,
		MaxMessageSize:           x.MaxMessageSize,
		MaxPipelineBytes:         x.MaxPipelineBytes,
		ConnectTimeout:           x.ConnectTimeout,
		PoolTimeout:              x.PoolTimeout,
		IdleTimeout:              x.IdleTimeout,
		IdleInTransactionTimeout: x.IdleInTransactionTimeout,
		DefaultShard:             x.DefaultShard,
		Databases:                x.Databases,
		StatementCacheSize:       x.StatementCacheSize,
		VerifyIdentity:           x.VerifyIdentity,
		MetricsListen:            x.MetricsListen,
		Logger:                   log,
	}
	for _, u := range x.Users {
		pc.Users = append(pc.Users, proxy.User{Name: u.Name, Password: u.Password, Trust: u.Trust})
	}
	for _, u := range trustUsers {
		if u == "" {
			return proxy.Config{}, usagef("--trust-user: empty user name")
		}
		dup := false
		for _, have := range pc.Users {
			dup = dup || have.Name == u
		}
		if !dup {
			pc.Users = append(pc.Users, proxy.User{Name: u, Trust: true})
		}
	}
	if len(pc.Users) == 0 {
		return proxy.Config{}, fmt.Errorf("config%s: proxy.users is empty: nobody could log in (add users, or --trust-user NAME for local development)", inConfigFile(cfg.Path))
	}
	return pc, nil
}

func inConfigFile(path string) string {
	if path == "" {
		return ""
	}
	return " " + path
}

// runProxy verifies the shards, listens, announces readiness and serves
// until ctx ends.
func runProxy(ctx context.Context, pc proxy.Config, verify bool, readyFile string, log *slog.Logger) error {
	srv, err := proxy.New(pc)
	if err != nil {
		return err
	}
	if verify {
		down, err := srv.Verify(ctx)
		if err != nil {
			return fmt.Errorf("proxy: the shard map and the shards disagree: %w", err)
		}
		if len(down) > 0 {
			log.Warn("starting with shards down", "shards", strings.Join(down, ","))
		}
	}
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", pc.Listen)
	if err != nil {
		return fmt.Errorf("proxy: listen on %s: %w", pc.Listen, err)
	}
	if readyFile != "" {
		b, _ := json.Marshal(proxyReady{PID: os.Getpid(), Addr: ln.Addr().String()})
		tmp := readyFile + ".tmp"
		if err := os.MkdirAll(filepath.Dir(readyFile), 0o755); err != nil {
			_ = ln.Close()
			return err
		}
		if err := os.WriteFile(tmp, b, 0o644); err != nil {
			_ = ln.Close()
			return err
		}
		if err := os.Rename(tmp, readyFile); err != nil {
			_ = ln.Close()
			return err
		}
		defer os.Remove(readyFile)
	}
	return srv.Serve(ctx, ln)
}
