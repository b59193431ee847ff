package contract

// FactSheet is the contract as data: what `compactor contract --json`
// prints, for clients in other languages to test their own copy against.
type FactSheet struct {
	Service  string            `json:"service"`
	Subjects map[string]string `json:"subjects"`
	Headers  map[string]string `json:"headers"`
	Codes    []Code            `json:"codes"`
	Statuses []Status          `json:"statuses"`
	Routes   []Route           `json:"routes"`
	Streams  map[string]string `json:"streams"`
	Triggers []Trigger         `json:"triggers"`
	// SessionID is the session-id rule: its pattern, bound and error.
	SessionID struct {
		Pattern  string `json:"pattern"`
		MaxBytes int    `json:"max_bytes"`
		Error    string `json:"error"`
	} `json:"session_id"`
	Limits map[string]int `json:"limits"`
	// Tools are the recall tools (RecallTools).
	Tools []ToolDef `json:"tools"`
	// CloudEvents is the binding's specversion and attribute header
	// prefix.
	CloudEvents struct {
		SpecVersion  string `json:"specversion"`
		HeaderPrefix string `json:"header_prefix"`
	} `json:"cloudevents"`
}

// Facts returns the contract as data.
func Facts() FactSheet {
	f := FactSheet{
		Service: ServiceName,
		Subjects: map[string]string{
			"compact": SubjectCompact, "breaker_get": SubjectBreaker, "breaker_reset": SubjectReset, "breaker_list": SubjectBreakers,
			"session_create": SubjectCreate, "session_append": SubjectAppend, "session_context": SubjectContext,
			"session_message": SubjectMessage, "session_history": SubjectHistory, "session_delete": SubjectDelete,
			"session_upload": SubjectUpload, "session_list": SubjectList, "result_get": SubjectResult,
			"session_search": SubjectSearch, "session_expand": SubjectExpand,
		},
		Headers:  map[string]string{"error_code": HeaderErrorCode, "error": HeaderError},
		Codes:    Codes,
		Statuses: []Status{StatusNotApplied, StatusRetry, StatusFailed},
		Routes:   Routes,
		Streams: map[string]string{"request": RequestStream, "result": ResultStream, "dlq": DLQStream,
			"request_subjects": RequestSubjects, "result_subjects": ResultSubjects, "dlq_subjects": DLQSubjects},
		Triggers: []Trigger{TriggerOverBudget, TriggerOverflow, TriggerManual, TriggerNearBudget},
		Limits: map[string]int{"max_messages_per_call": MaxMessagesPerCall, "max_upload_part_bytes": MaxUploadPartBytes,
			"max_upload_parts": MaxUploadParts, "max_request_id_bytes": MaxRequestIDBytes,
			"max_search_hits": MaxSearchHits, "default_search_hits": DefaultSearchHits, "max_query_bytes": MaxQueryBytes,
			"snippet_tokens": SnippetTokens, "max_expand_messages": MaxExpandMessages, "max_expand_bytes": MaxExpandBytes,
			"max_tool_result_chars": MaxToolResultChars, "max_tenant_search_sessions": MaxTenantSearchSessions},
	}
	f.Tools = RecallTools
	f.SessionID.Pattern, f.SessionID.MaxBytes, f.SessionID.Error = SessionIDPattern, MaxSessionIDBytes, ErrSessionID.Error()
	f.CloudEvents.SpecVersion, f.CloudEvents.HeaderPrefix = SpecVersion, HeaderPrefix
	return f
}
