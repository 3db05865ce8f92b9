package scrub

import (
	"encoding/json"
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"
)

const (
	testJWT   = "eyJhbGciOiJSUzI1NiIsImtpZCI6IjEifQ.eyJzdWIiOiJzeXN0ZW06c2VydmljZWFjY291bnQifQ.c2lnbmF0dXJlLWJ5dGVz_-x"
	testVault = "hvs.CAESIJ0aB1cD2eF3gH4iJ5kL6mN7oP8qR9sT"
	testPEM   = "-----BEGIN RSA PRIVATE KEY-----\nMIIBOgIBAAJBAKj34GkxFhD90vcNLYLInFEX6Ppy1tPf9Cnzj4p4WGeKLs1Pt8Qu\nKUpRKfFLfRYC9AIKjbJTWit+CqvjWYzvQwECAwEAAQ==\n-----END RSA PRIVATE KEY-----"
	// testLegacyVault is a pre-1.10 service token: s. and 24 base62 characters.
	testLegacyVault = "s.Q9bV3xKp7LmN2rT8wYz4HcJd"
	testAWSKeyID    = "AKIAIOSFODNN7EXAMPLE"
)

func TestString(t *testing.T) {
	tests := []struct {
		name, in, want string
	}{
		{"plain text is kept", "kubectl get pods -n demo", "kubectl get pods -n demo"},
		{"jwt", "sa token is " + testJWT + " ok", "sa token is <redacted:jwt> ok"},
		{"jwt without signature", "eyJhbGciOiJub25lIn0.eyJzdWIiOiJ4In0.", "<redacted:jwt>"},
		{"pem block", "before\n" + testPEM + "\nafter", "before\n<redacted:pem>\nafter"},
		{"cut pem block", "x -----BEGIN CERTIFICATE-----\nMIIBOgIBAAJBAKj34", "x <redacted:pem>"},
		{"vault token", "VAULT_TOKEN " + testVault + " used", "VAULT_TOKEN <redacted:vault-token> used"},
		{"vault batch token", "hvb.AAAAAQJ0aB1cD2eF3gH4iJ5kL6mN7", "<redacted:vault-token>"},
		{"short hvs prefix is not a token", "hvs.short", "hvs.short"},
		{"bearer", "curl -H 'X: Bearer abc.def-ghi'", "curl -H 'X: Bearer <redacted>'"},
		{"authorization header", "Authorization: Bearer abc.def", "Authorization: <redacted>"},
		{"key=value", "user=bob password=hunter2 host=x", "user=bob password=<redacted> host=x"},
		{"json in text", `{"client_secret":"abc","name":"x"}`, `{"client_secret":"<redacted>","name":"x"}`},
		{"kubeconfig yaml", "    client-key-data: LS0tLS1CRUdJTiBSU0EgUFJJVkFURSBLRVkt\n", "    client-key-data: <redacted>\n"},
		{"flag", "vault login --token=s.abc123", "vault login --token=<redacted>"},
		{"allowlisted key in text", "token_ttl=600 lease_id: kubernetes/creds/x/abc", "token_ttl=600 lease_id: kubernetes/creds/x/abc"},
		{"idempotent", "password=<redacted> Bearer <redacted> <redacted:jwt>", "password=<redacted> Bearer <redacted> <redacted:jwt>"},

		// Legacy Vault tokens.
		{"legacy service token", "VAULT_TOKEN is " + testLegacyVault + ".", "VAULT_TOKEN is <redacted:vault-token>."},
		{"legacy recovery token", "r.Q9bV3xKp7LmN2rT8wYz4HcJd", "<redacted:vault-token>"},
		{"legacy batch token", "b.AAAAAQKfVCYYfPmPdBsxGkQ7kPn1cZLJ3SDo2", "<redacted:vault-token>"},
		{"s. with 23 characters is not a token", "s.Q9bV3xKp7LmN2rT8wYz4HcJ", "s.Q9bV3xKp7LmN2rT8wYz4HcJ"},
		{"s. with 25 characters is not a token", "s.Q9bV3xKp7LmN2rT8wYz4HcJdX", "s.Q9bV3xKp7LmN2rT8wYz4HcJdX"},
		{"s. inside a word is not a token", "pods.Q9bV3xKp7LmN2rT8wYz4HcJd", "pods.Q9bV3xKp7LmN2rT8wYz4HcJd"},

		// AWS access key IDs.
		{"aws access key id", "aws_access_key_id = " + testAWSKeyID + "\n", "aws_access_key_id = <redacted:aws-key-id>\n"},
		{"aws temporary key id", "key ASIAY34FZKBOKMUTVV7A used", "key <redacted:aws-key-id> used"},
		{"bare aws key id in json", `{"id":"AKIAIOSFODNN7EXAMPLE"}`, `{"id":"<redacted:aws-key-id>"}`},
		{"aws-like id that is too long", "AKIAIOSFODNN7EXAMPLEX", "AKIAIOSFODNN7EXAMPLEX"},
		{"aws-like id with lower case", "AKIAiosfodnn7example", "AKIAiosfodnn7example"},

		// Passwords in URLs.
		{"url password", "dial postgres://app:s3cr3t@db.internal:5432/app failed", "dial postgres://app:<redacted>@db.internal:5432/app failed"},
		{"url password with @", "https://bob:p@ss@host/x", "https://bob:<redacted>@host/x"},
		{"url password without user", "redis://:hunter22@cache:6379", "redis://:<redacted>@cache:6379"},
		{"url in json", `{"url":"https://u:pw@h/p"}`, `{"url":"https://u:<redacted>@h/p"}`},
		{"url without password", "https://bob@host/x and https://host:8443/p@x", "https://bob@host/x and https://host:8443/p@x"},
		{"url with port", "https://example.com:443/path", "https://example.com:443/path"},

		// Escaped JSON.
		{"escaped json", `{"msg":"{\"token\":\"abc\",\"n\":1}"}`, `{"msg":"{\"token\":\"<redacted>\",\"n\":1}"}`},
		{"double-escaped json", `"{\\\"password\\\":\\\"abc\\\"}"`, `"{\\\"password\\\":\\\"<redacted>\\\"}"`},
		{"\\\\\" escaped", `{\\"secret\\":\\"abc\\"}`, `{\\"secret\\":\\"<redacted>\\"}`},
		{"escaped quote inside a value", `{"password":"ab\"cd","x":1}`, `{"password":"<redacted>","x":1}`},
		{"escaped quote inside an escaped value", `"{\"password\":\"ab\\\"cd\"}"`, `"{\"password\":\"<redacted>\"}"`},
		{"unterminated quoted value", "password=\"abc def\nnext", "password=\"<redacted>\nnext"},

		// Short key words, as whole words of the key.
		{"pwd", "MYSQL_PWD=hunter22 mysql", "MYSQL_PWD=<redacted> mysql"},
		{"pass", "db_pass: hunter22", "db_pass: <redacted>"},
		{"camel case pass", `{"dbPass":"hunter22"}`, `{"dbPass":"<redacted>"}`},
		{"auth", "auth=dXNlcjpwYXNz", "auth=<redacted>"},
		{"basic auth value", "proxy-auth: Basic dXNlcjpwYXNz", "proxy-auth: <redacted>"},
		{"dsn", "SENTRY_DSN=https://abc@o1.ingest.sentry.io/1", "SENTRY_DSN=<redacted>"},
		{"dsn in yaml", "  dsn: 'host=db user=app password=x'", "  dsn: '<redacted>'"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := String(tt.in)
			if got != tt.want {
				t.Errorf("String(%q)\n got %q\nwant %q", tt.in, got, tt.want)
			}
			if again := String(got); again != got {
				t.Errorf("not idempotent: %q -> %q", got, again)
			}
		})
	}
}

