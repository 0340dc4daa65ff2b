package mutant

import (
	"fmt"
	"time"
)

// ignoredLeaseTTL is the lease TTL ProxyIgnoresLease gives the proxy: far
// longer than any run, so its lease never lapses.
const ignoredLeaseTTL = time.Hour

// ProxyConfig returns the proxy configuration (keys of the config's proxy
// section, with their YAML values) a LevelProxy mutant sets in the
// chaos-owned proxy's config file over what the run writes; kind "" sets
// nothing, any other level's kind is an error.
//
// ProxyIgnoresLease: catalog_lease_ttl 1h, while the run records the TTL
// it gives the proxy (2 s in a run with catalog cuts) as the one the
// proxy holds. The proxy's own code is the production one: only its
// configuration lies, so it goes on serving keyed statements through a
// catalog cut long after the lease the run promised has lapsed — what a
// proxy that ignored its lapsed lease would do.
func ProxyConfig(k Kind) (map[string]string, error) {
	switch k {
	case "":
		return nil, nil
	case ProxyIgnoresLease:
		return map[string]string{"catalog_lease_ttl": ignoredLeaseTTL.String()}, nil
	}
	if _, err := Lookup(k); err != nil {
		return nil, err
	}
	return nil, fmt.Errorf("mutant %s is not a proxy-level mutant", k)
}
