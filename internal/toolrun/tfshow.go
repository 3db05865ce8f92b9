package toolrun

import (
	"context"
	"fmt"
)

// MaxShowTextBytes bounds the plan text `run terraform-show` returns.
const MaxShowTextBytes = 64 << 10

// ImageProviderMirror is where the agent-sandbox image keeps the kubernetes provider (a filesystem mirror).
const ImageProviderMirror = "/usr/share/terraform/providers"

// ShowResult is what `run terraform-show` writes: a saved plan, described by Terraform itself.
type ShowResult struct {
	PlanID  string           `json:"plan_id"`
	Summary PlanSummary      `json:"summary"`
	Changes []ResourceChange `json:"changes"`
	// NoChanges is true when the plan changes neither resources nor outputs.
	NoChanges bool `json:"no_changes"`
	// Text is `terraform show` of the plan, cut to MaxShowTextBytes (Truncated then says so).
	Text      string `json:"text"`
	Truncated bool   `json:"truncated"`
}

// ShowSaved reads the saved plan at path, refuses it unless it hashes to planID and passes the allowlist,
// and describes it with Terraform (ShowPlan: no cluster, no credential involved).
func ShowSaved(ctx context.Context, path, planID string, o ShowOptions) (ShowResult, error) {
	if err := ValidatePlanID(planID); err != nil {
		return ShowResult{}, err
	}
	plan, _, err := LoadPlan(path, planID)
	if err != nil {
		return ShowResult{}, err
	}
	changes, text, err := ShowPlan(ctx, plan, o)
	if err != nil {
		return ShowResult{}, fmt.Errorf("terraform show: %w", err)
	}
	res := ShowResult{PlanID: planID, Summary: changes.Summary, Changes: changes.Changes, NoChanges: changes.NoChanges}
	var whole bool
	res.Text, whole = cutUTF8(text, MaxShowTextBytes)
	res.Truncated = !whole
	if res.Changes == nil {
		res.Changes = []ResourceChange{}
	}
	return res, nil
}
