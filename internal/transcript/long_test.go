package transcript

import (
	"testing"
)

// The five long runs of shared/data load with the messages their README
// counts (mini-swe-agent 2.x less its exit message; OpenHands V1 with the
// instruction as the user turn and two calls of one response in one
// message), every tool result after its call.
func TestLoadLongDir(t *testing.T) {
	convs, err := LoadLongDir("../../../shared/data/agent_trajectories/long")
	if err != nil {
		t.Fatal(err)
	}
	if len(convs) == 0 {
		t.Skip("no ../shared/data/agent_trajectories/long here")
	}
	if len(convs) != 5 {
		t.Fatalf("%d conversations, want 5", len(convs))
	}
	want := map[string]int{"mini-swe-agent/minisweagent-gemini-3-pro_pytest-dev__pytest-6197": 186,
		"mini-swe-agent/minisweagent-gemini-3-pro_scikit-learn__scikit-learn-25102": 88,
		"mini-swe-agent/minisweagent2-deepseek-chat_sqlfluff__sqlfluff-1733":        315}
	for _, c := range convs {
		if n, ok := want[c.Name]; ok && len(c.Messages) != n {
			t.Errorf("%s: %d messages, want %d", c.Name, len(c.Messages), n)
		}
		called := map[string]bool{}
		for i, m := range c.Messages {
			for _, tc := range m.ToolCalls {
				called[tc.ID] = true
			}
			if m.ToolCallID != "" && !called[m.ToolCallID] {
				t.Fatalf("%s message %d answers %s, called nowhere before", c.Name, i, m.ToolCallID)
			}
		}
		if c.Name == "openhands-v1/safety-metrics" && (c.Messages[0].Role != "user" || len(c.Messages[5].ToolCalls) != 2) {
			t.Fatalf("%s: %+v / %+v", c.Name, c.Messages[0].Role, c.Messages[5])
		}
	}
}
