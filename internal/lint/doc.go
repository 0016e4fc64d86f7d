// Package lint holds tests that check the whole module rather than one
// package: rules of the house style that no linter enforces, such as every
// package having a package doc comment, and every decision a comment cites
// (D5) having its heading in docs/DESIGN.md. It has no code of its own;
// `go test ./internal/lint/` runs the checks.
package lint
