package proxy

import (
	"github.com/pgshard/pgshard/proxy/route"
)

// localKind reports whether statements of kind k are always answered by
// the proxy itself (never sent to a backend).
func localKind(k route.Kind) bool {
	switch k {
	case route.KindSetSession, route.KindDeallocate, route.KindDiscard, route.KindPrepare,
		route.KindExecute, route.KindUnsupported, route.KindEmpty:
		return true
	}
	return false
}

// txnControl reports whether k is a transaction-control kind the proxy
// emulates while no backend is bound.
func txnControl(k route.Kind) bool {
	switch k {
	case route.KindBegin, route.KindCommit, route.KindRollback, route.KindSavepoint, route.KindSetLocal:
		return true
	}
	return false
}
