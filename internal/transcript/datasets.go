package transcript

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/compactor/compactor/internal/session"
)

// LoadLoCoMo reads LoCoMo samples: speaker_a becomes the user, speaker_b the
// assistant, each turn one message named after its speaker; a session's
// first turn carries the session's date, so dates stay in the text.
func LoadLoCoMo(path string) ([]Conversation, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var samples []struct {
		SampleID     string                     `json:"sample_id"`
		Conversation map[string]json.RawMessage `json:"conversation"`
		QA           []struct {
			Question string          `json:"question"`
			Answer   json.RawMessage `json:"answer"`
			Evidence []string        `json:"evidence"`
			Category int             `json:"category"`
		} `json:"qa"`
	}
	if err := json.Unmarshal(b, &samples); err != nil {
		return nil, fmt.Errorf("locomo %s: %w", path, err)
	}
	var out []Conversation
	for _, s := range samples {
		var a, bName string
		_ = json.Unmarshal(s.Conversation["speaker_a"], &a)
		_ = json.Unmarshal(s.Conversation["speaker_b"], &bName)
		var nums []int
		for k := range s.Conversation {
			if rest, ok := strings.CutPrefix(k, "session_"); ok && !strings.Contains(rest, "_") {
				if n, err := strconv.Atoi(rest); err == nil {
					nums = append(nums, n)
				}
			}
		}
		sort.Ints(nums)
		c := Conversation{Name: s.SampleID, Source: "locomo", DiaIndex: map[string]int{}}
		for _, n := range nums {
			var turns []struct {
				Speaker string `json:"speaker"`
				DiaID   string `json:"dia_id"`
				Text    string `json:"text"`
				Caption string `json:"blip_caption"`
			}
			if err := json.Unmarshal(s.Conversation[fmt.Sprintf("session_%d", n)], &turns); err != nil {
				return nil, fmt.Errorf("locomo %s session %d: %w", s.SampleID, n, err)
			}
			var date string
			_ = json.Unmarshal(s.Conversation[fmt.Sprintf("session_%d_date_time", n)], &date)
			for i, t := range turns {
				role := session.RoleAssistant
				if t.Speaker == a {
					role = session.RoleUser
				}
				text := t.Text
				if t.Caption != "" {
					text += " [shares a photo: " + t.Caption + "]"
				}
				if i == 0 && date != "" {
					text = "(" + date + ") " + text
				}
				c.DiaIndex[t.DiaID] = len(c.Messages)
				c.Messages = append(c.Messages, session.Message{Role: role, Name: nameField(t.Speaker), Content: session.TextContent(text)})
			}
		}
		for _, q := range s.QA {
			ans := strings.Trim(string(q.Answer), `"`)
			var sAns string
			if json.Unmarshal(q.Answer, &sAns) == nil {
				ans = sAns
			}
			c.QA = append(c.QA, QA{Question: q.Question, Answer: ans, Evidence: q.Evidence, Category: q.Category})
		}
		out = append(out, c)
	}
	return out, nil
}

// Speaker forms: how a chat between people names who speaks.
const (
	SpeakersName      = "name"      // each message's name field (as LoadLoCoMo reads it)
	SpeakersPrefix    = "prefix"    // "Speaker: text" in the content, no name
	SpeakersAnonymous = "anonymous" // neither: roles alone
)

// WithSpeakers returns convs with LoCoMo's chats stored in the speaker
// form given (the others as they are): the same conversations as a
// runtime might keep them.
func WithSpeakers(convs []Conversation, form string) ([]Conversation, error) {
	switch form {
	case SpeakersName:
		return convs, nil
	case SpeakersPrefix, SpeakersAnonymous:
	default:
		return nil, fmt.Errorf("speaker form %q is not %s, %s or %s", form, SpeakersName, SpeakersPrefix, SpeakersAnonymous)
	}
	out := make([]Conversation, len(convs))
	for i, c := range convs {
		out[i] = c
		if c.Source != "locomo" {
			continue
		}
		out[i].Messages = make([]session.Message, len(c.Messages))
		for j, m := range c.Messages {
			if form == SpeakersPrefix && m.Name != "" {
				m.Content = session.TextContent(strings.ReplaceAll(m.Name, "_", " ") + ": " + m.Content.Text)
			}
			m.Name = ""
			out[i].Messages[j] = m
		}
	}
	return out, nil
}

// nameField makes a speaker name valid for OpenAI's name field
// (letters, digits, underscores and hyphens).
func nameField(s string) string {
	return strings.Map(func(r rune) rune {
		if r == ' ' {
			return '_'
		}
		return r
	}, s)
}

// LoadTauBench reads tau-bench runs; each run's traj is already OpenAI chat
// format.
func LoadTauBench(path string) ([]Conversation, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var runs []struct {
		TaskID int             `json:"task_id"`
		Trial  int             `json:"trial"`
		Traj   json.RawMessage `json:"traj"`
	}
	if err := json.Unmarshal(b, &runs); err != nil {
		return nil, fmt.Errorf("tau-bench %s: %w", path, err)
	}
	out := make([]Conversation, 0, len(runs))
	for _, r := range runs {
		msgs, err := Parse(r.Traj)
		if err != nil {
			return nil, fmt.Errorf("tau-bench task %d trial %d: %w", r.TaskID, r.Trial, err)
		}
		out = append(out, Conversation{Name: fmt.Sprintf("tau-bench/task%d-trial%d", r.TaskID, r.Trial), Source: "tau-bench", Messages: msgs})
	}
	return out, nil
}

