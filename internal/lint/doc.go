// Package lint holds tests that check the whole module rather than one
// package: rules of the house style (docs/STYLE.md) that no linter enforces,
// such as every package having a package doc comment. It has no code of its
// own; `go test ./internal/lint/` runs the checks.
package lint
