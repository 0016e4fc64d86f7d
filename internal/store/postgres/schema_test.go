package postgres

import (
	"strings"
	"testing"

	"github.com/llm4agents/llm4agents/internal/store/migrations"
)

func TestRewrite(t *testing.T) {
	tests := []struct{ name, in, want string }{
		{"column type", "ALTER TABLE t ADD COLUMN b BLOB;", "ALTER TABLE t ADD COLUMN b BYTEA;"},
		{"any case", "a blob, b Blob NOT NULL", "a BYTEA, b BYTEA NOT NULL"},
		{"whole words only", "blobs BLOB_X xblob BLOB", "blobs BLOB_X xblob BYTEA"},
		{"comment kept", "-- BLOB is SQLite's byte string", "-- BLOB is SQLite's byte string"},
		{"code before a comment", "b BLOB, -- a BLOB", "b BYTEA, -- a BLOB"},
		{"several lines", "a BLOB,\n-- BLOB\nb BLOB", "a BYTEA,\n-- BLOB\nb BYTEA"},
		{"nothing to do", "CREATE TABLE t (a TEXT);", "CREATE TABLE t (a TEXT);"},
	}
	for _, tc := range tests {
		if got := rewrite(tc.in); got != tc.want {
			t.Errorf("%s: rewrite(%q) = %q, want %q", tc.name, tc.in, got, tc.want)
		}
	}
}

// TestDialectMigrations checks that every shared migration, as PostgreSQL
// runs it, names no SQLite-only type and carries its extras under the
// right migration.
func TestDialectMigrations(t *testing.T) {
	shared, err := migrations.All()
	if err != nil {
		t.Fatal(err)
	}
	all, err := dialectMigrations()
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != len(shared) {
		t.Fatalf("%d dialect migrations for %d shared ones", len(all), len(shared))
	}
	for i, m := range all {
		if m.Version != shared[i].Version || m.Name != shared[i].Name {
			t.Errorf("dialect migration %d is %04d_%s, shared is %04d_%s", i, m.Version, m.Name, shared[i].Version, shared[i].Name)
		}
		for _, text := range []string{m.Up, m.Down} {
			for line := range strings.SplitSeq(text, "\n") {
				code, _, _ := strings.Cut(line, "--")
				if blob.MatchString(code) {
					t.Errorf("%04d_%s: %q still names BLOB", m.Version, m.Name, line)
				}
			}
		}
	}
	for v, x := range extras {
		m := all[v-1]
		if !strings.Contains(m.Up, x.up) || !strings.HasPrefix(m.Down, x.down) {
			t.Errorf("%04d_%s does not carry its extra %+v", m.Version, m.Name, x)
		}
	}
}
