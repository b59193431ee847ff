package pipeline

// Decision reasons reported by Overflow.
const (
	DecisionTokens   = "tokens_over_limit"
	DecisionMessages = "messages_over_max"
	DecisionOverflow = "model_reported_overflow"
	DecisionManual   = "manual_request"
	DecisionFits     = "fits"
	DecisionEmpty    = "empty_session"
)

// OverflowInput is what the overflow stage looks at.
type OverflowInput struct {
	Trigger     Trigger
	Tokens      int // the context's tokens as the model would count them
	Limit       int
	Messages    int // messages in the context (pinned + summary + tail)
	MaxMessages int // zero disables the message-count signal
	Empty       bool
}

// Decision is the overflow stage's answer.
type Decision struct {
	Needed bool
	Reason string
}

// Overflow decides whether a session needs compacting. It is pure: the
// same input always gives the same decision, so a retried request decides
// the same way. The model's own overflow report and a manual request win
// over the counts; then tokens over the limit; then messages over the max.
func Overflow(in OverflowInput) Decision {
	switch {
	case in.Empty:
		return Decision{Reason: DecisionEmpty}
	case in.Trigger == TriggerOverflow:
		return Decision{Needed: true, Reason: DecisionOverflow}
	case in.Trigger == TriggerManual:
		return Decision{Needed: true, Reason: DecisionManual}
	case in.Tokens > in.Limit:
		return Decision{Needed: true, Reason: DecisionTokens}
	case in.MaxMessages > 0 && in.Messages > in.MaxMessages:
		return Decision{Needed: true, Reason: DecisionMessages}
	}
	return Decision{Reason: DecisionFits}
}
