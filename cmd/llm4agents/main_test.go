package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
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
