// Package sqlver loads versioned SQL files embedded in a build and checks
// a database's ledger of applied versions against them. Two schemas use it:
// the store's migrations (package migrations) and the catalog's schema
// (package catalog). Each keeps its own ledger table, lock and error types;
// what they share is the rule for a released file: named NNNN_name.sql,
// numbered 1, 2, 3, ... without gaps, never edited once released (the
// ledger records a SHA-256 checksum and a mismatch is refused).
//
//	sqlver.go   File, Load (names, checksums, order), Check (ledger vs build)
//
// It imports nothing of pgshard's.
package sqlver
