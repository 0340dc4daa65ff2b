package proxy_test

import (
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/pgshard/pgshard/proxy"
)

// BenchmarkPointSelect measures one extended-protocol point SELECT through
// the proxy against a fake shard (the proxy's own cost plus the fake's and
// the client's): run with -benchmem and -memprofile to see the proxy's
// allocations per query. fence=on adds the key's assert in the same
// write (internal/engine/fence.go): the pipeline's first statement, no BEGIN/COMMIT.
// The fence's cost against real shards: BenchmarkProxyFence.
func BenchmarkPointSelect(b *testing.B) {
	for _, pooler := range []bool{true, false} {
		for _, fence := range []proxy.FenceMode{proxy.FenceOff, proxy.FenceOn} {
			b.Run(fmt.Sprint("pooler=", pooler, "/fence=", fence), func(b *testing.B) {
				benchPointSelect(b, pooler, fence)
			})
		}
	}
}

func benchPointSelect(b *testing.B, pooler bool, fence proxy.FenceMode) {
	fe := startFake(b, pooler, fenceMode(fence))
	c := fe.client(b)
	sql := "SELECT abalance FROM accounts WHERE aid = $1"
	key := []byte(fmt.Sprint(fe.keyOn(1)))
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		c.fe.Send(&pgproto3.Parse{Query: sql})
		c.fe.Send(&pgproto3.Bind{Parameters: [][]byte{key}})
		c.fe.Send(&pgproto3.Describe{ObjectType: 'P'})
		c.fe.Send(&pgproto3.Execute{})
		c.fe.Send(&pgproto3.Sync{})
		if err := c.fe.Flush(); err != nil {
			b.Fatal(err)
		}
		for {
			m, err := c.fe.Receive()
			if err != nil {
				b.Fatal(err)
			}
			if _, ok := m.(*pgproto3.ReadyForQuery); ok {
				break
			}
		}
	}
}
