// Package docscheck holds tests that keep docs/ true to the tree: every
// backticked repository path in the documentation names something that
// exists, and the decision records' index lists every record with its
// status. It has no code of its own; `go test ./internal/docscheck` runs it.
package docscheck