// falsePositiveKeys contain a short sensitive word (auth, pass, pwd, dsn) inside another word: their
// values are not secrets.
var falsePositiveKeys = []string{
	"authority", "author", "authors", "passed", "bypass", "compass", "passenger", "oauth",
	"www-authenticate", "Authority", "x-author-name", "test.passed", "compass_heading", "bypassCache",
	"dsnap", "pwdx", "subpass",
}

func TestFalsePositiveKeys(t *testing.T) {
	for _, key := range falsePositiveKeys {
		t.Run(key, func(t *testing.T) {
			if isSensitiveKey(key) {
				t.Errorf("isSensitiveKey(%q) = true", key)
			}
			for _, in := range []string{key + "=value1", key + ": value1", `"` + key + `":"value1"`, `\"` + key + `\":\"value1\"`} {
				if got := String(in); got != in {
					t.Errorf("String(%q) = %q, want it unchanged", in, got)
				}
			}
			in := map[string]any{key: "value1"}
			if got := Value(in); !reflect.DeepEqual(got, in) {
				t.Errorf("Value(%v) = %v, want it unchanged", in, got)
			}
		})
	}
}

func TestIsSensitiveKey(t *testing.T) {
	tests := []struct {
		key  string
		want bool
	}{
		{"pwd", true}, {"PWD", true}, {"mysql_pwd", true}, {"pass", true}, {"db_pass", true},
		{"dbPass", true}, {"DB-PASS", true}, {"pass2", true}, {"auth", true}, {"basicAuth", true},
		{"HTTPAuth", true}, {"x.auth.header", true}, {"dsn", true}, {"sentry.dsn", true}, {"databaseDSN", true},
		{"token", true}, {"accessToken", true}, {"vault_token_ttl", true}, {"client-key-data", true},
		{"authorization", true}, {"Proxy-Authorization", true}, {"passphrase", true}, {"PGPASSWORD", true},
		{"token_ttl", false}, {"lease_id", false}, {"namespace", false}, {"passport", false},
		{"authority", false}, {"author", false}, {"passed", false}, {"bypass", false}, {"compass", false},
	}
	for _, tt := range tests {
		if got := isSensitiveKey(tt.key); got != tt.want {
			t.Errorf("isSensitiveKey(%q) = %v, want %v", tt.key, got, tt.want)
		}
	}
}

