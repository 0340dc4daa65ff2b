package config_test

import (
	"strings"
	"testing"
	"time"

	"github.com/pgshard/pgshard/internal/config"
)

// TestProxyCatalog: proxy.catalog replaces the map file for the proxy
// (CatalogMap), excludes shardmap_file and shardmap, and its lease TTL and
// the fence mode are checked; unknown keys stay errors.
func TestProxyCatalog(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "map.yaml", mapYAML)
	const dsn = "postgres://u@h/cat"
	for _, tc := range []struct {
		name, body string
		want       string // error substring; "" = loads
	}{
		{"catalog alone", "proxy:\n  catalog: " + dsn + "\n", ""},
		{"catalog, ttl and fence", "proxy:\n  catalog: " + dsn + "\n  catalog_lease_ttl: 3s\n  fence: off\n", ""},
		{"catalog and map file", "shardmap_file: map.yaml\nproxy:\n  catalog: " + dsn + "\n", "proxy.catalog and shardmap_file/shardmap"},
		{"catalog and inline map", "shardmap:\n" + indent(mapYAML) + "proxy:\n  catalog: " + dsn + "\n", "proxy.catalog and shardmap_file/shardmap"},
		{"bad fence", "shardmap_file: map.yaml\nproxy:\n  fence: maybe\n", `proxy.fence: want auto, on or off (got "maybe")`},
		{"short ttl", "proxy:\n  catalog: " + dsn + "\n  catalog_lease_ttl: 10ms\n", "proxy.catalog_lease_ttl: must be at least 30ms"},
		{"unknown key", "proxy:\n  catalog: " + dsn + "\n  catalog_dsn: x\n", "proxy.catalog_dsn"},
		{"no map, no catalog", "proxy:\n  fence: on\n", "set shardmap_file, shardmap or proxy.catalog"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := config.Load(config.Options{Path: write(t, dir, "c.yaml", tc.body), Environ: []string{}, RequireMap: true, CatalogMap: true})
			if tc.want != "" {
				if err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("err = %v, want one containing %q", err, tc.want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if c.Proxy.Catalog != dsn || c.Map != nil {
				t.Fatalf("catalog %q, map %v: want the catalog and no map (the proxy loads it)", c.Proxy.Catalog, c.Map)
			}
		})
	}
	// Without CatalogMap (every other command) a catalog is no map.
	if _, err := config.Load(config.Options{Path: write(t, dir, "c.yaml", "proxy:\n  catalog: "+dsn+"\n"), Environ: []string{}, RequireMap: true}); err == nil {
		t.Fatal("RequireMap without CatalogMap accepted a config whose only map source is proxy.catalog")
	}
	c, err := config.Load(config.Options{Path: write(t, dir, "c.yaml", "{}\n"), Environ: []string{}})
	if err != nil {
		t.Fatal(err)
	}
	if c.Proxy.Fence != "auto" || c.Proxy.CatalogLeaseTTL != 10*time.Second || c.Proxy.Catalog != "" {
		t.Fatalf("defaults: fence %q, ttl %v, catalog %q", c.Proxy.Fence, c.Proxy.CatalogLeaseTTL, c.Proxy.Catalog)
	}
}
