package corpus

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agent-sandbox/agent-sandbox/internal/toolrun"
)

// The forged plan ForgedPlanApply submits must be refused by the same check the sandbox runs, for its
// exec block; the untouched plan it is made from must not be, or the live case would prove nothing.
func TestForgedPlanIsRefusedForItsExec(t *testing.T) {
	plan, err := os.ReadFile("../../internal/tfcheck/testdata/plans/implicit-backend.tfplan")
	if err != nil {
		t.Fatal(err)
	}
	load := func(b []byte) error {
		p := filepath.Join(t.TempDir(), "tfplan")
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(b)
		_, _, err := toolrun.LoadPlan(p, hex.EncodeToString(sum[:]))
		return err
	}
	if err := load(plan); err != nil {
		t.Fatalf("the original plan is refused: %v", err)
	}
	forged, err := swapPlanConfig(plan, map[string]string{"tfconfig/m-/main.tf": forgedConfig})
	if err != nil {
		t.Fatal(err)
	}
	if err := load(forged); err == nil || !strings.Contains(err.Error(), forgedReason) {
		t.Fatalf("the forged plan is not refused for its exec block: %v", err)
	}
}
