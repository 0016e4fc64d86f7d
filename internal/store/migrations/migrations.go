// Package migrations holds the schema of the SQL store backends as numbered,
// embedded migration files, shared by every SQL dialect.
//
// Each migration is a pair NNNN_name.up.sql and NNNN_name.down.sql, numbered
// from 0001 without gaps. The files are written in the subset of SQL that
// SQLite and PostgreSQL both accept (TEXT, SMALLINT, BIGINT, CHECK, partial
// indexes; no AUTOINCREMENT, SERIAL or BOOLEAN), so a backend applies them
// as they are or with small dialect rewrites of its own. Times are unix
// milliseconds in BIGINT and amounts are decimal TEXT, except the ledger's
// (0004): BIGINT atomic units bounded by store.MaxAmount, so that SQL can do
// the arithmetic of a hold atomically in both dialects.
//
// This package only parses the files; each backend runs them, recording the
// applied versions in its own schema_migrations table.
package migrations

import (
	"embed"
	"fmt"
	"io/fs"
	"regexp"
	"slices"
	"strconv"
)

//go:embed *.sql
var files embed.FS

// Migration is one numbered schema change.
type Migration struct {
	Version int    // 1, 2, ... without gaps
	Name    string // the part of the file name after the number, e.g. "settlements"
	Up      string // SQL applying the change; may hold several statements
	Down    string // SQL undoing it
}

var fileName = regexp.MustCompile(`^(\d{4})_([a-z0-9_]+)\.(up|down)\.sql$`)

// All returns every migration in version order. It fails if a file is
// misnamed, a version lacks its up or down half, or the numbering has a gap,
// so a mistake in the files stops a backend from opening rather than
// producing a half-migrated database.
func All() ([]Migration, error) {
	return parse(files)
}

func parse(fsys fs.FS) ([]Migration, error) {
	entries, err := fs.ReadDir(fsys, ".")
	if err != nil {
		return nil, fmt.Errorf("migrations: %w", err)
	}
	byVersion := map[int]*Migration{}
	for _, e := range entries {
		m := fileName.FindStringSubmatch(e.Name())
		if m == nil {
			return nil, fmt.Errorf("migrations: file %q is not named NNNN_name.up.sql or NNNN_name.down.sql", e.Name())
		}
		v, _ := strconv.Atoi(m[1]) // four digits by the pattern
		body, err := fs.ReadFile(fsys, e.Name())
		if err != nil {
			return nil, fmt.Errorf("migrations: %w", err)
		}
		mig := byVersion[v]
		if mig == nil {
			mig = &Migration{Version: v, Name: m[2]}
			byVersion[v] = mig
		}
		if mig.Name != m[2] {
			return nil, fmt.Errorf("migrations: version %04d has two names, %q and %q", v, mig.Name, m[2])
		}
		if m[3] == "up" {
			mig.Up = string(body)
		} else {
			mig.Down = string(body)
		}
	}
	all := make([]Migration, 0, len(byVersion))
	for _, m := range byVersion {
		all = append(all, *m)
	}
	slices.SortFunc(all, func(a, b Migration) int { return a.Version - b.Version })
	for i, m := range all {
		if m.Version != i+1 {
			return nil, fmt.Errorf("migrations: version %04d missing", i+1)
		}
		if m.Up == "" || m.Down == "" {
			return nil, fmt.Errorf("migrations: version %04d_%s needs both an up and a down file", m.Version, m.Name)
		}
	}
	return all, nil
}
