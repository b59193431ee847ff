package transcript

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/compactor/compactor/internal/session"
)

// LoadLongDir reads the long agent runs of shared/data's
// agent_trajectories/long (its README says each format): mini-swe-agent
// 1.x and 2.x trajectories (*.traj.json) and OpenHands V0 and V1 output
// (*.jsonl). A missing directory reads as none.
func LoadLongDir(dir string) ([]Conversation, error) {
	var out []Conversation
	trajs, _ := filepath.Glob(filepath.Join(dir, "*.traj.json"))
	for _, p := range trajs {
		c, err := LoadMiniSWEAgent(p)
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	runs, _ := filepath.Glob(filepath.Join(dir, "*.jsonl"))
	for _, p := range runs {
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, err
		}
		load := LoadOpenHands
		if bytes.Contains(b, []byte(`"kind":"ActionEvent"`)) || bytes.Contains(b, []byte(`"kind": "ActionEvent"`)) {
			load = LoadOpenHandsV1
		}
		cs, err := load(p)
		if err != nil {
			return nil, err
		}
		out = append(out, cs...)
	}
	return out, nil
}

// LoadMiniSWEAgent reads a mini-swe-agent trajectory (.traj.json): its
// messages, less the closing "exit" message of 2.x (the submission, which
// the model never saw).
func LoadMiniSWEAgent(path string) (Conversation, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Conversation{}, err
	}
	var traj struct {
		Messages []json.RawMessage `json:"messages"`
	}
	if err := json.Unmarshal(b, &traj); err != nil {
		return Conversation{}, fmt.Errorf("mini-swe-agent %s: %w", path, err)
	}
	kept := traj.Messages[:0]
	for _, raw := range traj.Messages {
		var r struct {
			Role string `json:"role"`
		}
		if json.Unmarshal(raw, &r) == nil && r.Role == "exit" {
			continue
		}
		kept = append(kept, raw)
	}
	all, _ := json.Marshal(kept)
	msgs, err := Parse(all)
	if err != nil {
		return Conversation{}, fmt.Errorf("mini-swe-agent %s: %w", path, err)
	}
	return Conversation{Name: "mini-swe-agent/" + strings.TrimSuffix(filepath.Base(path), ".traj.json"), Source: "mini-swe-agent", Messages: msgs}, nil
}

// LoadOpenHandsV1 reads OpenHands agent SDK (V1) output (JSON lines, one
// run each): the instruction is the user turn; action events of one model
// response are one assistant message with their tool calls; observation
// events are the tool results.
func LoadOpenHandsV1(path string) ([]Conversation, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var out []Conversation
	for ln, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var run struct {
			InstanceID  string `json:"instance_id"`
			Instruction string `json:"instruction"`
			History     []struct {
				Kind          string `json:"kind"`
				ToolCallID    string `json:"tool_call_id"`
				LLMResponseID string `json:"llm_response_id"`
				ToolCall      struct {
					ID        string `json:"id"`
					Name      string `json:"name"`
					Arguments string `json:"arguments"`
				} `json:"tool_call"`
				Observation struct {
					Output json.RawMessage `json:"output"`
				} `json:"observation"`
			} `json:"history"`
		}
		if err := json.Unmarshal([]byte(line), &run); err != nil {
			return nil, fmt.Errorf("openhands v1 %s line %d: %w", path, ln+1, err)
		}
		msgs := []session.Message{{Role: session.RoleUser, Content: session.TextContent(run.Instruction)}}
		lastResponse := ""
		for _, e := range run.History {
			switch e.Kind {
			case "ActionEvent":
				call := session.ToolCall{ID: e.ToolCall.ID, Type: "function", Function: session.FunctionCall{Name: e.ToolCall.Name, Arguments: e.ToolCall.Arguments}}
				if last := len(msgs) - 1; e.LLMResponseID != "" && e.LLMResponseID == lastResponse && msgs[last].Role == session.RoleAssistant {
					msgs[last].ToolCalls = append(msgs[last].ToolCalls, call)
					continue
				}
				lastResponse = e.LLMResponseID
				msgs = append(msgs, session.Message{Role: session.RoleAssistant, ToolCalls: []session.ToolCall{call}})
			case "ObservationEvent":
				var text string
				if json.Unmarshal(e.Observation.Output, &text) != nil {
					text = string(e.Observation.Output)
				}
				msgs = append(msgs, session.Message{Role: session.RoleTool, ToolCallID: e.ToolCallID, Content: session.TextContent(text)})
			}
		}
		for i := range msgs {
			if err := msgs[i].Validate(); err != nil {
				return nil, fmt.Errorf("openhands v1 %s run %d message %d: %w", path, ln+1, i, err)
			}
		}
		out = append(out, Conversation{Name: "openhands-v1/" + run.InstanceID, Source: "openhands", Messages: msgs})
	}
	return out, nil
}
