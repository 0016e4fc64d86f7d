package lint

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// decisionRef is a decision id as comments cite it: "D5", "DESIGN.md D14".
var decisionRef = regexp.MustCompile(`\bD([0-9]+)\b`)

// designCitation is a run of decision ids after the page that holds them:
// "docs/DESIGN.md D5", "DESIGN.md D14, D15", "DESIGN.md D16-D18".
var designCitation = regexp.MustCompile(`DESIGN\.md D[0-9]+(?:(?:, | and |-)D[0-9]+)*`)

// publicDirs hold the packages other modules import. Their godoc is read by
// people without this repository at hand, so a decision id there names its
// page ("docs/DESIGN.md D5"), or better, the comment says the reason.
var publicDirs = []string{"x402/", "client/"}

// designHeading is a decision's heading in docs/DESIGN.md: "### D5 One success ...".
var designHeading = regexp.MustCompile(`(?m)^### D([0-9]+)\b`)

// unshippedRefs are references to documents the repository does not ship:
// the team's decision, mission and style pages, its issues, its seed audits
// and its digest of the x402 spec. The patterns are written so that they do
// not match their own source text.
var unshippedRefs = []struct {
	re   *regexp.Regexp
	what string
}{
	{regexp.MustCompile(`DECISIONS[ ]D[0-9]+`), `decisions page (write "D<n>", a heading of docs/DESIGN.md)`},
	{regexp.MustCompile(`MISSION[ ][A-Z][0-9]`), "mission page (say the requirement inline)"},
	{regexp.MustCompile(`(?i)\bissue[ ][0-9]+\b`), "issue (say the reason inline)"},
	{regexp.MustCompile(`(?i)\bseeds?[ ]00[0-9]`), "seed document (say the reason inline)"},
	{regexp.MustCompile(`STYLE(?:\.md)?[ ]§`), "style page (say the rule inline)"},
	{regexp.MustCompile(`x402-v2(?:\.md|[ ]§)`), "team's x402 digest (point to the spec, github.com/x402-foundation/x402 specs/)"},
}

// moduleRoot is the directory of the module's go.mod, found from the test's
// working directory upward.
func moduleRoot(tb testing.TB) string {
	tb.Helper()
	dir, err := os.Getwd()
	if err != nil {
		tb.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			tb.Fatal("no go.mod above the test's directory")
		}
		dir = parent
	}
}

// designDecisions are the ids with a heading in docs/DESIGN.md.
func designDecisions(tb testing.TB, root string) map[string]bool {
	tb.Helper()
	b, err := os.ReadFile(filepath.Join(root, "docs", "DESIGN.md"))
	if err != nil {
		tb.Fatalf("read docs/DESIGN.md: %v", err)
	}
	ids := map[string]bool{}
	for _, m := range designHeading.FindAllSubmatch(b, -1) {
		ids[string(m[1])] = true
	}
	if len(ids) == 0 {
		tb.Fatal(`docs/DESIGN.md has no "### D<n>" heading`)
	}
	return ids
}

// moduleGoFiles are the module's .go files, tests included, outside testdata,
// vendor, node_modules, directories the go command ignores (".x", "_x") and
// nested modules.
func moduleGoFiles(tb testing.TB, root string) []string {
	tb.Helper()
	var files []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			name := d.Name()
			if path == root {
				return nil
			}
			if name == "testdata" || name == "vendor" || name == "node_modules" ||
				strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") {
				return filepath.SkipDir
			}
			if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(path, ".go") {
			files = append(files, path)
		}
		return nil
	})
	if err != nil {
		tb.Fatalf("walk the module: %v", err)
	}
	return files
}

// textRef is one comment or string literal of a file.
type textRef struct {
	line int
	text string
}

// commentsAndStrings returns the comments and string literals of a Go file:
// the only places a reference to a document can be, so identifiers and
// numbers ("D0" in a name, hex) never count.
func commentsAndStrings(fset *token.FileSet, f *ast.File) []textRef {
	var out []textRef
	for _, g := range f.Comments {
		for _, c := range g.List {
			out = append(out, textRef{fset.Position(c.Pos()).Line, c.Text})
		}
	}
	ast.Inspect(f, func(n ast.Node) bool {
		lit, ok := n.(*ast.BasicLit)
		if !ok || lit.Kind != token.STRING {
			return true
		}
		s, err := strconv.Unquote(lit.Value)
		if err != nil {
			s = lit.Value
		}
		out = append(out, textRef{fset.Position(lit.Pos()).Line, s})
		return true
	})
	return out
}

