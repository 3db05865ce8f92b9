package approver

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agent-sandbox/agent-sandbox/cmd/agent-sandbox/app/cli"
	"github.com/agent-sandbox/agent-sandbox/internal/approval"
)

// writeKeySet writes the public JWK set of a new key named id and returns its path.
func writeKeySet(t *testing.T, dir, id string) string {
	t.Helper()
	k, err := approval.GenerateKey(id)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, id+".jwks.json")
	if err := k.KeySet().WritePublicFile(path, false); err != nil {
		t.Fatal(err)
	}
	return path
}

func writeText(t *testing.T, path, content string) string {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// badKeySets are files no approver key set may be, with what the refusal must say.
func badKeySets(t *testing.T, dir string) map[string]string {
	const x = `"x":"11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo"`
	return map[string]string{
		writeText(t, filepath.Join(dir, "notjson"), "keys: [alice]\n"):                                                                                             "is not a JWK set of approver public keys: parse JWK set",
		writeText(t, filepath.Join(dir, "empty"), `{"keys":[]}`):                                                                                                   "JWK set has no keys",
		writeText(t, filepath.Join(dir, "notaset"), `{"kty":"OKP","crv":"Ed25519",`+x+`}`):                                                                         "JWK set has no keys",
		writeText(t, filepath.Join(dir, "dupkid"), `{"keys":[{"kty":"OKP","crv":"Ed25519","kid":"a",`+x+`},{"kty":"OKP","crv":"Ed25519","kid":"a",`+x+`}]}`):       `duplicate kid "a"`,
		writeText(t, filepath.Join(dir, "rsa"), `{"keys":[{"kty":"RSA","kid":"r","n":"AQAB","e":"AQAB"}]}`):                                                        `kty "RSA"`,
		writeText(t, filepath.Join(dir, "nokid"), `{"keys":[{"kty":"OKP","crv":"Ed25519",`+x+`}]}`):                                                                "JWK kid",
		writeText(t, filepath.Join(dir, "private"), `{"keys":[{"kty":"OKP","crv":"Ed25519","kid":"k1",`+x+`,"d":"nWGxne_9WmC6hEr0kuwsxERJxWl7MmkZcDusAxyuf2A"}]}`): `holds a PRIVATE key (JWK set key 0: JWK "k1" carries private key material ("d")`,
	}
}

// TestKeysCheck: a good set prints its key IDs; every bad one (not JSON, no keys, not a set, a key ID twice,
// another key type, no key ID, a private key) is refused with its reason and exit 1; a missing file exits 3.
func TestKeysCheck(t *testing.T) {
	dir := t.TempDir()
	alice := writeKeySet(t, dir, "alice")
	code, out, errOut := testMain.Capture("keys", "check", alice)
	if code != 0 || out != alice+": 1 key(s): alice\n" || errOut != "" {
		t.Fatalf("a good set: exit %d, %q %q", code, out, errOut)
	}
	for path, want := range badKeySets(t, dir) {
		code, out, errOut := testMain.Capture("keys", "check", alice, path)
		if code != 1 || !strings.Contains(errOut, want) || !strings.HasPrefix(errOut, "error: "+path) {
			t.Errorf("%s: exit %d, stderr %q, want exit 1 and %q", filepath.Base(path), code, errOut, want)
		}
		if !strings.Contains(out, alice+": 1 key(s)") {
			t.Errorf("%s: the good file beside it was not reported: %q", filepath.Base(path), out)
		}
	}
	code, _, errOut = testMain.Capture("keys", "check", filepath.Join(dir, "missing.json"))
	if code != cli.ExitNotFound || !strings.Contains(errOut, "missing.json: no such file") {
		t.Errorf("a missing file: exit %d, %q", code, errOut)
	}
	if code, _, _ := testMain.Capture("keys", "check"); code != cli.ExitUsage {
		t.Errorf("no file: exit %d, want %d", code, cli.ExitUsage)
	}
}

// TestKeysIDs: the key IDs of a set, sorted, one a line or joined; a bad set prints nothing on stdout.
func TestKeysIDs(t *testing.T) {
	dir := t.TempDir()
	merged := filepath.Join(dir, "both.jwks.json")
	if code, _, errOut := testMain.Capture("keys", "merge", "--out", merged, writeKeySet(t, dir, "bob"), writeKeySet(t, dir, "alice")); code != 0 {
		t.Fatalf("merge: exit %d, %s", code, errOut)
	}
	if code, out, _ := testMain.Capture("keys", "ids", merged); code != 0 || out != "alice\nbob\n" {
		t.Errorf("ids: exit %d, %q", code, out)
	}
	if code, out, _ := testMain.Capture("keys", "ids", "--separator", ", ", merged); code != 0 || out != "alice, bob\n" {
		t.Errorf("ids --separator: exit %d, %q", code, out)
	}
	for path, want := range badKeySets(t, dir) {
		code, out, errOut := testMain.Capture("keys", "ids", path)
		if code != 1 || out != "" || !strings.Contains(errOut, want) {
			t.Errorf("%s: exit %d, stdout %q, stderr %q", filepath.Base(path), code, out, errOut)
		}
	}
	if code, _, _ := testMain.Capture("keys", "ids", filepath.Join(dir, "missing")); code != cli.ExitNotFound {
		t.Errorf("a missing file: exit %d", code)
	}
}

// TestKeysMerge: the merged set trusts every key of each input, the same key twice counts once, and one key
// ID naming two different keys, a bad input or --out naming an input is refused without writing anything.
func TestKeysMerge(t *testing.T) {
	dir := t.TempDir()
	alice, bob := writeKeySet(t, dir, "alice"), writeKeySet(t, dir, "bob")
	code, out, errOut := testMain.Capture("keys", "merge", alice, bob, alice)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	set, err := approval.LoadKeySet([]byte(out))
	if err != nil {
		t.Fatalf("the merged set does not load as the webhook loads it: %v\n%s", err, out)
	}
	if got := strings.Join(set.KeyIDs(), ","); got != "alice,bob" {
		t.Errorf("merged key IDs %s", got)
	}

	other := filepath.Join(t.TempDir(), "alice.jwks.json") // another key under the same ID
	writeKeySet(t, filepath.Dir(other), "alice")
	out2 := filepath.Join(dir, "out.json")
	code, out, errOut = testMain.Capture("keys", "merge", "--out", out2, alice, other)
	if code != 1 || out != "" || !strings.Contains(errOut, `merge `+other+`: key ID "alice" names two different keys`) {
		t.Errorf("one ID, two keys: exit %d, %q %q", code, out, errOut)
	}
	for path, want := range badKeySets(t, dir) {
		code, _, errOut := testMain.Capture("keys", "merge", "--out", out2, alice, path)
		if code != 1 || !strings.Contains(errOut, want) {
			t.Errorf("%s: exit %d, %q", filepath.Base(path), code, errOut)
		}
	}
	if _, err := os.Stat(out2); err == nil {
		t.Error("a refused merge wrote --out")
	}
	if code, _, errOut := testMain.Capture("keys", "merge", "--out", alice, alice, bob); code != cli.ExitUsage || !strings.Contains(errOut, "is also an input") {
		t.Errorf("--out an input: exit %d, %q", code, errOut)
	}
	if code, _, _ := testMain.Capture("keys", "merge", "--out", out2, alice, bob); code != 0 {
		t.Fatal("merge --out failed")
	}
	if fi, err := os.Stat(out2); err != nil || fi.Mode().Perm() != 0o644 {
		t.Errorf("--out: %v, mode %v, want 0644", err, fi.Mode().Perm())
	}
}