func TestKeyWords(t *testing.T) {
	tests := map[string][]string{
		"dbPass":          {"db", "pass"},
		"HTTPAuthHeader":  {"http", "auth", "header"},
		"MYSQL_PWD":       {"mysql", "pwd"},
		"client-key.data": {"client", "key", "data"},
		"pass2word":       {"pass", "2", "word"},
		"--auth":          {"auth"},
		"":                nil,
	}
	for key, want := range tests {
		var got []string
		keyWords(key, func(w string) bool { got = append(got, w); return true })
		if !reflect.DeepEqual(got, want) {
			t.Errorf("keyWords(%q) = %q, want %q", key, got, want)
		}
	}
}

type testCreds struct {
	User   string `json:"user"`
	Token  string `json:"token"`
	Nested struct {
		PrivateKey string
		Note       string
	}
	Count int `json:"count"`
}

type testTier string

func TestValue(t *testing.T) {
	creds := testCreds{User: "bob", Token: "t0ps3cret", Count: 2}
	creds.Nested.PrivateKey = "k"
	creds.Nested.Note = "see " + testJWT

	tests := []struct {
		name string
		in   any
		want any
	}{
		{"nil", nil, nil},
		{"string", "x " + testVault, "x <redacted:vault-token>"},
		{"named string", testTier("t " + testJWT), "t <redacted:jwt>"},
		{"numbers and bools", []any{1, int64(2), 3.5, true}, []any{1, int64(2), 3.5, true}},
		{"non-finite float", math.NaN(), "NaN"},
		{
			"nested maps and slices",
			map[string]any{
				"a": map[string]any{
					"token":    "abc",
					"lease_id": "kubernetes/creds/ns-reader/xyz",
					"ttl":      "10m",
					"scope":    "namespace-reader",
					"list":     []any{testJWT, map[string]any{"Password": 1, "ok": "fine"}},
				},
			},
			map[string]any{
				"a": map[string]any{
					"token":    "<redacted>",
					"lease_id": "kubernetes/creds/ns-reader/xyz",
					"ttl":      "10m",
					"scope":    "namespace-reader",
					"list":     []any{"<redacted:jwt>", map[string]any{"Password": "<redacted>", "ok": "fine"}},
				},
			},
		},
		{
			"allowlist is exact",
			map[string]any{
				"token_id": "jti-1", "approval_token_id": "jti-2", "credential_scope": "s",
				"credential_ttl": 600, "token_ttl": 600, "Token-TTL": 1,
				"vault_token_ttl": 600, "access_token": "x", "accessToken": "x", "api-key": "x",
				"client-key-data": "x", "Cookie": "x", "KUBECONFIG": "x", "jwt": "x", "passphrase": "x",
			},
			map[string]any{
				"token_id": "jti-1", "approval_token_id": "jti-2", "credential_scope": "s",
				"credential_ttl": 600, "token_ttl": 600, "Token-TTL": 1,
				"vault_token_ttl": "<redacted>", "access_token": "<redacted>", "accessToken": "<redacted>",
				"api-key": "<redacted>", "client-key-data": "<redacted>", "Cookie": "<redacted>",
				"KUBECONFIG": "<redacted>", "jwt": "<redacted>", "passphrase": "<redacted>",
			},
		},
		{
			"short words as map keys",
			map[string]any{"pwd": "x", "db_pass": "x", "basicAuth": map[string]any{"user": "u"}, "dsn": "x", "author": "ann", "bypass": true},
			map[string]any{"pwd": "<redacted>", "db_pass": "<redacted>", "basicAuth": "<redacted>", "dsn": "<redacted>", "author": "ann", "bypass": true},
		},
		{
			"sensitive key redacts whole subtree",
			map[string]any{"credentials": map[string]any{"user": "bob", "n": 1}},
			map[string]any{"credentials": "<redacted>"},
		},
		{
			"typed map and slice",
			map[string][]string{"Authorization": {"Bearer x"}, "Accept": {"Bearer y", testVault}},
			map[string]any{"Authorization": "<redacted>", "Accept": []any{"Bearer <redacted>", "<redacted:vault-token>"}},
		},
		{
			"struct via JSON",
			creds,
			map[string]any{
				"user": "bob", "token": "<redacted>", "count": json.Number("2"),
				"Nested": map[string]any{"PrivateKey": "<redacted>", "Note": "see <redacted:jwt>"},
			},
		},
		{
			"pointer to struct",
			&creds,
			map[string]any{
				"user": "bob", "token": "<redacted>", "count": json.Number("2"),
				"Nested": map[string]any{"PrivateKey": "<redacted>", "Note": "see <redacted:jwt>"},
			},
		},
		{"bytes are text", []byte("cert " + testPEM), "cert <redacted:pem>"},
		{"binary bytes", []byte{0xff, 0xfe, 0x00}, "<binary:3 bytes>"},
		{"error", errors.New("vault login: Bearer abc denied"), "vault login: Bearer <redacted> denied"},
		{"secret in a key", map[string]any{testJWT: "v"}, map[string]any{"<redacted:jwt>": "v"}},
		{"func", func() {}, "<unencodable:func()>"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Value(tt.in)
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Value()\n got %#v\nwant %#v", got, tt.want)
			}
		})
	}
}

func TestValueDoesNotModifyInput(t *testing.T) {
	in := map[string]any{"token": "abc", "list": []any{testJWT}}
	_ = Value(in)
	if in["token"] != "abc" || in["list"].([]any)[0] != testJWT {
		t.Fatalf("Value modified its input: %#v", in)
	}
}

func TestValueCycleTerminates(t *testing.T) {
	m := map[string]any{}
	m["self"] = m
	var b strings.Builder
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(Value(m)); err != nil {
		t.Fatalf("scrubbed cyclic value does not marshal: %v", err)
	}
	if !strings.Contains(b.String(), tooDeep) {
		t.Fatalf("want %q in %s", tooDeep, b.String())
	}
}

func TestNilScrubberIsPatternsOnly(t *testing.T) {
	var s *Scrubber
	if got := s.String("x " + testVault); got != "x <redacted:vault-token>" {
		t.Errorf("nil Scrubber: %q", got)
	}
	if got := string(s.Bytes([]byte("password=x"))); got != "password=<redacted>" {
		t.Errorf("nil Scrubber Bytes: %q", got)
	}
}
