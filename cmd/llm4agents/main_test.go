package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"runtime/debug"
	"strings"
	"sync"
	"testing"
	"time"
)

// syncBuffer is a bytes.Buffer that run's goroutines may write while the test
// reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// envMap is a getenv over a fixed set of variables, so tests never read the
// real environment.
func envMap(kv map[string]string) func(string) string {
	return func(k string) string { return kv[k] }
}

// runBounded runs run to completion and fails the test if it takes longer than
// limit.
func runBounded(tb testing.TB, limit time.Duration, args []string, getenv func(string) string) (stdout, stderr string, err error) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(tb.Context(), limit)
	defer cancel()
	var out, errOut syncBuffer
	done := make(chan error, 1)
	start := time.Now()
	go func() { done <- run(ctx, args, getenv, &out, &errOut) }()
	select {
	case err = <-done:
	case <-time.After(limit + 5*time.Second):
		tb.Fatalf("run(%q) still running %s after its context ended", args, limit)
	}
	if d := time.Since(start); d > limit {
		tb.Errorf("run(%q) took %s, limit %s", args, d, limit)
	}
	return out.String(), errOut.String(), err
}

func TestRunUsage(t *testing.T) {
	tests := []struct {
		name       string
		args       []string
		wantErr    string // substring; "" means nil
		wantHelp   bool   // run returns flag.ErrHelp
		wantStdout string // substring of stdout; "" means stdout must be empty
		wantStderr string // substring of stderr; "" means stderr must be empty
	}{
		{name: "no args", args: nil, wantErr: "no command given", wantStderr: "usage: llm4agents <command>"},
		{name: "empty args", args: []string{}, wantErr: "no command given", wantStderr: "usage: llm4agents <command>"},
		{name: "unknown command", args: []string{"frobnicate"}, wantErr: `unknown command "frobnicate"`, wantStderr: "usage: llm4agents <command>"},
		{name: "flag as command", args: []string{"--rpc"}, wantErr: `unknown command "--rpc"`, wantStderr: "usage: llm4agents <command>"},
		{name: "empty command", args: []string{""}, wantErr: `unknown command ""`, wantStderr: "usage: llm4agents <command>"},
		{name: "help", args: []string{"help"}, wantStdout: "usage: llm4agents <command>"},
		{name: "-h", args: []string{"-h"}, wantStdout: "usage: llm4agents <command>"},
		{name: "-help", args: []string{"-help"}, wantStdout: "usage: llm4agents <command>"},
		{name: "--help", args: []string{"--help"}, wantStdout: "usage: llm4agents <command>"},
		{name: "help lists facilitator", args: []string{"help"}, wantStdout: "facilitator   serve an x402 facilitator"},
		{name: "help lists demo", args: []string{"help"}, wantStdout: "demo          run the embedded demo"},
		{name: "help lists devnet", args: []string{"help"}, wantStdout: "devnet        set up a dev node (anvil)"},
		{name: "help lists wallet", args: []string{"help"}, wantStdout: "wallet        wallet set-up: approve-permit2"},
		{name: "wallet without a command", args: []string{"wallet"}, wantErr: "wallet: no command given", wantStderr: "approve-permit2"},
		{name: "wallet unknown command", args: []string{"wallet", "approve"}, wantErr: `wallet: unknown command "approve"`, wantStderr: "approve-permit2"},
		{name: "devnet -h", args: []string{"devnet", "-h"}, wantHelp: true, wantStderr: "AMOUNT is in atomic units"},
		{name: "facilitator -h", args: []string{"facilitator", "-h"}, wantHelp: true, wantStderr: "-settle-timeout"},
		{name: "help lists serve", args: []string{"help"}, wantStdout: "serve         run the paid gateway from a YAML config (--config FILE)"},
		{name: "demo -h", args: []string{"demo", "-h"}, wantHelp: true, wantStderr: "log what the gateway and facilitator do"},
		{name: "serve -h", args: []string{"serve", "-h"}, wantHelp: true, wantStderr: "-config"},
		{name: "serve unknown flag", args: []string{"serve", "--bogus"}, wantErr: "flag provided but not defined: -bogus", wantStderr: "-config"},
		{name: "serve extra argument", args: []string{"serve", "--config", "x.yaml", "now"}, wantErr: `unexpected argument`},
		{name: "serve without --config", args: []string{"serve"}, wantErr: "serve: --config is required"},
		{name: "facilitator unknown flag", args: []string{"facilitator", "--bogus"}, wantErr: "flag provided but not defined: -bogus", wantStderr: "-rpc"},
		{name: "demo unknown flag", args: []string{"demo", "--bogus"}, wantErr: "flag provided but not defined: -bogus", wantStderr: "-v"},
		{name: "demo bad -v value", args: []string{"demo", "-v=maybe"}, wantErr: "invalid boolean value", wantStderr: "-v"},
		{name: "demo extra argument", args: []string{"demo", "now"}, wantErr: `unexpected argument`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			stdout, stderr, err := runBounded(t, 10*time.Second, tc.args, envMap(nil))
			switch {
			case tc.wantHelp:
				if !errors.Is(err, flag.ErrHelp) {
					t.Errorf("err = %v, want flag.ErrHelp", err)
				}
			case tc.wantErr == "":
				if err != nil {
					t.Errorf("err = %v, want nil", err)
				}
			case err == nil:
				t.Errorf("err = nil, want one containing %q", tc.wantErr)
			case !strings.Contains(err.Error(), tc.wantErr):
				t.Errorf("err = %q, want it to contain %q", err, tc.wantErr)
			}
			if tc.wantStdout == "" && stdout != "" {
				t.Errorf("stdout = %q, want nothing", stdout)
			}
			if !strings.Contains(stdout, tc.wantStdout) {
				t.Errorf("stdout = %q, want it to contain %q", stdout, tc.wantStdout)
			}
			if tc.wantStderr == "" && stderr != "" {
				t.Errorf("stderr = %q, want nothing", stderr)
			}
			if !strings.Contains(stderr, tc.wantStderr) {
				t.Errorf("stderr = %q, want it to contain %q", stderr, tc.wantStderr)
			}
		})
	}
}

