package lint

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// listedPackage is the part of `go list -json` output the doc check reads.
type listedPackage struct {
	Dir        string
	ImportPath string
	Name       string
	Doc        string // synopsis of the package comment
	GoFiles    []string
	CgoFiles   []string
	Error      *struct{ Err string }
}

// modulePackages lists every package of the module, as `go list ./...` sees
// it from the module root.
func modulePackages(tb testing.TB) []listedPackage {
	tb.Helper()
	ctx, cancel := context.WithTimeout(tb.Context(), 2*time.Minute)
	defer cancel()
	goBin, err := exec.LookPath("go") // go test puts its own go first on PATH
	if err != nil {
		tb.Fatalf("find the go command: %v", err)
	}
	root, err := exec.CommandContext(ctx, goBin, "list", "-m", "-f", "{{.Dir}}").Output()
	if err != nil {
		tb.Fatalf("go list -m: %v", exitDetail(err))
	}
	cmd := exec.CommandContext(ctx, goBin, "list", "-e", "-json=Dir,ImportPath,Name,Doc,GoFiles,CgoFiles,Error", "./...")
	cmd.Dir = strings.TrimSpace(string(root))
	out, err := cmd.Output()
	if err != nil {
		tb.Fatalf("go list ./...: %v", exitDetail(err))
	}
	var pkgs []listedPackage
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p listedPackage
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			tb.Fatalf("decode go list output: %v", err)
		}
		pkgs = append(pkgs, p)
	}
	if len(pkgs) == 0 {
		tb.Fatal("go list ./... found no packages")
	}
	return pkgs
}

func exitDetail(err error) error {
	var ee *exec.ExitError
	if errors.As(err, &ee) && len(ee.Stderr) > 0 {
		return errors.New(strings.TrimSpace(string(ee.Stderr)))
	}
	return err
}

// docProblem says what is wrong with a package's doc comment, or "" when it is
// fine. A library package needs "// Package <name> ..."; a command needs
// "// Command <name> ..." (or "// Package main ...").
func docProblem(name, doc string) string {
	if name == "main" {
		if strings.HasPrefix(doc, "Command ") || strings.HasPrefix(doc, "Package main ") {
			return ""
		}
		if doc == "" {
			return `command has no doc comment; want "// Command <name> ..." on one file`
		}
		return `command doc comment starts ` + quoteStart(doc) + `, want "Command <name> ..."`
	}
	want := "Package " + name + " "
	if strings.HasPrefix(doc, want) {
		return ""
	}
	if doc == "" {
		return `no package doc comment; want "// ` + want + `..." on one file, such as doc.go`
	}
	return `package doc comment starts ` + quoteStart(doc) + `, want "` + want + `..."`
}

func quoteStart(s string) string {
	if f := strings.Fields(s); len(f) > 2 {
		s = strings.Join(f[:2], " ") + " ..."
	}
	return `"` + s + `"`
}

// TestPackageDocs checks that every package of the module has a
// package doc comment that starts with its name.
func TestPackageDocs(t *testing.T) {
	const self = "github.com/llm4agents/llm4agents/internal/lint"
	sawSelf := false
	for _, p := range modulePackages(t) {
		sawSelf = sawSelf || p.ImportPath == self
		if p.Error != nil {
			if strings.Contains(p.Error.Err, "build constraints exclude all Go files") {
				continue
			}
			t.Errorf("%s: %s", p.ImportPath, p.Error.Err)
			continue
		}
		if len(p.GoFiles)+len(p.CgoFiles) == 0 {
			continue // only test files: nothing for godoc to show
		}
		if msg := docProblem(p.Name, p.Doc); msg != "" {
			t.Errorf("%s (%s): %s", p.ImportPath, p.Dir, msg)
		}
	}
	if !sawSelf {
		t.Errorf("go list ./... did not list %s: the check ran on the wrong module", self)
	}
}

func TestDocProblem(t *testing.T) {
	tests := []struct {
		name, pkg, doc string
		ok             bool
	}{
		{"library", "store", "Package store declares the storage contracts.", true},
		{"library missing", "store", "", false},
		{"library other name", "store", "Package storage declares the storage contracts.", false},
		{"library name prefix only", "store", "Package storetest is the suite.", false},
		{"library prose", "store", "This package declares the storage contracts.", false},
		{"command", "main", "Command llm4agents is the one binary.", true},
		{"command as package main", "main", "Package main runs the gateway.", true},
		{"command missing", "main", "", false},
		{"command prose", "main", "Llm4agents is the one binary.", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			msg := docProblem(tc.pkg, tc.doc)
			if (msg == "") != tc.ok {
				t.Errorf("docProblem(%q, %q) = %q, want ok=%t", tc.pkg, tc.doc, msg, tc.ok)
			}
		})
	}
}
