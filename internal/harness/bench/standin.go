package bench

import (
	"context"
	"html"
	"net"
	"net/http"
	"regexp"
	"strings"
	"sync/atomic"
	"time"

	"github.com/compactor/compactor/internal/fakeprovider"
	"github.com/compactor/compactor/internal/pipeline"
	"github.com/compactor/compactor/internal/session"
	"github.com/compactor/compactor/internal/tokens"
)

// StandIn is an OpenAI-compatible chat completions server standing in for
// a summary model: every call takes Delay, and its answer is what the
// offline summariser writes from the transcript it was sent (read back
// from the prompt), so that a measurement through it keeps the offline
// summariser's quality and pays a real model's wait. It counts the tokens
// it reads and writes, and the calls that said they were preparations.
type StandIn struct {
	URL   string // base URL: .../v1
	delay time.Duration
	sum   pipeline.Summarizer
	count *tokens.Counter
	srv   *http.Server

	calls, prepCalls, inTokens, outTokens, prepIn, prepOut atomic.Int64
}

// StartStandIn serves on a free loopback port.
func StartStandIn(delay time.Duration, sum pipeline.Summarizer, counter *tokens.Counter) (*StandIn, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &StandIn{URL: "http://" + l.Addr().String() + "/v1", delay: delay, sum: sum, count: counter}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/chat/completions", s.handle)
	s.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = s.srv.Serve(l) }()
	return s, nil
}

// Close stops the server.
func (s *StandIn) Close() { _ = s.srv.Close() }

// StandInStats are a stand-in's counters: calls and tokens in all, and
// those of preparations.
type StandInStats struct {
	Calls, InputTokens, OutputTokens             int64
	PrepCalls, PrepInputTokens, PrepOutputTokens int64
}

// Stats returns the counters.
func (s *StandIn) Stats() StandInStats {
	return StandInStats{Calls: s.calls.Load(), InputTokens: s.inTokens.Load(), OutputTokens: s.outTokens.Load(),
		PrepCalls: s.prepCalls.Load(), PrepInputTokens: s.prepIn.Load(), PrepOutputTokens: s.prepOut.Load()}
}

var (
	// messageOpen opens a message's first line in a transcript: its role
	// (and name, or the call a tool result answers) in brackets.
	messageOpen  = regexp.MustCompile(`^\[(system|user|assistant|tool)(?: [^\]\n]*)?\] ?`)
	summaryBlock = regexp.MustCompile(`(?s)<summary part="\d+">\n(.*?)\n</summary>`)
)

func (s *StandIn) handle(w http.ResponseWriter, r *http.Request) {
	req, _, ok := fakeprovider.ReadRequest(w, r)
	if !ok {
		return
	}
	// The task is in the first user turn (a reminder, when the service
	// sends one, follows the model's answer).
	var prompt string
	in := 0
	for _, m := range req.Messages {
		in += s.count.Count(m.Content) + 4
		if m.Role == "user" && prompt == "" {
			prompt = m.Content
		}
	}
	t := time.NewTimer(s.delay)
	select {
	case <-r.Context().Done():
		t.Stop()
		return
	case <-t.C:
	}
	sreq := pipeline.SummaryRequest{Task: pipeline.TaskSummarise, MaxTokens: max(req.MaxTokens, req.MaxCompletionTokens)}
	if blocks := summaryBlock.FindAllStringSubmatch(prompt, -1); len(blocks) > 0 {
		sreq.Task = pipeline.TaskMerge
		if strings.Contains(prompt, "has grown too long") {
			sreq.Task = pipeline.TaskCondense
		}
		for _, b := range blocks {
			sreq.Messages = append(sreq.Messages, session.Message{Role: session.RoleUser, Content: session.TextContent(html.UnescapeString(b[1]))})
		}
	} else {
		sreq.Messages = transcriptMessages(prompt)
	}
	resp, err := s.sum.Summarize(context.WithoutCancel(r.Context()), sreq)
	if err != nil || strings.TrimSpace(resp.Text) == "" {
		fakeprovider.WriteError(w, http.StatusInternalServerError)
		return
	}
	out := s.count.Count(resp.Text)
	s.calls.Add(1)
	s.inTokens.Add(int64(in))
	s.outTokens.Add(int64(out))
	if r.Header.Get("X-Compactor-Purpose") == pipeline.PurposePreparation {
		s.prepCalls.Add(1)
		s.prepIn.Add(int64(in))
		s.prepOut.Add(int64(out))
	}
	fakeprovider.WriteCompletion(w, s.calls.Load(), req.Model, resp.Text, in, out)
}

// transcriptMessages reads the messages of a prompt's transcript: a line
// that opens with a role in brackets starts one, and the lines up to the
// next are its text.
func transcriptMessages(prompt string) []session.Message {
	_, body, _ := strings.Cut(prompt, "<transcript>\n")
	body, _, _ = strings.Cut(body, "\n</transcript>")
	var out []session.Message
	var text []string
	flush := func() {
		if len(out) > 0 {
			out[len(out)-1].Content = session.TextContent(strings.TrimSpace(html.UnescapeString(strings.Join(text, "\n"))))
		}
	}
	for _, line := range strings.Split(body, "\n") {
		if m := messageOpen.FindStringSubmatch(line); m != nil {
			flush()
			out = append(out, session.Message{Role: session.Role(m[1])})
			text = []string{line[len(m[0]):]}
			continue
		}
		text = append(text, line)
	}
	flush()
	return out
}
