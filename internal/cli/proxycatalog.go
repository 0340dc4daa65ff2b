package cli

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/pgshard/pgshard/catalog"
	"github.com/pgshard/pgshard/internal/config"
	"github.com/pgshard/pgshard/proxy"
	"github.com/pgshard/pgshard/store"
)

// proxyCatalog is the shard-map catalog a proxy follows (proxy.catalog).
type proxyCatalog struct {
	cat *catalog.Catalog
	f   *catalog.Follower
	dsn string
}

// openProxyCatalog opens proxy.catalog, reads its map into cfg.Map and
// builds the proxy's follower (lease kind "proxy"); nil without a
// catalog.
func openProxyCatalog(ctx context.Context, cfg *config.Config, log *slog.Logger) (*proxyCatalog, error) {
	dsn := cfg.Proxy.Catalog
	if dsn == "" {
		return nil, nil
	}
	fc, err := openFollower(ctx, dsn, "proxy", "proxy", cfg.Proxy.CatalogLeaseTTL, func(string) func(error) {
		return func(err error) { log.Warn("shard-map catalog", "catalog", store.RedactDSN(dsn), "err", err) }
	})
	if err != nil {
		return nil, fmt.Errorf("config: proxy.catalog %s: %w", store.RedactDSN(dsn), err)
	}
	cfg.Map = fc.m
	return &proxyCatalog{cat: fc.cat, f: fc.f, dsn: dsn}, nil
}

// loadInto reads the catalog's map in force into cfg.Map.
func (pc *proxyCatalog) loadInto(ctx context.Context, cfg *config.Config) error {
	m, err := pc.cat.Load(ctx)
	if err != nil {
		return fmt.Errorf("proxy: the shard map from the catalog %s: %w", store.RedactDSN(pc.dsn), err)
	}
	cfg.Map = m
	return nil
}

// apply makes pc the proxy configuration's map source.
func (pc *proxyCatalog) apply(c *proxy.Config) {
	c.Follow, c.CatalogName = pc.f, store.RedactDSN(pc.dsn)
}

// close closes the catalog (after the proxy stopped).
func (pc *proxyCatalog) close() {
	if pc != nil {
		pc.cat.Close()
	}
}
