package mutant

import (
	"fmt"
	"time"
)

// ignoredLeaseTTL is the lease TTL ProxyIgnoresLease gives the proxy and
// RouterIgnoresLease the router: far longer than any run, so the lease
// never lapses.
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

// RouterLeaseTTL returns the catalog lease TTL a LevelRouter mutant gives
// the router under test's follower in place of the run's; kind "" gives
// 0 (the run's), any other level's kind is an error.
//
// RouterIgnoresLease: an hour, while the run records the TTL it gives
// the router (2 s in a run with catalog cuts). The router is the
// production one: through a catalog cut it goes on serving keyed
// operations long after the lease the run promised has lapsed.
func RouterLeaseTTL(k Kind) (time.Duration, error) {
	switch k {
	case "":
		return 0, nil
	case RouterIgnoresLease:
		return ignoredLeaseTTL, nil
	}
	if _, err := Lookup(k); err != nil {
		return 0, err
	}
	return 0, fmt.Errorf("mutant %s is not a router-level mutant", k)
}
