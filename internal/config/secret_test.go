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

func TestStoreDSN(t *testing.T) {
	env := map[string]string{
		"PG":    "postgres://app:" + secretValue + "@db.internal:5432/llm4agents?sslmode=require",
		"REDIS": "rediss://:" + secretValue + "@cache:6380/2",
		"BAD":   "mysql://app:" + secretValue + "@db/x",
		"PATH0": "sqlite://",
	}
	getenv := func(k string) string { return env[k] }
	for _, tc := range []struct {
		name        string
		store       Store
		wantBackend string
		wantDSN     string
		wantErr     string
	}{
		{name: "sqlite in file", store: Store{DSN: "sqlite:///var/lib/l4a.db"}, wantBackend: StoreSQLite, wantDSN: "sqlite:///var/lib/l4a.db"},
		{name: "postgres in file", store: Store{DSN: "postgres://app@db/x"}, wantBackend: StorePostgres, wantDSN: "postgres://app@db/x"},
		{name: "postgresql scheme", store: Store{DSN: "postgresql://app@db/x"}, wantBackend: StorePostgres, wantDSN: "postgresql://app@db/x"},
		{name: "redis in file", store: Store{DSN: "redis://127.0.0.1:6379/0"}, wantBackend: StoreRedis, wantDSN: "redis://127.0.0.1:6379/0"},
		{name: "postgres from env", store: Store{DSNEnv: "PG"}, wantBackend: StorePostgres, wantDSN: env["PG"]},
		{name: "rediss from env", store: Store{DSNEnv: "REDIS"}, wantBackend: StoreRedis, wantDSN: env["REDIS"]},
		{name: "env unset", store: Store{DSNEnv: "NOPE"}, wantErr: "store.dsn_env: environment variable NOPE is not set"},
		{name: "env other scheme", store: Store{DSNEnv: "BAD"}, wantErr: `store.dsn_env: the value of BAD scheme "mysql" is not supported`},
		{name: "env sqlite without path", store: Store{DSNEnv: "PATH0"}, wantErr: "needs a file path"},
		{name: "nothing", store: Store{}, wantErr: "store.dsn: must be"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			backend, dsn, err := tc.store.StoreDSN(getenv)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("StoreDSN() error = %v, want one containing %q", err, tc.wantErr)
				}
				if strings.Contains(err.Error(), secretValue) {
					t.Fatalf("StoreDSN() error leaks the DSN's password: %v", err)
				}
				return
			}
			if err != nil || backend != tc.wantBackend || dsn != tc.wantDSN {
				t.Fatalf("StoreDSN() = %q, %q, %v; want %q, %q, nil", backend, dsn, err, tc.wantBackend, tc.wantDSN)
			}
		})
	}
}
