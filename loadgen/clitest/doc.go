// Package clitest holds the end-to-end tests of `pgshard loadgen` (run,
// sweep, compare, run --part and merge, thresholds and exit codes, Ctrl-C)
// against a real local cluster. It has no code of its own.
package clitest
