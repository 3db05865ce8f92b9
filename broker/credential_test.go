package broker

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/agent-sandbox/agent-sandbox/internal/scrub"
)

// secretToken looks like a real service-account token, so that both a literal search and the JWT pattern
// would find it.
const secretToken = "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJzeXN0ZW06c2VydmljZWFjY291bnQifQ.c2lnbmF0dXJlLXNlY3JldA"

func testCredential() Credential {
	return Credential{
		ServiceAccount: "v-as-pod-reader-1700000000-abcd1234",
		Namespace:      "demo-app",
		LeaseID:        "kubernetes/creds/agent-sandbox-pod-reader/XyZ",
		TTL:            10 * time.Minute,
		IssuedAt:       time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC),
		Token:          secretToken,
	}
}

func TestCredentialRedaction(t *testing.T) {
	c := testCredential()
	forms := map[string]string{}
	for _, verb := range []string{"%v", "%+v", "%s", "%q", "%d", "%x", "%X", "%#v", "%10.3v"} {
		forms["value "+verb] = fmt.Sprintf(verb, c)
		forms["pointer "+verb] = fmt.Sprintf(verb, &c)
	}
	forms["String"] = c.String()
	forms["GoString"] = c.GoString()
	forms["in a struct %+v"] = fmt.Sprintf("%+v", struct{ C Credential }{c})
	forms["in a slice %v"] = fmt.Sprint([]Credential{c})
	forms["in a map %#v"] = fmt.Sprintf("%#v", map[string]*Credential{"c": &c})

	for name, v := range map[string]any{"value": c, "pointer": &c, "in a struct": struct{ C Credential }{c}} {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatalf("json %s: %v", name, err)
		}
		// encoding/json escapes '<' and '>' as \u003c and \u003e; compare the decoded text.
		var decoded any
		if err := json.Unmarshal(b, &decoded); err != nil {
			t.Fatal(err)
		}
		forms["json "+name] = fmt.Sprint(decoded)
	}
	var text, js bytes.Buffer
	slog.New(slog.NewTextHandler(&text, nil)).Info("issued", "credential", c, "pointer", &c)
	slog.New(slog.NewJSONHandler(&js, nil)).Info("issued", "credential", c, "pointer", &c)
	forms["slog text"] = text.String()
	forms["slog json"] = js.String()
	forms["scrub.Value"] = fmt.Sprint(scrub.Value(c))

	for name, s := range forms {
		if strings.Contains(s, secretToken) || strings.Contains(s, "c2lnbmF0dXJl") {
			t.Errorf("%s leaks the token: %s", name, s)
		}
		if name != "scrub.Value" && !strings.Contains(s, "<redacted>") {
			t.Errorf("%s does not say the token is redacted: %s", name, s)
		}
	}
	// The useful fields are still there.
	for _, name := range []string{"value %v", "json value", "slog text", "value %#v"} {
		if !strings.Contains(forms[name], "v-as-pod-reader-1700000000-abcd1234") || !strings.Contains(forms[name], "agent-sandbox-pod-reader/XyZ") {
			t.Errorf("%s lost the service account or lease: %s", name, forms[name])
		}
	}
	if c.Token != secretToken {
		t.Error("the token itself must stay usable")
	}
}

func TestCredentialJSONShape(t *testing.T) {
	b, err := json.Marshal(testCredential())
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	if m["ttl_seconds"] != float64(600) || m["namespace"] != "demo-app" || m["token"] != "<redacted>" {
		t.Errorf("json = %s", b)
	}
}