// LoadSWEAgent reads a SWE-agent .traj file's history (tool_call_ids mapped
// to tool_call_id).
func LoadSWEAgent(path string) (Conversation, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Conversation{}, err
	}
	var traj struct {
		History []json.RawMessage `json:"history"`
	}
	if err := json.Unmarshal(b, &traj); err != nil {
		return Conversation{}, fmt.Errorf("swe-agent %s: %w", path, err)
	}
	var msgs []session.Message
	for i, raw := range traj.History {
		var w wireMessage
		if err := json.Unmarshal(raw, &w); err != nil {
			return Conversation{}, fmt.Errorf("swe-agent %s message %d: %w", path, i, err)
		}
		if w.Role == "" {
			w.Role = session.RoleUser // demonstrations carry no role; the model read them as user text
		}
		m := w.message()
		m.Content.Text = normaliseText(m.Content.Text)
		if err := m.Validate(); err != nil {
			return Conversation{}, fmt.Errorf("swe-agent %s message %d: %w", path, i, err)
		}
		msgs = append(msgs, m)
	}
	return Conversation{Name: "swe-agent/" + strings.TrimSuffix(filepath.Base(path), ".traj"), Source: "swe-agent", Messages: msgs}, nil
}

// LoadOpenHands reads OpenHands evaluation output (JSON lines, one run
// each). The system prompt and user messages come from message actions; an
// agent action with tool_call_metadata contributes its raw model message
// (once per model response, since parallel calls share one); observations
// become tool results paired by tool_call_id.
func LoadOpenHands(path string) ([]Conversation, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var out []Conversation
	for ln, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var run struct {
			InstanceID string `json:"instance_id"`
			History    []struct {
				Source           string `json:"source"`
				Message          string `json:"message"`
				Action           string `json:"action"`
				Observation      string `json:"observation"`
				Content          string `json:"content"`
				ToolCallMetadata *struct {
					FunctionName  string `json:"function_name"`
					ToolCallID    string `json:"tool_call_id"`
					ModelResponse struct {
						ID      string `json:"id"`
						Choices []struct {
							Message wireMessage `json:"message"`
						} `json:"choices"`
					} `json:"model_response"`
				} `json:"tool_call_metadata"`
			} `json:"history"`
		}
		if err := json.Unmarshal([]byte(line), &run); err != nil {
			return nil, fmt.Errorf("openhands %s line %d: %w", path, ln+1, err)
		}
		var msgs []session.Message
		seenResponse := map[string]bool{}
		for i, e := range run.History {
			tcm := e.ToolCallMetadata
			switch {
			case i == 0 && e.Source == "agent" && e.Action == "system":
				msgs = append(msgs, session.Message{Role: session.RoleSystem, Content: session.TextContent(e.Message)})
			case e.Action == "system":
				msgs = append(msgs, session.Message{Role: session.RoleSystem, Content: session.TextContent(e.Message)})
			case e.Source == "user" && e.Action == "message":
				msgs = append(msgs, session.Message{Role: session.RoleUser, Content: session.TextContent(e.Message)})
			case e.Action != "" && tcm != nil && len(tcm.ModelResponse.Choices) > 0:
				if seenResponse[tcm.ModelResponse.ID] {
					continue
				}
				seenResponse[tcm.ModelResponse.ID] = true
				msgs = append(msgs, tcm.ModelResponse.Choices[0].Message.message())
			case e.Observation != "" && tcm != nil:
				msgs = append(msgs, session.Message{Role: session.RoleTool, ToolCallID: tcm.ToolCallID, Content: session.TextContent(e.Content)})
			case e.Source == "agent" && e.Action == "message":
				msgs = append(msgs, session.Message{Role: session.RoleAssistant, Content: session.TextContent(e.Message)})
			}
		}
		for i := range msgs {
			msgs[i].Role = session.Role(strings.ToLower(string(msgs[i].Role)))
			if err := msgs[i].Validate(); err != nil {
				return nil, fmt.Errorf("openhands %s run %d message %d: %w", path, ln+1, i, err)
			}
		}
		out = append(out, Conversation{Name: "openhands/" + run.InstanceID, Source: "openhands", Messages: msgs})
	}
	return out, nil
}

// LoadDataDir reads every dataset found under dir (the layout of
// shared/data): LoCoMo, tau-bench, SWE-agent and OpenHands. Missing
// datasets are skipped; an unreadable one is an error.
func LoadDataDir(dir string) ([]Conversation, error) {
	var out []Conversation
	if p := filepath.Join(dir, "locomo", "locomo8.json"); exists(p) {
		cs, err := LoadLoCoMo(p)
		if err != nil {
			return nil, err
		}
		out = append(out, cs...)
	}
	tau, _ := filepath.Glob(filepath.Join(dir, "agent_trajectories", "tau-bench", "*.json"))
	for _, p := range tau {
		cs, err := LoadTauBench(p)
		if err != nil {
			return nil, err
		}
		out = append(out, cs...)
	}
	swe, _ := filepath.Glob(filepath.Join(dir, "agent_trajectories", "swe-agent", "*.traj"))
	for _, p := range swe {
		c, err := LoadSWEAgent(p)
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	oh, _ := filepath.Glob(filepath.Join(dir, "agent_trajectories", "openhands", "*.jsonl"))
	for _, p := range oh {
		cs, err := LoadOpenHands(p)
		if err != nil {
			return nil, err
		}
		out = append(out, cs...)
	}
	return out, nil
}

func exists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}