// refProblems lists what is wrong with the references in text: decision ids
// without a heading in docs/DESIGN.md, references to unshipped documents,
// and, in a public package (public), a decision id that does not name
// docs/DESIGN.md.
func refProblems(text string, decisions map[string]bool, public bool) []string {
	var probs []string
	for _, m := range decisionRef.FindAllStringSubmatch(text, -1) {
		if !decisions[m[1]] {
			probs = append(probs, fmt.Sprintf(`D%s has no "### D%s" heading in docs/DESIGN.md`, m[1], m[1]))
		}
	}
	if public {
		for _, m := range decisionRef.FindAllString(designCitation.ReplaceAllString(text, ""), -1) {
			probs = append(probs, fmt.Sprintf(`%s in a public package: write "docs/DESIGN.md %s", or say the reason`, m, m))
		}
	}
	for _, u := range unshippedRefs {
		if m := u.re.FindString(text); m != "" {
			probs = append(probs, fmt.Sprintf("%q cites the %s", m, u.what))
		}
	}
	return probs
}

// TestReferences keeps the code readable without the team's own notes: a
// decision id cited in a comment or string has its heading in
// docs/DESIGN.md (and names that page in the public packages), and nothing
// cites the decisions or mission pages, an issue or a seed document, which
// the repository does not ship.
func TestReferences(t *testing.T) {
	root := moduleRoot(t)
	decisions := designDecisions(t, root)
	files := moduleGoFiles(t, root)
	var found []string
	fset := token.NewFileSet()
	for _, path := range files {
		f, err := parser.ParseFile(fset, path, nil, parser.ParseComments|parser.SkipObjectResolution)
		if err != nil {
			t.Errorf("parse %s: %v", path, err)
			continue
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		public := false
		if !strings.HasSuffix(rel, "_test.go") {
			for _, d := range publicDirs {
				public = public || strings.HasPrefix(rel, d)
			}
		}
		for _, r := range commentsAndStrings(fset, f) {
			for _, p := range refProblems(r.text, decisions, public) {
				found = append(found, fmt.Sprintf("%s:%d: %s", rel, r.line, p))
			}
		}
	}
	if len(files) < 10 {
		t.Fatalf("found %d .go files under %s: the check ran on the wrong tree", len(files), root)
	}
	sort.Strings(found)
	for _, s := range found {
		t.Error(s)
	}
}

func TestRefProblems(t *testing.T) {
	decisions := map[string]bool{"5": true, "14": true, "15": true}
	tests := []struct {
		name, text string
		public     bool
		ok         bool
	}{
		{"known decision", "one success per authorization (D5)", false, true},
		{"known decision with page", "see docs/DESIGN.md D14", false, true},
		{"unknown decision", "anvil with automine off (D" + "22)", false, false},
		{"decisions page", "DECISIONS" + " D5", false, false},
		{"mission page", "MISSION" + " P1", false, false},
		{"mission range", "MISSION" + " R1-R5", false, false},
		{"issue", "the sweep (issue" + " 6)", false, false},
		{"issue capitalized", "Issue" + " 18 item 2", false, false},
		{"seed", "seed" + " 002 scenario 1", false, false},
		{"style page", "STYLE" + " §3.6", false, false},
		{"x402 digest", "x402-v2" + ".md §7.1", false, false},
		{"x402 digest section", "x402-v2" + " §7.1", false, false},
		{"x402 version", "x402 v2 headers", false, true},
		{"hex is not a decision", "0xD1a2 and D0x", false, true},
		{"word with digits", "AD5 BD14D and D5x", false, true},
		{"issue as a word", "the issue is 3 bytes; issues 4", false, true},
		{"mission as a word", "our mission P1 is lower-case", false, true},
		{"public: bare decision", "one success (D5)", true, false},
		{"public: named page", "one success (docs/DESIGN.md D5)", true, true},
		{"public: named page, list", "see DESIGN.md D5, D14 and D15", true, true},
		{"public: named page, range", "see DESIGN.md D14-D15", true, true},
		{"public: one named, one bare", "DESIGN.md D5; later D14", true, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			probs := refProblems(tc.text, decisions, tc.public)
			if (len(probs) == 0) != tc.ok {
				t.Errorf("refProblems(%q) = %q, want ok=%t", tc.text, probs, tc.ok)
			}
		})
	}
}
