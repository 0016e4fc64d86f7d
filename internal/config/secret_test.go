package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const secretValue = "sk-TOPSECRET-0123456789"

func TestReadSecret(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := write("good", "  "+secretValue+"\n")
	exact := write("exact", strings.Repeat("k", MaxSecretBytes))
	large := write("large", secretValue+strings.Repeat("x", MaxSecretBytes))
	empty := write("empty", " \n\t\n")
	env := map[string]string{"KEY": "\t" + secretValue + " ", "BLANK": "   "}
	getenv := func(k string) string { return env[k] }

	for _, tc := range []struct {
		name, path, env string
		getenv          func(string) string
		want            string // "" = error
		msg             string // part of the error
	}{
		{name: "file, trimmed", path: good, getenv: getenv, want: secretValue},
		{name: "file at the size limit", path: exact, want: strings.Repeat("k", MaxSecretBytes)},
		{name: "env, trimmed", env: "KEY", getenv: getenv, want: secretValue},
		{name: "file too large", path: large, msg: "larger than 4096 bytes"},
		{name: "file empty", path: empty, msg: "is empty"},
		{name: "file missing", path: filepath.Join(dir, "nope"), msg: "no such file"},
		{name: "a directory", path: dir, msg: "is a directory"},
		{name: "env unset", env: "NOPE", getenv: getenv, msg: "NOPE is not set"},
		{name: "env blank", env: "BLANK", getenv: getenv, msg: "BLANK is not set or is empty"},
		{name: "env without getenv", env: "KEY", msg: "no environment"},
		{name: "both", path: good, env: "KEY", getenv: getenv, msg: "name only one"},
		{name: "neither", getenv: getenv, msg: "no secret source"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ReadSecret(tc.path, tc.env, tc.getenv)
			if tc.want != "" {
				if err != nil || got != tc.want {
					t.Fatalf("ReadSecret = %q, %v; want %q", got, err, tc.want)
				}
				return
			}
			if err == nil {
				t.Fatalf("ReadSecret = %q, want an error", got)
			}
			if got != "" {
				t.Errorf("ReadSecret returned %q with its error", got)
			}
			if !strings.Contains(err.Error(), tc.msg) {
				t.Errorf("error %q does not contain %q", err, tc.msg)
			}
			if strings.Contains(err.Error(), "TOPSECRET") || strings.Contains(err.Error(), "xxxx") {
				t.Errorf("error repeats the secret: %v", err)
			}
		})
	}
}

func TestSecretAccessors(t *testing.T) {
	env := map[string]string{
		"OPENAI_API_KEY": secretValue,
		"RPC":            "https://base.example/v2/" + secretValue,
		"BAD_RPC":        "base.example/v2/" + secretValue,
		"FAC_KEY":        "0xabc",
	}
	getenv := func(k string) string { return env[k] }

	if k, err := (Upstream{}).APIKey(getenv); err != nil || k != "" {
		t.Errorf("APIKey without a source = %q, %v; want none", k, err)
	}
	if k, err := (Upstream{APIKeyEnv: "OPENAI_API_KEY"}).APIKey(getenv); err != nil || k != secretValue {
		t.Errorf("APIKey = %q, %v", k, err)
	}
	if _, err := (Upstream{APIKeyEnv: "MISSING"}).APIKey(getenv); err == nil {
		t.Error("APIKey from an unset variable succeeded")
	}
	if k, err := (Facilitator{KeyEnv: "FAC_KEY"}).Key(getenv); err != nil || k != "0xabc" {
		t.Errorf("Key = %q, %v", k, err)
	}
	if _, err := (Facilitator{}).Key(getenv); err == nil {
		t.Error("Key without a source succeeded")
	}
	if u, err := (Network{RPCURL: "http://127.0.0.1:8545"}).RPC(getenv); err != nil || u != "http://127.0.0.1:8545" {
		t.Errorf("RPC = %q, %v", u, err)
	}
	if u, err := (Network{RPCURLEnv: "RPC"}).RPC(getenv); err != nil || u != env["RPC"] {
		t.Errorf("RPC from env = %q, %v", u, err)
	}
	_, err := (Network{RPCURLEnv: "BAD_RPC"}).RPC(getenv)
	if err == nil || strings.Contains(err.Error(), "TOPSECRET") || !strings.Contains(err.Error(), "BAD_RPC") {
		t.Errorf("RPC from a bad variable: %v", err)
	}
	if _, err := (Network{}).RPC(getenv); err == nil {
		t.Error("RPC without a source succeeded")
	}
}
