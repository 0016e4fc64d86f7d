package x402_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// Public packages never inherit the gateway's storage: a buyer who
// imports x402, x402/evm/exact or client must not pull in a database driver. The
// root x402 package also stays free of go-ethereum.
var (
	forbiddenInPublic = []string{
		"github.com/llm4agents/llm4agents/internal/store",
		"modernc.org/sqlite",
		"github.com/jackc/pgx",
		"github.com/redis/go-redis",
	}
	forbiddenInRoot = []string{
		"github.com/ethereum/go-ethereum",
	}
)

func TestPublicPackagesDeps(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("go command not found: %v", err)
	}
	root, err := filepath.Abs("..") // the module root; tests run in x402/
	if err != nil {
		t.Fatal(err)
	}

	patterns := []string{"./x402/..."}
	for _, dir := range []string{"x402/evm/exact", "client"} {
		if fi, err := os.Stat(filepath.Join(root, dir)); err == nil && fi.IsDir() {
			patterns = append(patterns, "./"+dir+"/...")
		}
	}

	tests := []struct {
		name      string
		patterns  []string
		forbidden []string
	}{
		{"public packages", patterns, forbiddenInPublic},
		{"x402 root package", []string{"./x402"}, append(append([]string(nil), forbiddenInPublic...), forbiddenInRoot...)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			deps := goListDeps(t, goBin, root, tc.patterns)
			if len(deps) == 0 {
				t.Fatalf("go list -deps %v listed nothing", tc.patterns)
			}
			for _, dep := range deps {
				for _, bad := range tc.forbidden {
					if dep == bad || strings.HasPrefix(dep, bad+"/") {
						t.Errorf("%v depends on %s (forbidden: %s); find the import with: go list -deps -f '{{.ImportPath}}: {{.Imports}}' %s",
							tc.patterns, dep, bad, strings.Join(tc.patterns, " "))
					}
				}
			}
		})
	}
}

// goListDeps returns the import paths of patterns and all their dependencies, for
// the default build and for the other release targets, since a file with a build
// constraint may import what the default build does not.
func goListDeps(tb testing.TB, goBin, dir string, patterns []string) []string {
	tb.Helper()
	seen := map[string]bool{}
	var out []string
	for _, env := range [][]string{
		nil,
		{"GOOS=linux", "GOARCH=arm64", "CGO_ENABLED=0"},
		{"GOOS=darwin", "GOARCH=arm64", "CGO_ENABLED=1"},
		{"GOOS=windows", "GOARCH=amd64", "CGO_ENABLED=0"},
	} {
		args := append([]string{"list", "-e", "-deps", "-f", "{{.ImportPath}}"}, patterns...)
		cmd := exec.Command(goBin, args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), env...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		b, err := cmd.Output()
		if err != nil {
			tb.Fatalf("go %s (%v): %v\n%s", strings.Join(args, " "), env, err, stderr.Bytes())
		}
		for p := range strings.FieldsSeq(string(b)) {
			if !seen[p] {
				seen[p] = true
				out = append(out, p)
			}
		}
	}
	return out
}
