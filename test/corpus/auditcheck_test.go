package corpus

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestJudgeAuditReport: calls made through an MCP server must be OK, the corpus's own Jobs (head
// AuditHead) must be reported as in no log, and a broken chain or a window without any logged call fails.
func TestJudgeAuditReport(t *testing.T) {
	decode := func(s string) AuditReport {
		var r AuditReport
		if err := json.Unmarshal([]byte(s), &r); err != nil {
			t.Fatal(err)
		}
		return r
	}
	logged := `{"request_id":"req-a","tool":"k8s_get_pod_status","job":"j1","head":"11","status":"ok","file":"a.jsonl"}`
	direct := `{"request_id":"req-b","tool":"terraform_apply","job":"j2","head":"` + AuditHead + `","status":"failed","file":"a.jsonl"}`
	for _, c := range []struct {
		name, json string
		problem    string
	}{
		{"good", `{"files":[{"file":"a.jsonl","lines":9}],"results":[` + logged + `,` + direct + `]}`, ""},
		{"a logged call cut", `{"files":[{"file":"a.jsonl","lines":9}],"results":[` + logged + `,` + strings.Replace(logged, `"ok"`, `"failed"`, 1) + `]}`, "is failed in a.jsonl"},
		{"a logged call in progress", `{"files":[{"file":"a.jsonl","lines":9}],"results":[` + logged + `,` + strings.Replace(logged, `"ok"`, `"in progress"`, 1) + `]}`, "is in progress"},
		{"a corpus Job matched", `{"files":[{"file":"a.jsonl","lines":9}],"results":[` + logged + `,` + strings.Replace(direct, `"failed"`, `"ok"`, 1) + `]}`, "submitted by the corpus itself, is ok"},
		{"a warm claim never stored, voided", `{"files":[{"file":"a.jsonl","lines":9}],"results":[` + logged + `,` + strings.Replace(logged, `"ok"`, `"void"`, 1) + `]}`, ""},
		{"a corpus claim voided", `{"files":[{"file":"a.jsonl","lines":9}],"results":[` + logged + `,` + strings.Replace(direct, `"failed"`, `"void"`, 1) + `]}`, "submitted by the corpus itself, is void"},
		{"a broken chain", `{"files":[{"file":"a.jsonl","lines":3,"broken":{"line":4,"reason":"x"}}],"results":[` + logged + `]}`, "chain broken at line 4"},
		{"no logged call", `{"files":[{"file":"a.jsonl","lines":0}],"results":[` + direct + `]}`, "no anchored call"},
	} {
		summary, problems := judgeAuditReport(decode(c.json))
		got := strings.Join(problems, "; ")
		if (c.problem == "") != (got == "") || !strings.Contains(got, c.problem) {
			t.Errorf("%s: problems %q, want %q (summary %s)", c.name, got, c.problem, summary)
		}
	}
}
