package audit

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
)

func TestScrubString(t *testing.T) {
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
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := ScrubString(tt.in)
			if got != tt.want {
				t.Errorf("ScrubString(%q)\n got %q\nwant %q", tt.in, got, tt.want)
			}
			if again := ScrubString(got); again != got {
				t.Errorf("not idempotent: %q -> %q", got, again)
			}
		})
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

func TestScrub(t *testing.T) {
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
			got := Scrub(tt.in)
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Scrub()\n got %#v\nwant %#v", got, tt.want)
			}
		})
	}
}

func TestScrubDoesNotModifyInput(t *testing.T) {
	in := map[string]any{"token": "abc", "list": []any{testJWT}}
	_ = Scrub(in)
	if in["token"] != "abc" || in["list"].([]any)[0] != testJWT {
		t.Fatalf("Scrub modified its input: %#v", in)
	}
}

func TestScrubCycleTerminates(t *testing.T) {
	m := map[string]any{}
	m["self"] = m
	got := Scrub(m)
	b, err := encodeLine(lineBody{Fields: got.(map[string]any)})
	if err != nil {
		t.Fatalf("scrubbed cyclic value does not marshal: %v", err)
	}
	if !strings.Contains(string(b), tooDeep) {
		t.Fatalf("want %q in %s", tooDeep, b)
	}
}