// TestHelpExitsZero: -h, -help and --help print the usage of every command,
// group commands (keys, credits) and their subcommands included, and the
// process exits 0, as the top-level usage promises.
func TestHelpExitsZero(t *testing.T) {
	commands := [][]string{
		{"serve"}, {"demo"}, {"facilitator"}, {"pay"}, {"chat"},
		{"keys"}, {"keys", "create"}, {"keys", "list"}, {"keys", "revoke"},
		{"credits"}, {"credits", "topup"}, {"credits", "balance"}, {"credits", "receipts"},
		{"devnet"},
		{"wallet"}, {"wallet", "approve-permit2"},
	}
	for _, cmd := range commands {
		for _, h := range []string{"-h", "-help", "--help"} {
			args := append(append([]string(nil), cmd...), h)
			t.Run(strings.Join(args, " "), func(t *testing.T) {
				stdout, stderr, err := runBounded(t, 10*time.Second, args, envMap(nil))
				var report bytes.Buffer
				if code := exitCode(err, &report); code != 0 {
					t.Errorf("exit status %d, want 0; reported %q", code, report.String())
				}
				if !strings.Contains(strings.ToLower(stdout+stderr), "usage") {
					t.Errorf("no usage printed; stdout %q, stderr %q", stdout, stderr)
				}
			})
		}
	}
	t.Run("keys lists its subcommands", func(t *testing.T) {
		_, stderr, _ := runBounded(t, 10*time.Second, []string{"keys", "--help"}, envMap(nil))
		for _, want := range []string{"usage: llm4agents keys create|list|update|revoke [flags]", "  create ", "  list ", "  update ", "  revoke ", "llm4agents keys <subcommand> -h"} {
			if !strings.Contains(stderr, want) {
				t.Errorf("stderr lacks %q:\n%s", want, stderr)
			}
		}
	})
}

func TestExitCode(t *testing.T) {
	tests := []struct {
		name   string
		err    error
		code   int
		report string
	}{
		{"success", nil, 0, ""},
		{"help", flag.ErrHelp, 0, ""},
		{"wrapped help", fmt.Errorf("keys: %w", flag.ErrHelp), 0, ""},
		{"failure", errors.New("serve: --config is required"), 2, "llm4agents: serve: --config is required\n"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var report bytes.Buffer
			if code := exitCode(tc.err, &report); code != tc.code || report.String() != tc.report {
				t.Errorf("exitCode(%v) = %d, reported %q; want %d, %q", tc.err, code, report.String(), tc.code, tc.report)
			}
		})
	}
}

// TestVersion: --version and version print the build's module version and
// VCS revision, and say what the build did not record.
func TestVersion(t *testing.T) {
	for _, args := range [][]string{{"--version"}, {"-version"}, {"version"}} {
		stdout, stderr, err := runBounded(t, 10*time.Second, args, envMap(nil))
		if err != nil || !strings.HasPrefix(stdout, "llm4agents ") || strings.Count(stdout, "\n") != 1 || stderr != "" {
			t.Errorf("%q: err %v, stdout %q, stderr %q; want one line on stdout", args, err, stdout, stderr)
		}
	}
	if _, _, err := runBounded(t, 10*time.Second, []string{"version", "now"}, envMap(nil)); err == nil {
		t.Error("version now: no error, want one for the extra argument")
	}
	if stdout, _, _ := runBounded(t, 10*time.Second, []string{"help"}, envMap(nil)); !strings.Contains(stdout, "--version") {
		t.Errorf("the usage does not mention --version:\n%s", stdout)
	}

	settings := func(kv ...string) []debug.BuildSetting {
		var s []debug.BuildSetting
		for i := 0; i < len(kv); i += 2 {
			s = append(s, debug.BuildSetting{Key: kv[i], Value: kv[i+1]})
		}
		return s
	}
	const rev = "124082a1b2c3d4e5f60718293a4b5c6d7e8f9012"
	tests := []struct {
		name string
		bi   *debug.BuildInfo
		ok   bool
		want string
	}{
		{"no build info", nil, false, "llm4agents (devel), unknown revision (no build information)"},
		{"go run", &debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Version: "(devel)"}}, true,
			"llm4agents (devel), unknown revision, go1.26.0"},
		{"empty version", &debug.BuildInfo{GoVersion: "go1.26.0"}, true, "llm4agents (devel), unknown revision, go1.26.0"},
		{"clean tree", &debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Version: "(devel)"}, Settings: settings("vcs", "git", "vcs.revision", rev, "vcs.modified", "false")}, true,
			"llm4agents (devel), revision " + rev + ", go1.26.0"},
		{"modified tree", &debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Version: "(devel)"}, Settings: settings("vcs.revision", rev, "vcs.modified", "true")}, true,
			"llm4agents (devel), revision " + rev + " (modified), go1.26.0"},
		{"module version", &debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Version: "v0.3.0"}}, true,
			"llm4agents v0.3.0, unknown revision, go1.26.0"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := versionLine(tc.bi, tc.ok); got != tc.want {
				t.Errorf("versionLine = %q, want %q", got, tc.want)
			}
		})
	}
}
