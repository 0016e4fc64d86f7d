package x402

import (
	"errors"
	"strings"
	"testing"
)

func TestStrictJSON(t *testing.T) {
	for _, ok := range []string{`{}`, `[]`, `1`, `"s"`, `{"a":{"a":1},"b":[{"a":1},{"a":2}]}`, ` {"a" : 1} `} {
		if err := CheckStrictJSON([]byte(ok)); err != nil {
			t.Errorf("CheckStrictJSON(%s) = %v", ok, err)
		}
	}
	for _, bad := range []string{``, `{`, `{"a":1,"a":2}`, `{"a":{"b":1,"b":1}}`, `[{"x":1,"x":1}]`, `{} {}`, `{}x`, "\"\xff\"",
		strings.Repeat("[", MaxStrictJSONDepth+2) + strings.Repeat("]", MaxStrictJSONDepth+2), `{"a":}`} {
		if err := CheckStrictJSON([]byte(bad)); !errors.Is(err, ErrNotStrictJSON) {
			t.Errorf("CheckStrictJSON(%.40q) = %v, want ErrNotStrictJSON", bad, err)
		}
	}
}
