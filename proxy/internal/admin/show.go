package admin

import (
	"slices"
	"strings"
)

// shows are the SHOW commands, by name; each builds its answer from one
// snapshot of the Host.
var shows map[string]func(Host) *result

func init() {
	shows = map[string]func(Host) *result{
		"HELP": showHelp, "VERSION": showVersion, "CONFIG": showConfig, "SHARDS": showShards,
		"MAP": showMap, "POOLS": showPools, "STATS": showStats, "CLIENTS": showClients,
		"SERVERS": showServers, "DATABASES": showDatabases, "LISTS": showLists, "USERS": showUsers,
		"ROUTES": showRoutes,
	}
}

func showNames() string {
	names := make([]string, 0, len(shows))
	for n := range shows {
		names = append(names, n)
	}
	slices.Sort(names)
	return strings.Join(names, ", ")
}

func showHelp(Host) *result {
	r := &result{cols: textCols("command", "description")}
	for _, c := range Commands {
		r.rows = append(r.rows, []any{c[0], c[1]})
	}
	return r
}

func showVersion(h Host) *result {
	return &result{cols: textCols("version"), rows: [][]any{{"pgshard " + h.Version()}}}
}
