package migrations

import (
	"strings"
	"testing"
	"testing/fstest"
)

func TestAll(t *testing.T) {
	all, err := All()
	if err != nil {
		t.Fatal(err)
	}
	if len(all) == 0 || all[0].Version != 1 || all[0].Name != "settlements" {
		t.Fatalf("All() = %+v, want 0001_settlements first", all)
	}
}

func TestParseRejects(t *testing.T) {
	up, down := &fstest.MapFile{Data: []byte("SELECT 1;")}, &fstest.MapFile{Data: []byte("SELECT 1;")}
	tests := []struct {
		name  string
		files fstest.MapFS
		want  string
	}{
		{"misnamed", fstest.MapFS{"1_x.up.sql": up}, "is not named"},
		{"no down", fstest.MapFS{"0001_x.up.sql": up}, "needs both"},
		{"no up", fstest.MapFS{"0001_x.down.sql": down}, "needs both"},
		{"gap", fstest.MapFS{"0001_x.up.sql": up, "0001_x.down.sql": down, "0003_y.up.sql": up, "0003_y.down.sql": down}, "version 0002 missing"},
		{"two names", fstest.MapFS{"0001_x.up.sql": up, "0001_y.down.sql": down}, "two names"},
		{"empty up", fstest.MapFS{"0001_x.up.sql": {}, "0001_x.down.sql": down}, "needs both"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := parse(tc.files)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("parse() error = %v, want one containing %q", err, tc.want)
			}
		})
	}
}
