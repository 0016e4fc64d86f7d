package crashpoint

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// helperEnv makes the test binary act as a process with crash points instead
// of running tests: see TestMain.
const helperEnv = "CRASHPOINT_TEST_HELPER"

func TestMain(m *testing.M) {
	switch os.Getenv(helperEnv) {
	case "walk":
		walk()
	case "validate":
		if err := Validate(); err != nil {
			fmt.Println("invalid:", err)
			os.Exit(3)
		}
		fmt.Println("valid")
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// walk passes every crash point in order, saying so on stdout before each,
// and has deferred work that a crash must skip.
func walk() {
	code := 0
	defer func() {
		fmt.Println("deferred work ran")
		os.Exit(code)
	}()
	for _, p := range points {
		fmt.Println("before", p)
		Hit(p)
	}
	fmt.Println("survived")
}

// run re-executes the test binary as a helper with EnvVar set to armed (unset
// when armed is nil) and returns its exit code, stdout and stderr.
func run(t *testing.T, mode string, armed *string) (int, string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
	env := []string{helperEnv + "=" + mode}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, EnvVar+"=") && !strings.HasPrefix(kv, helperEnv+"=") {
			env = append(env, kv)
		}
	}
	if armed != nil {
		env = append(env, EnvVar+"="+*armed)
	}
	cmd.Env = env
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if ee, ok := errors.AsType[*exec.ExitError](err); ok {
		return ee.ExitCode(), stdout.String(), stderr.String()
	} else if err != nil {
		t.Fatalf("run helper: %v", err)
	}
	return 0, stdout.String(), stderr.String()
}

func TestHitExitsAtTheArmedPointOnly(t *testing.T) {
	for i, p := range points {
		t.Run(string(p), func(t *testing.T) {
			t.Parallel()
			name := string(p)
			code, stdout, stderr := run(t, "walk", &name)
			if code != ExitCode {
				t.Fatalf("exit code %d, want %d; stdout:\n%s\nstderr:\n%s", code, ExitCode, stdout, stderr)
			}
			var want strings.Builder
			for _, q := range points[:i+1] {
				fmt.Fprintln(&want, "before", q)
			}
			// Nothing after the point ran: no later point, no deferred work.
			if stdout != want.String() {
				t.Errorf("stdout:\n%s\nwant:\n%s", stdout, want.String())
			}
			wantErr := fmt.Sprintf("llm4agents: crash point %s reached (%s): exiting with status %d\n", p, EnvVar, ExitCode)
			if stderr != wantErr {
				t.Errorf("stderr = %q, want %q", stderr, wantErr)
			}
		})
	}
}

func TestHitIsInertUnarmed(t *testing.T) {
	empty, unknown, nearMiss := "", "after-everything", "After-Claim"
	for _, tc := range []struct {
		name  string
		armed *string
	}{
		{"unset", nil},
		{"empty", &empty},
		{"unknown", &unknown},
		{"case differs", &nearMiss},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			code, stdout, stderr := run(t, "walk", tc.armed)
			if code != 0 {
				t.Fatalf("exit code %d, want 0; stderr:\n%s", code, stderr)
			}
			if !strings.HasSuffix(stdout, "survived\ndeferred work ran\n") {
				t.Errorf("stdout:\n%s\nwant every point passed and the deferred work run", stdout)
			}
			if stderr != "" {
				t.Errorf("stderr = %q, want nothing", stderr)
			}
		})
	}
}

func TestValidate(t *testing.T) {
	long := "after-" + strings.Repeat("x", 200)
	for _, tc := range []struct {
		name  string
		value *string
		code  int
		want  string
	}{
		{"unset", nil, 0, "valid"},
		{"empty", new(""), 0, "valid"},
		{"every point", new(string(AfterRecord)), 0, "valid"},
		{"typo", new("after-recipt"), 3, `invalid: LLM4AGENTS_CRASHPOINT: "after-recipt" is not a crash point (want one of after-claim, after-upstream, after-broadcast, after-receipt, after-record)`},
		{"spaces", new(" after-claim"), 3, `is not a crash point`},
		{"long value is cut", &long, 3, `"after-xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx..." is not`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			code, stdout, _ := run(t, "validate", tc.value)
			if code != tc.code || !strings.Contains(stdout, tc.want) {
				t.Errorf("exit %d, stdout %q; want exit %d and %q", code, stdout, tc.code, tc.want)
			}
		})
	}
}

func TestParse(t *testing.T) {
	for _, p := range Points() {
		got, err := Parse(string(p))
		if err != nil || got != p {
			t.Errorf("Parse(%q) = %q, %v", p, got, err)
		}
	}
	if got, err := Parse(""); err != nil || got != "" {
		t.Errorf(`Parse("") = %q, %v; want no point and no error`, got, err)
	}
	for _, s := range []string{"after", "AFTER-CLAIM", "after-claim\n", "after_claim", "\x00"} {
		if _, err := Parse(s); err == nil {
			t.Errorf("Parse(%q) succeeded", s)
		}
	}
}

func TestPointsIsACopy(t *testing.T) {
	ps := Points()
	ps[0] = "changed"
	if Points()[0] != AfterClaim {
		t.Fatal("Points exposes the package's own slice")
	}
}

func FuzzParse(f *testing.F) {
	for _, p := range points {
		f.Add(string(p))
	}
	f.Add("")
	f.Add("after-claim ")
	f.Add(strings.Repeat("é", 100))
	f.Fuzz(func(t *testing.T, s string) {
		p, err := Parse(s)
		if err != nil {
			if p != "" {
				t.Fatalf("Parse(%q) = %q with error %v", s, p, err)
			}
			if n := len(err.Error()); n > 600 { // 40 runes, each at most 10 bytes quoted
				t.Fatalf("error of %d bytes for a %d-byte input", n, len(s))
			}
			return
		}
		if string(p) != s {
			t.Fatalf("Parse(%q) = %q", s, p)
		}
	})
}

func BenchmarkHitUnarmed(b *testing.B) {
	if armed != "" {
		b.Skipf("%s is set", EnvVar)
	}
	for b.Loop() {
		Hit(AfterBroadcast)
	}
}
