package loadgen

import "github.com/pgshard/pgshard/shardmap"

// mapLocator places ids with a shard map, as the router does.
type mapLocator struct {
	m     *shardmap.Map
	names []string
}

// MapLocator returns the Locator of a validated shard map: an id lives on
// the shard owning its bucket.
func MapLocator(m *shardmap.Map) Locator {
	names := make([]string, len(m.Shards))
	for i, s := range m.Shards {
		names[i] = s.Name
	}
	return &mapLocator{m: m, names: names}
}

func (l *mapLocator) Shards() []string { return l.names }

func (l *mapLocator) ShardOf(id string) int { return l.m.ShardIndexForBucket(l.m.Bucket(id)) }
