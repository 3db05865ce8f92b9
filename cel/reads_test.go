package cel

import "testing"

func TestReadsOnlyRenderedFields(t *testing.T) {
	tests := []struct {
		expr string
		want bool
	}{
		{`podSpec.?hostNetwork.orValue(false) == false`, true},
		{`containers.all(c, c.?securityContext.?privileged.orValue(false) == false)`, true},
		{`object.?spec.?activeDeadlineSeconds.orValue(0) > 0 && object.spec.activeDeadlineSeconds <= settings.maxDeadlineSeconds`, true},
		{`has(object.spec.backoffLimit)`, true},
		{`object.spec.template.spec.hostPID == false`, true},
		{`object["spec"]["parallelism"] == 1`, true},
		{`podMetadata.?annotations.orValue({}).all(k, k != "x")`, true},
		{`kind == "Job" && operation == "CREATE"`, true},
		// Per-request fields.
		{`object.metadata.name.startsWith("as-")`, false},
		{`has(object.metadata.labels)`, false},
		{`object.?metadata.?uid.orValue("") != ""`, false},
		{`podMetadata.?labels.orValue({}).size() == 0`, false},
		{`object.spec.selector.matchLabels.size() == 1`, false},
		{`object.spec.template.metadata.labels.size() > 0`, false},
		{`object.spec.template.size() > 0`, false},
		// Uses the analysis cannot follow.
		{`object.size() > 0`, false},
		{`object[settings.runtimeClassName] == 1`, false},
		{`containers.all(object, object.name != "")`, false},
		{`[object].size() == 1`, false},
	}
	for _, tt := range tests {
		p, err := Compile([]Rule{{Path: "r", Name: "r", Expression: tt.expr, Message: "m"}}, "v")
		if err != nil {
			t.Fatalf("%s: %v", tt.expr, err)
		}
		if got := p.ReadsOnlyRenderedFields(); got != tt.want {
			t.Errorf("%s: ReadsOnlyRenderedFields = %v, want %v", tt.expr, got, tt.want)
		}
	}
}

func TestDefaultRulesReadOnlyRenderedFields(t *testing.T) {
	if !compileDefault(t).ReadsOnlyRenderedFields() {
		t.Fatal("the shipped rules read a per-request field: the webhook cannot reuse their verdict")
	}
}
